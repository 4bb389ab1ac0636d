#!/usr/bin/env bash
# A machine shared with other work (issue 77), on the cores this machine has.
# Each pairing is measured against the same work alone, in one run of this
# script:
#   runs   two EXPERIMENT trainings at once, STEPS steps each: each run's
#          steps/s and the pair's total against one alone;
#   serve  a training beside `garden serve` (tabular/iris's export) under a
#          steady RATE requests/s (hey, QPS per client x 4 clients): the
#          training's steps/s against alone, and the server's p50 / p99
#          alone and beside the training;
#   eval   a training beside `continuous_eval` following its model_dir
#          (checkpoints every 100 steps, each evaluated): the training's
#          steps/s against alone, and the evaluations made;
#   peer   PyTorch's translation step (bench/peers/peer_translation.py,
#          the demo's sizes, batch 160 x 12 tokens, PyTorch's default
#          threads), one process alone and two at once.
# A training's steps/s is the mean of its log lines after the first (which
# holds the start-up).
#
#   bash bench/shared_machine.sh [STEPS=400] [PAIRINGS="runs serve eval peer"]
#   (GARDEN=build/garden, EXPERIMENT=wmt_transformer/demo, RATE=200; extra
#    overrides in SHARED_OVERRIDES, e.g. task.sentencepiece_model_path=...
#    to skip SentencePiece training; the peer needs `bash scripts/setup.sh
#    --bench`, serve needs hey from it)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-400}
pairings=${2:-runs serve eval peer}
garden=${GARDEN:-build/garden}
experiment=${EXPERIMENT:-wmt_transformer/demo}
rate=${RATE:-200}
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
overrides="trainer.train_steps=$steps,trainer.validation_interval=1000000,trainer.checkpoint_interval=100,runtime.seed=1"
[ -n "${SHARED_OVERRIDES:-}" ] && overrides="$overrides,$SHARED_OVERRIDES"

