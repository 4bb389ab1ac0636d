#!/usr/bin/env bash
# Chaos runs (docs/reliability.md): stops a training run at random moments,
# restarts it each time, then checks that nothing was lost and that it ends
# bitwise where an undisturbed run ends.
#
# usage: scripts/chaos.sh [STOPS] [iris|demo|electra|disk ...] [--ways=W[,W...]]
#   (default: 20 iris demo electra disk, every way)
#   iris     tabular/iris, 4000 steps, a checkpoint and summaries every 100
#   demo     wmt_transformer/demo made small and deterministic: SentencePiece
#            training at start, 60 steps, a checkpoint and summaries every 5
#   electra  electra/tiny made small, on records create_pretraining_data
#            makes from the bundled man pages: 60 steps, a checkpoint every 5
#   ways: how each stop reaches the run, STOPS times each:
#     kill     SIGKILL to the process
#     pid      SIGTERM to the process
#     group    SIGTERM to its process group (as a job runner or a terminal)
#     timeout  GNU timeout -s TERM (the process, its group, then SIGCONT)
# For each, one undisturbed run (timed: start-up, then T of training), then
# the same command stopped STOPS times and restarted: odd stops at a random
# moment in [0.05 s, start-up + T/STOPS], even ones at a random moment in
# [0, T/STOPS] after the run started training (so stops land in start-up,
# SentencePiece training, steps, evaluations, summaries and checkpoint writes
# of runs still under way), then run to the end. Checked:
#   - every restart resumes from the newest checkpoint on disk (its log
#     names it) and never from one older than the previous restart's;
#   - a SIGKILL loses at most one checkpoint interval of the steps the run
#     had logged; a SIGTERM loses none: the run exits 143 with one line, the
#     checkpoint of the step it reached (or, before its first step, nothing
#     to save), and nothing on stderr that a sanitizer or a crash prints;
#   - the final checkpoint is byte-identical to the undisturbed run's.
#   disk  (root: it mounts tmpfs) tabular/iris with its model_dir on a full
#         disk (a 200 KiB tmpfs) and on a read-only one: the run stops with
#         one line naming the file and the reason, exits non-zero, and the
#         newest checkpoint on the disk still loads (`garden export` of it).
# GARDEN=build-san/garden runs the sanitizer build (scripts/sanitize.sh).
# Prints one summary line per experiment and way; exits 1 when a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
kills=20
experiments=()
ways=(kill pid group timeout)
for arg in "$@"; do
  case "$arg" in
    --ways=*) IFS=',' read -r -a ways <<<"${arg#--ways=}" ;;
    [0-9]*) kills=$arg ;;
    *) experiments+=("$arg") ;;
  esac
done
[ ${#experiments[@]} -eq 0 ] && experiments=(iris demo electra disk)
for way in "${ways[@]}"; do
  case "$way" in kill | pid | group | timeout) ;; *) echo "chaos: unknown way '$way' (kill, pid, group, timeout)" >&2; exit 2 ;; esac
