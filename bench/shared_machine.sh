#!/usr/bin/env bash
# Two runs sharing the machine (issue 77): an experiment alone, then two
# copies at once, each for STEPS steps; prints each run's steps/s (the mean
# of its log lines after the first, which holds the start-up) and the pair's
# total against one alone.
#
#   bash bench/shared_machine.sh [EXPERIMENT] [STEPS] [GARDEN]
#   (defaults: wmt_transformer/demo, 400, build/garden; extra overrides in
#    SHARED_OVERRIDES, e.g. task.sentencepiece_model_path=... to skip
#    SentencePiece training)
set -euo pipefail
experiment=${1:-wmt_transformer/demo}
steps=${2:-400}
garden=${3:-build/garden}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
overrides="trainer.train_steps=$steps,trainer.validation_interval=1000000,trainer.checkpoint_interval=1000000"
[ -n "${SHARED_OVERRIDES:-}" ] && overrides="$overrides,$SHARED_OVERRIDES"
run() {  # NAME
  "$garden" train --experiment="$experiment" --mode=train --model_dir="$work/$1" \
    --params_override="$overrides" >"$work/$1.log" 2>&1
}
rate() {  # NAME: mean steps/s of the log lines after the first
  grep -o '| [0-9.]* steps/s' "$work/$1.log" | awk 'NR > 1 { s += $2; n++ } END { if (n) printf "%.2f", s / n; else print "nan" }'
}
run alone
run first & first=$!
run second
wait "$first"
alone=$(rate alone) a=$(rate first) b=$(rate second)
echo "alone:    $alone steps/s"
echo "together: $a + $b steps/s"
awk -v x="$alone" -v a="$a" -v b="$b" 'BEGIN { printf "pair / alone: %.2fx (each %.2fx and %.2fx)\n", (a + b) / x, a / x, b / x }'
grep -h "cpu share" "$work"/first.log "$work"/second.log | sed 's/^/  /' || true
