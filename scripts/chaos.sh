#!/usr/bin/env bash
# Chaos runs (docs/reliability.md): kills a training run with SIGKILL at
# random moments and restarts it each time, then checks that nothing was
# lost and that it ends bitwise where an undisturbed run ends.
#
# usage: scripts/chaos.sh [KILLS] [iris|demo|disk ...]   (default: 20 iris demo disk)
#   iris  tabular/iris, 4000 steps, a checkpoint and summaries every 100
#   demo  wmt_transformer/demo made small and deterministic: SentencePiece
#         training at start, 60 steps, a checkpoint and summaries every 5
# For each, one undisturbed run (timed: start-up, then T of training), then
# the same command killed KILLS times and restarted: odd kills at a random
# moment in [0.05 s, start-up + T/KILLS], even ones at a random moment in
# [0, T/KILLS] after the run started training (so kills land in start-up,
# SentencePiece training, steps, summaries and checkpoint writes of runs
# still under way),
# then run to the end. Checked:
#   - every restart resumes from the newest checkpoint on disk (its log
#     names it) and never from one older than the previous restart's;
#   - no restart loses more than one checkpoint interval of the steps the
#     killed run had logged;
#   - the final checkpoint is byte-identical to the undisturbed run's.
#   disk  (root: it mounts tmpfs) tabular/iris with its model_dir on a full
#         disk (a 200 KiB tmpfs) and on a read-only one: the run stops with
#         one line naming the file and the reason, exits non-zero, and the
#         newest checkpoint on the disk still loads (`garden export` of it).
# Prints one summary line per experiment; exits 1 when a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-20}
shift || true
experiments=("$@")
[ ${#experiments[@]} -eq 0 ] && experiments=(iris demo disk)
garden=$PWD/build/garden
work=$(mktemp -d)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
failed=0

settings() {  # settings NAME -> "EXPERIMENT|OVERRIDES|STEPS|INTERVAL"
  case "$1" in
    iris) echo "tabular/iris|trainer.train_steps=4000,trainer.steps_per_loop=100,trainer.checkpoint_interval=100,trainer.summary_interval=100,trainer.validation_interval=1000,trainer.max_to_keep=3,runtime.seed=7|4000|100" ;;
    demo) echo "wmt_transformer/demo|task.sentencepiece_vocab_size=300,task.model.embedding_width=32,task.model.encoder.num_layers=1,task.model.decoder.num_layers=1,task.model.encoder.intermediate_size=64,task.model.decoder.intermediate_size=64,task.train_data.global_batch_size=512,trainer.train_steps=60,trainer.steps_per_loop=5,trainer.checkpoint_interval=5,trainer.summary_interval=5,trainer.validation_interval=1000,trainer.max_to_keep=3,runtime.seed=7|60|5" ;;
    *) echo "chaos: unknown run '$1' (iris, demo, disk)" >&2; exit 2 ;;
  esac
}

# disk_case NAME: trains iris on a small tmpfs until it fills (full) or on
# one remounted read-only after a first run (readonly).
disk_case() {
  local kind=$1 mnt="$work/mnt-$1" out="$work/$1.log"
  mkdir -p "$mnt"
  mount -t tmpfs -o size=200k tmpfs "$mnt"
  mounts+=("$mnt")
  local iris="trainer.steps_per_loop=100,trainer.checkpoint_interval=100,trainer.summary_interval=100,trainer.max_to_keep=100,runtime.seed=7"
  if [ "$kind" = readonly ]; then
    "$garden" train --experiment=tabular/iris --mode=train --model_dir="$mnt/run" \
      --params_override="$iris,trainer.train_steps=200" >/dev/null 2>&1
    mount -o remount,ro "$mnt"
  fi
  local status=0
  "$garden" train --experiment=tabular/iris --mode=train --model_dir="$mnt/run" \
    --params_override="$iris,trainer.train_steps=20000" >"$out" 2>&1 || status=$?
  local last errors
  last=$(grep -E '^garden: error: ' "$out" | tail -1 || true)
  errors=$(grep -cE '^garden: error: ' "$out" || true)
  local loads=no
  if "$garden" export --experiment=tabular/iris --model_dir="$mnt/run" \
    --export_dir="$work/export-$kind" >/dev/null 2>&1; then loads=yes; fi
  local newest
  newest=$( (ls "$mnt/run" 2>/dev/null || true) | (grep -oE '^ckpt-[0-9]+$' || true) | sort -t- -k2 -n | tail -1)
  local partial
  partial=$(find "$mnt/run" -name '*.tmp-*' 2>/dev/null | wc -l)
  echo "chaos: disk $kind: exit $status, $errors error line: ${last:-none}; newest checkpoint ${newest:-none} loads: $loads; partial files left: $partial"
  if [ "$status" -eq 0 ] || [ "$errors" -ne 1 ] || [ "$loads" != yes ] || [ "$partial" -ne 0 ]; then
    failed=1
  fi
}