done
garden=${GARDEN:-$PWD/build/garden}
case "$garden" in /*) ;; *) garden=$PWD/$garden ;; esac
work=$(mktemp -d)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done
  if [ -n "${CHAOS_KEEP:-}" ]; then echo "chaos: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
failed=0

settings() {  # settings NAME -> "EXPERIMENT|OVERRIDES|STEPS|INTERVAL"
  case "$1" in
    iris) echo "tabular/iris|trainer.train_steps=4000,trainer.steps_per_loop=100,trainer.checkpoint_interval=100,trainer.summary_interval=100,trainer.validation_interval=1000,trainer.max_to_keep=3,runtime.seed=7|4000|100" ;;
    demo) echo "wmt_transformer/demo|task.sentencepiece_vocab_size=300,task.model.embedding_width=32,task.model.encoder.num_layers=1,task.model.decoder.num_layers=1,task.model.encoder.intermediate_size=64,task.model.decoder.intermediate_size=64,task.train_data.global_batch_size=512,trainer.train_steps=60,trainer.steps_per_loop=5,trainer.checkpoint_interval=5,trainer.summary_interval=5,trainer.validation_interval=1000,trainer.max_to_keep=3,runtime.seed=7|60|5" ;;
    electra) echo "electra/tiny|task.model.sequence_length=64,task.model.num_masked_tokens=10,task.model.discriminator_encoder.bert.vocab_size=600,task.model.discriminator_encoder.bert.hidden_size=32,task.model.discriminator_encoder.bert.num_layers=1,task.model.discriminator_encoder.bert.intermediate_size=64,task.model.discriminator_encoder.bert.embedding_size=32,task.model.generator_encoder.bert.vocab_size=600,task.model.generator_encoder.bert.hidden_size=16,task.model.generator_encoder.bert.num_layers=1,task.model.generator_encoder.bert.intermediate_size=32,task.model.generator_encoder.bert.embedding_size=32,task.train_data.seq_length=64,task.train_data.max_predictions_per_seq=10,task.validation_data.seq_length=64,task.validation_data.max_predictions_per_seq=10,task.train_data.global_batch_size=16,task.train_data.input_path=$work/electra-data/train.tfrecord,trainer.train_steps=60,trainer.steps_per_loop=5,trainer.checkpoint_interval=5,trainer.summary_interval=5,trainer.validation_interval=1000,trainer.max_to_keep=3,runtime.seed=7|60|5" ;;
    *) echo "chaos: unknown run '$1' (iris, demo, electra, disk)" >&2; exit 2 ;;
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


# Records for electra: a SentencePiece model and create_pretraining_data's
# output of the bundled man pages, made once.
electra_data() {
  local data="$work/electra-data"
  [ -f "$data/train.tfrecord" ] && return 0
  mkdir -p "$data"
  "$garden" spm train --input=data/pretraining/man_en_train.txt --model_prefix="$data/sp" \
    --vocab_size=600 --pad_id=0 --unk_id=1 --bos_id=-1 --eos_id=-1 \
    --user_defined_symbols='[CLS],[SEP],[MASK]' >/dev/null 2>&1
  "$garden" create_pretraining_data --input_file=data/pretraining/man_en_train.txt \
    --output_file="$data/train.tfrecord" --sp_model_file="$data/sp.model" --max_seq_length=64 \
    --max_predictions_per_seq=10 --dupe_factor=1 >/dev/null 2>&1
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
# What a crash or a sanitizer leaves on stderr.
crashed() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault|Aborted|corrupted|double free|free\(\)|terminate called|core dumped' "$1"; }

# chaos NAME WAY: the undisturbed run is in $work/NAME-whole already.
chaos() {
  local name=$1 way=$2
  local dir="$work/$name-run"
  rm -rf "$dir"
  local restarts=0 lost_max=0 stale=0 last_restored=0 in_startup=0 in_spm=0 in_training=0
  local in_write=0 finished=0 bad_stops=0 crashes=0 not_resumed=0 expected_restore=""
  for ((k = 1; k <= kills; k++)); do
    local log="$work/$name-$way-$k.log" delay pid status=0
    if ((k % 2 == 1)); then
      # Anywhere from the start: start-up, SentencePiece training, steps.
      delay=$(awk -v d="$startup" -v t="$slice" -v s="$RANDOM" 'BEGIN { srand(s); printf "%.3f", 0.05 + rand() * (d + t) }')
    else
      delay=""
    fi
    if [ "$way" = timeout ] && [ -n "$delay" ]; then
      # timeout itself delivers: to the process, its group, then SIGCONT.
      timeout -s TERM "$delay" "$garden" train --experiment="$experiment" --mode=train \
        --model_dir="$dir" --params_override="$overrides" >"$log" 2>&1 || status=$?
      [ "$status" -eq 124 ] && status=143  # timeout's own code for "it timed out"
      [ "$status" -eq 0 ] && finished=$((finished + 1))
    else
      if [ "$way" = group ] || [ "$way" = timeout ]; then
        setsid "$garden" train --experiment="$experiment" --mode=train --model_dir="$dir" \
          --params_override="$overrides" >"$log" 2>&1 &
      else
        "$garden" train --experiment="$experiment" --mode=train --model_dir="$dir" \
          --params_override="$overrides" >"$log" 2>&1 &
      fi
      pid=$!
      if [ -n "$delay" ]; then
        sleep "$delay"
      else
        # Once it trains (restored, or past its first loop): steps, summaries
        # and checkpoint writes.
        for ((w = 0; w < 3000; w++)); do
          grep -qE 'restored .* at step|step [0-9]+/' "$log" 2>/dev/null && break
          kill -0 "$pid" 2>/dev/null || break
          sleep 0.01
        done
        sleep "$(awk -v t="$slice" -v s="$RANDOM" 'BEGIN { srand(s); printf "%.3f", rand() * t }')"
      fi
      local sent=0
      case "$way" in
        kill) kill -9 "$pid" 2>/dev/null && sent=1 ;;
        pid) kill -TERM "$pid" 2>/dev/null && sent=1 ;;
        group) kill -TERM -- "-$pid" 2>/dev/null && sent=1 ;;
        timeout)
          kill -TERM "$pid" 2>/dev/null && sent=1
          kill -TERM -- "-$pid" 2>/dev/null || true
          kill -CONT "$pid" 2>/dev/null || true
          kill -CONT -- "-$pid" 2>/dev/null || true
          ;;
      esac
      [ "$sent" -eq 0 ] && finished=$((finished + 1))
      wait "$pid" 2>/dev/null || status=$?
    fi
    crashed "$log" && crashes=$((crashes + 1))
    # Where the stop landed, by what the run had logged, and (SIGKILL)
    # whether it cut a checkpoint write short (its temporary file is left,
    # for the next start to remove).
    if grep -qE 'restored .* at step|step [0-9]+/' "$log"; then
      in_training=$((in_training + 1))
    elif grep -q 'training a joint SentencePiece' "$log" && ! grep -q 'SentencePiece model written' "$log"; then
      in_spm=$((in_spm + 1))
    else
      in_startup=$((in_startup + 1))
    fi
    if ls "$dir" 2>/dev/null | grep -qE '^ckpt-[0-9]+\.tmp-'; then in_write=$((in_write + 1)); fi
    # The steps it had reached, by its progress lines ("step N/M").
    local reached restored on_disk
    reached=$( (grep -oE 'step [0-9]+/' "$log" || true) | tr -dc '0-9\n' | tail -1)
    restored=$( (grep -oE 'restored .* at step [0-9]+' "$log" || true) | grep -oE '[0-9]+$' | tail -1 || true)
    if [ -n "$restored" ]; then
      restarts=$((restarts + 1))
      if [ "$restored" -lt "$last_restored" ]; then stale=$((stale + 1)); fi
      last_restored=$restored
    fi
    # The checkpoint the previous stop saved is the one this run restores
    # (unless it stopped before it restored anything).
    if [ -n "$expected_restore" ]; then
      if [ -n "$restored" ]; then
        [ "$restored" = "$expected_restore" ] || not_resumed=$((not_resumed + 1))
        expected_restore=""
      elif grep -qE 'step [0-9]+/' "$log"; then
        not_resumed=$((not_resumed + 1))
        expected_restore=""
      fi
    fi
    if [ "$way" != kill ] && [ "$status" -ne 0 ]; then
      # One line, 143: a checkpoint of the step reached, or nothing to save.
      local last
      last=$(tail -1 "$log")
      if [ "$status" -ne 143 ]; then
        bad_stops=$((bad_stops + 1))
      elif [ ! -s "$log" ]; then
        :  # still loading its libraries, before main(): the default action ended it
      elif [[ "$last" =~ ^garden:\ received\ SIGTERM\ at\ step\ ([0-9]+)\;\ saved\ .*/ckpt-([0-9]+)\;\ run\ the\ same\ command\ to\ resume$ ]]; then
        expected_restore=${BASH_REMATCH[1]}
        [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] || bad_stops=$((bad_stops + 1))
        [ "${reached:-0}" -le "${BASH_REMATCH[1]}" ] || bad_stops=$((bad_stops + 1))
      elif [[ "$last" =~ ^garden:\ received\ SIGTERM\ (before|while) ]] || [ "$last" = "garden: stopped by SIGTERM" ]; then
        :
      else
        bad_stops=$((bad_stops + 1))
      fi
    fi
    # What the next restart will find: the newest checkpoint on disk.
    on_disk=$( (ls "$dir" 2>/dev/null || true) | (grep -oE '^ckpt-[0-9]+$' || true) | grep -oE '[0-9]+' | sort -n | tail -1 || true)
    if [ -n "$reached" ]; then
      local lost=$((reached - ${on_disk:-0}))
      [ "$lost" -gt "$lost_max" ] && lost_max=$lost
    fi
  done
  local final="$work/$name-$way-final.log"
  if ! run "$dir" "$final"; then
    echo "chaos: $name $way: the last restart failed:" >&2
    tail -5 "$final" >&2
    failed=1
    return
  fi
  grep -qE 'restored .* at step' "$final" && restarts=$((restarts + 1))
  local same
  if cmp -s "$work/$name-whole/ckpt-$steps" "$dir/ckpt-$steps"; then same=yes; else same=NO; failed=1; fi
  local allowed=$interval
  [ "$way" != kill ] && allowed=0
  if [ "$lost_max" -gt "$allowed" ] || [ "$stale" -gt 0 ] || [ "$bad_stops" -gt 0 ] ||
    [ "$crashes" -gt 0 ] || [ "$not_resumed" -gt 0 ]; then
    failed=1
  fi
  local what="SIGKILL"
  [ "$way" != kill ] && what="SIGTERM ($way)"
  echo "chaos: $name: $kills stops by $what ($in_startup while starting, $in_spm while training SentencePiece, $in_training while training, $in_write left a checkpoint write cut short; $finished runs had ended before their stop), $bad_stops stops not ended as documented, $crashes crashes or sanitizer reports, $restarts restarts resumed from a checkpoint, $not_resumed not from the one their stop saved, most steps lost $lost_max (allowed $allowed), restores older than the previous $stale, final ckpt-$steps bitwise equal to the undisturbed run: $same"
}

for name in "${experiments[@]}"; do
  if [ "$name" = disk ]; then
    disk_case full
    disk_case readonly
    continue
  fi
  [ "$name" = electra ] && electra_data
  IFS='|' read -r experiment overrides steps interval <<<"$(settings "$name")"
  run() {  # run MODEL_DIR LOG
    "$garden" train --experiment="$experiment" --mode=train --model_dir="$1" \
      --params_override="$overrides" >"$2" 2>&1
  }
  # Both runs use the same model_dir path (params.yaml, and so each
  # checkpoint's header, holds it): the undisturbed run's is moved aside.
  dir="$work/$name-run"
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
  # Each restart may train about 1/STOPS of the run before its stop, so the
  # stops land in runs still under way.
  slice=$(awk -v d="$duration" -v s="$startup" -v k="$kills" 'BEGIN { printf "%.3f", (d - s) / (k > 0 ? k : 1) }')
  rm -rf "$work/$name-whole"
  mv "$dir" "$work/$name-whole"
  for way in "${ways[@]}"; do chaos "$name" "$way"; done
done
exit $failed