train() {  # NAME [MODE [LOG]]: trains (or evaluates) in $work/NAME, logs to $work/LOG.log
  "$garden" train --experiment="$experiment" --mode="${2:-train}" --model_dir="$work/$1" \
    --params_override="$overrides" >"$work/${3:-$1}.log" 2>&1
}
steps_per_second() {  # NAME: mean steps/s of the log lines after the first
  grep -o '| [0-9.]* steps/s' "$work/$1.log" |
    awk 'NR > 1 { s += $2; n++ } END { if (n) printf "%.2f", s / n; else print "nan" }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
shares() {  # LOG...: CpuShare's changes
  grep -h "cpu share" "$@" | sed 's/^[0-9-]* //; s/^/    /' || true
}

echo "$(nproc) cores; $experiment, $steps steps a run"
train alone
alone=$(steps_per_second alone)
echo "training alone: $alone steps/s"
# The other runs share the first one's SentencePiece model (an evaluator
# started beside its training needs it from the start).
if [ -f "$work/alone/sentencepiece.model" ] && [[ "$overrides" != *sentencepiece_model_path* ]]; then
  overrides="$overrides,task.sentencepiece_model_path=$work/alone/sentencepiece.model"
fi

if [[ " $pairings " == *" runs "* ]]; then
  echo
  echo "== two trainings at once"
  train first & first=$!
  train second
  wait "$first"
  a=$(steps_per_second first) b=$(steps_per_second second)
  echo "together: $a + $b steps/s; pair / alone $(ratio "$(awk -v a="$a" -v b="$b" 'BEGIN { print a + b }')" "$alone")x (each $(ratio "$a" "$alone")x and $(ratio "$b" "$alone")x)"
  shares "$work/first.log" "$work/second.log"
fi

if [[ " $pairings " == *" serve "* ]]; then
  echo
  echo "== a training beside garden serve under $rate requests/s"
  command -v hey >/dev/null || { echo "hey is not installed: bash scripts/setup.sh --bench" >&2; exit 1; }
  "$garden" train --experiment=tabular/iris --mode=train --model_dir="$work/iris" \
    --params_override=runtime.seed=1 >"$work/iris.log" 2>&1
  "$garden" export --experiment=tabular/iris --model_dir="$work/iris" --export_dir="$work/iris_export" >/dev/null
  echo '{"instances": [{"sepal_length": 6.1, "sepal_width": 2.8, "petal_length": 4.7, "petal_width": 1.2}]}' >"$work/iris.json"
  port=18611
  "$garden" serve --export_dir="$work/iris_export" --port=$port --grpc_port=-1 --model_name=m 2>"$work/serve.log" &
  server=$!
  pids+=("$server")
  available() {  # the model's status route answers AVAILABLE
    { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
    printf 'GET /v1/models/m HTTP/1.0\r\n\r\n' >&3
    local status=1
    grep -q AVAILABLE <&3 && status=0
    exec 3>&-
    return $status
  }
  for _ in $(seq 600); do available && break; sleep 0.1; done
  load() {  # SECONDS OUT: RATE requests/s for SECONDS (or until SIGINT)
    hey -z "$1s" -c 4 -q $((rate / 4)) -m POST -T application/json -D "$work/iris.json" \
      "http://127.0.0.1:$port/v1/models/m:predict" >"$2"
  }
  latency() {  # HEY_OUTPUT: "requests/s, p50, p99, non-200 answers"
    awk '/Requests\/sec/ { r = $2 } / 50% in/ { p50 = $3 * 1000 } / 99% in/ { p99 = $3 * 1000 }
      /Status code distribution/ { s = 1; next } /Error distribution/ { s = 0; e = 1; next }
      s && match($0, /\[[0-9]+\]/) { if (substr($0, RSTART + 1, RLENGTH - 2) != 200) bad += $2 }
      e && match($0, /\[[0-9]+\]/) { bad += substr($0, RSTART + 1, RLENGTH - 2) }
      END { printf "%.0f requests/s, p50 %.1f ms, p99 %.1f ms, %d failed", r, p50, p99, bad }' "$1"
  }
  load 20 "$work/hey_alone.txt"
  echo "server alone:            $(latency "$work/hey_alone.txt")"
  load 600 "$work/hey_beside.txt" & hey_pid=$!
  pids+=("$hey_pid")
  train beside_server
  kill -INT "$hey_pid"; wait "$hey_pid" || true
  s=$(steps_per_second beside_server)
  echo "server beside training:  $(latency "$work/hey_beside.txt")"
  echo "training beside server:  $s steps/s, $(ratio "$s" "$alone")x alone"
  shares "$work/beside_server.log" "$work/serve.log"
  kill -TERM "$server"; wait "$server" || true
fi

if [[ " $pairings " == *" eval "* ]]; then
  echo
  echo "== a training beside continuous_eval on its model_dir"
  train followed & trainer=$!
  train followed continuous_eval evaluator || true
  wait "$trainer"
  s=$(steps_per_second followed)
  evaluations=$(grep -c ' eval | step' "$work/evaluator.log" || true)
  echo "training beside continuous_eval: $s steps/s, $(ratio "$s" "$alone")x alone ($evaluations checkpoints evaluated)"
  shares "$work/followed.log" "$work/evaluator.log"
fi

if [[ " $pairings " == *" peer "* ]]; then
  echo
  echo "== PyTorch's peer (bench/peers/peer_translation.py --preset demo), two processes at once"
  peer() { /usr/bin/python3 bench/peers/peer_translation.py --preset demo --batch 160 --length 12 \
    --steps 200 --warmup 10 | /usr/bin/python3 -c 'import json, sys; print("%.2f" % (1000 / json.load(sys.stdin)["step_ms"]))'; }
  p_alone=$(peer)
  peer >"$work/peer_first" & first=$!
  p_b=$(peer)
  wait "$first"
  p_a=$(cat "$work/peer_first")
  echo "peer alone: $p_alone steps/s; together: $p_a + $p_b steps/s; pair / alone $(ratio "$(awk -v a="$p_a" -v b="$p_b" 'BEGIN { print a + b }')" "$p_alone")x"
fi