for name in "${experiments[@]}"; do
  if [ "$name" = disk ]; then
    disk_case full
    disk_case readonly
    continue
  fi
  IFS='|' read -r experiment overrides steps interval <<<"$(settings "$name")"
  run() {  # run MODEL_DIR LOG
    "$garden" train --experiment="$experiment" --mode=train --model_dir="$1" \
      --params_override="$overrides" >"$2" 2>&1
  }
  # Both runs use the same model_dir path (params.yaml, and so each
  # checkpoint's header, holds it): the undisturbed run's is moved aside.
  dir="$work/$name-run"
  now() { date +%s.%N; }
  since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
  start=$(now)
  run "$dir" "$work/$name-whole.log" &
  whole=$!
  # Start-up: until its first progress line.
  until grep -qE 'step [0-9]+/' "$work/$name-whole.log" 2>/dev/null || ! kill -0 "$whole" 2>/dev/null; do
    sleep 0.01
  done
  startup=$(since "$start")
  wait "$whole"
  duration=$(since "$start")
  # Each restart may train about 1/KILLS of the run before its kill, so the
  # kills land in runs still under way.
  slice=$(awk -v d="$duration" -v s="$startup" -v k="$kills" 'BEGIN { printf "%.3f", (d - s) / (k > 0 ? k : 1) }')
  mv "$dir" "$work/$name-whole"
  restarts=0 lost_max=0 stale=0 last_restored=0 in_startup=0 in_spm=0 in_training=0 in_write=0 finished=0
  for ((k = 1; k <= kills; k++)); do
    log="$work/$name-kill$k.log"
    "$garden" train --experiment="$experiment" --mode=train --model_dir="$dir" \
      --params_override="$overrides" >"$log" 2>&1 &
    pid=$!
    if ((k % 2 == 1)); then
      # Anywhere from the start: start-up, SentencePiece training, steps.
      sleep "$(awk -v d="$startup" -v t="$slice" -v s="$RANDOM" 'BEGIN { srand(s); printf "%.3f", 0.05 + rand() * (d + t) }')"
    else
      # Once it trains (restored, or past its first loop): steps, summaries
      # and checkpoint writes.
      for ((w = 0; w < 3000; w++)); do
        grep -qE 'restored .* at step|step [0-9]+/' "$log" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
      done
      sleep "$(awk -v t="$slice" -v s="$RANDOM" 'BEGIN { srand(s); printf "%.3f", rand() * t }')"
    fi
    if ! kill -9 "$pid" 2>/dev/null; then finished=$((finished + 1)); fi
    wait "$pid" 2>/dev/null || true
    # Where the kill landed, by what the run had logged, and whether it cut
    # a checkpoint write short (its temporary file is left, for the next
    # start to remove).
    if grep -qE 'restored .* at step|step [0-9]+/' "$log"; then
      in_training=$((in_training + 1))
    elif grep -q 'training a joint SentencePiece' "$log" && ! grep -q 'SentencePiece model written' "$log"; then
      in_spm=$((in_spm + 1))
    else
      in_startup=$((in_startup + 1))
    fi
    if ls "$dir" 2>/dev/null | grep -qE '^ckpt-[0-9]+\.tmp-'; then in_write=$((in_write + 1)); fi
    # The steps it had reached, by its progress lines ("step N/M").
    reached=$( (grep -oE 'step [0-9]+/' "$log" || true) | tr -dc '0-9\n' | tail -1)
    restored=$( (grep -oE 'restored .* at step [0-9]+' "$log" || true) | grep -oE '[0-9]+$' | tail -1 || true)
    if [ -n "$restored" ]; then
      restarts=$((restarts + 1))
      if [ "$restored" -lt "$last_restored" ]; then stale=$((stale + 1)); fi
      last_restored=$restored
    fi
    # What the next restart will find: the newest checkpoint on disk.
    on_disk=$( (ls "$dir" 2>/dev/null || true) | (grep -oE '^ckpt-[0-9]+$' || true) | grep -oE '[0-9]+' | sort -n | tail -1 || true)
    if [ -n "$reached" ]; then
      lost=$((reached - ${on_disk:-0}))
      [ "$lost" -gt "$lost_max" ] && lost_max=$lost
    fi
  done
  final="$work/$name-final.log"
  if ! run "$dir" "$final"; then
    echo "chaos: $name: the last restart failed:" >&2
    tail -5 "$final" >&2
    failed=1
    continue
  fi
  grep -qE 'restored .* at step' "$final" && restarts=$((restarts + 1))
  if cmp -s "$work/$name-whole/ckpt-$steps" "$dir/ckpt-$steps"; then same=yes; else same=NO; failed=1; fi
  if [ "$lost_max" -gt "$interval" ] || [ "$stale" -gt 0 ]; then failed=1; fi
  echo "chaos: $name: $kills kills ($in_startup while starting, $in_spm while training SentencePiece, $in_training while training, $in_write of them mid-checkpoint-write; $finished runs had ended before their kill), $restarts restarts resumed from a checkpoint, most steps lost $lost_max (interval $interval), restores older than the previous $stale, final ckpt-$steps bitwise equal to the undisturbed run: $same"
done
exit $failed
