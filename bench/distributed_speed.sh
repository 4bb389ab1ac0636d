#!/usr/bin/env bash
# Multi-worker speed on this machine: wmt_transformer/tiny on the bundled
# gettext-en-de, the same global batch of tokens, alternated for ROUNDS
# rounds:
#   one-thread: one process, one thread (OPENBLAS_NUM_THREADS=1 too)
#   default:    one process as the experiment ships (every core, for
#               LibTorch's and Garden's kernels and OpenBLAS's products)
#   workers:    WORKERS processes from garden launch (one thread each)
#   ps:         with PS=K set, also WORKERS workers with K parameter servers
#               and their chief (garden launch --ps=K), asynchronous: every
#               worker step is a whole global batch, so its steps/s compares
#               with the others' as they are
#   SHARDING=false: the workers read the global batches one process reads and
#               keep every N-th row (task.train_data.sharding: false), so
#               every worker's batch has the same shape each step; the
#               default (true, Model Garden's) gives each its own records
#   WORKER_OVERRIDES=k=v,...: added to the workers' --params_override only
#               (e.g. runtime.bucket_cap_mb=100)
#   BOUND=1:    also WORKERS one-thread processes that never communicate,
#               side by side, each with its share of the global batch: what
#               this machine allows WORKERS workers (their summed tokens/s
#               over the one thread's)
#   VS_OVERRIDES=k=v,...: the workers run a second time in each round with
#               these added too (e.g. runtime.gradient_compression=fp16), so
#               the two settings compare within one round; VS_FACTOR=F (1)
#               multiplies that run's ratio, for a setting with F times the
#               global batch
#   SCALE=weak: every worker keeps the one process's batch (the workers'
#               global batch is WORKERS times as large, as with PyTorch DDP's
#               per-process batch); the ratio is then WORKERS x the workers'
#               steps/s over the one thread's. The default, strong, splits
#               one global batch among the workers
# Prints, per run, the median steps/s over the loops after the first (with
# equal global batches the ratio of steps/s is the ratio of tokens/s) and the
# mean all_reduce_wait_ms (what a worker still waited for the gradient
# all-reduce after backward ended).
#
#   [PS=K] [SHARDING=false] [SCALE=weak] [WORKER_OVERRIDES=...] [VS_OVERRIDES=... [VS_FACTOR=F]] [BOUND=1] bash bench/distributed_speed.sh [WORKERS=2] [STEPS=100] [ROUNDS=2]
#   bash bench/distributed_speed.sh --smoke   # CI: 2 workers, 4 steps of 1-step loops
set -euo pipefail
cd "$(dirname "$0")/.."
garden=${GARDEN:-build/garden}
vocab=2000 loop=25
if [ "${1:-}" = "--smoke" ]; then
  set -- 2 4 1
  vocab=500 loop=1
fi
workers=${1:-2}
steps=${2:-100}
rounds=${3:-2}
# Below Linux's ephemeral ports, apart for each run of the script.
port=$((20000 + $$ % 10000))
ps=${PS:-0}
sharding=${SHARDING:-true}
scale=${SCALE:-strong}
case $scale in
  strong) worker_batch="" factor=1 ;;
  # wmt_transformer/tiny's token budget a batch, per worker.
  weak) worker_batch=",task.train_data.global_batch_size=$((3072 * workers))" factor=$workers ;;
  *) echo "distributed_speed.sh: SCALE must be strong or weak, not '$scale'" >&2; exit 2 ;;
esac
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
overrides="task.train_data.input_path=data/translation/en_de_train.tsv"
overrides+=",task.validation_data.input_path=data/translation/en_de_valid.tsv"
overrides+=",task.sentencepiece_vocab_size=$vocab,runtime.seed=1,trainer.train_steps=$steps"
overrides+=",trainer.steps_per_loop=$loop,trainer.summary_interval=$loop,trainer.checkpoint_interval=$steps"
# No intra-op setting: the experiment's 0 is every core, and OMP_NUM_THREADS=1
# (the one-thread run's, and what garden launch gives each of 2 workers on
# 2 cores) makes it one thread.

# The median of the steps/s of every loop after the first, and the mean wait.
summarize() {
  grep 'train | step' "$1" | grep -v '^\[rank [1-9]' | grep -v '^\[worker\|^\[ps' | tail -n +2 |
    sed -E 's/.*steps_per_second: ([0-9.]+).*/\1/' | sort -n |
    awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%.3f", m}'
}
wait_ms() {
  grep 'rank 0.*all_reduce_wait_ms' "$1" | tail -n +2 |
    sed -E 's/.*all_reduce_wait_ms: ([0-9.]+).*/\1/' |
    awk '{s+=$1; n++} END {if (n) printf "%.2f", s/n; else printf "-"}'
}

# run_workers NAME PORT [OVERRIDES]: WORKERS synchronous workers into $scratch/NAME.
run_workers() {
  "$garden" launch --nproc_per_node="$workers" --master_port="$2" -- train \
    --experiment=wmt_transformer/tiny --mode=train --model_dir="$scratch/$1" \
    --params_override="$overrides,runtime.distribution_strategy=multi_worker_mirrored,task.train_data.sharding=$sharding$worker_batch${WORKER_OVERRIDES:+,$WORKER_OVERRIDES}${3:+,$3}" \
    >"$scratch/$1.log" 2>&1
}

ratio() { awk -v a="$1" -v b="$2" -v f="${3:-1}" 'BEGIN {printf "%.2f", f * a / b}'; }
for round in $(seq 1 "$rounds"); do
  rm -rf "$scratch"/one "$scratch"/default "$scratch"/many "$scratch"/vs "$scratch"/ps "$scratch"/alone*
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$garden" train --experiment=wmt_transformer/tiny \
    --mode=train --model_dir="$scratch/one" --params_override="$overrides" >"$scratch/one.log" 2>&1
  "$garden" train --experiment=wmt_transformer/tiny --mode=train --model_dir="$scratch/default" \
    --params_override="$overrides" >"$scratch/default.log" 2>&1
  run_workers many $((port + round))
  one=$(summarize "$scratch/one.log")
  default=$(summarize "$scratch/default.log")
  many=$(summarize "$scratch/many.log")
  line="round $round: one-thread $one | default $default | $workers workers $many steps/s"
  [ "$scale" = weak ] && line+=" (each a one-process batch)"
  line+=" | tokens/s workers / one-thread $(ratio "$many" "$one" "$factor")"
  line+=" | workers / default $(ratio "$many" "$default" "$factor")"
  line+=" | all_reduce_wait_ms $(wait_ms "$scratch/many.log")"
  if [ -n "${VS_OVERRIDES:-}" ]; then
    run_workers vs $((port + 25 + round)) "$VS_OVERRIDES"
    vs=$(summarize "$scratch/vs.log")
    line+=" | with $VS_OVERRIDES: $vs steps/s, tokens/s / one-thread"
    line+=" $(ratio "$vs" "$one" "$(awk -v a="$factor" -v b="${VS_FACTOR:-1}" 'BEGIN {print a * b}')")"
    line+=", all_reduce_wait_ms $(wait_ms "$scratch/vs.log")"
  fi
  if [ "${BOUND:-0}" = 1 ]; then
    pids=()
    for k in $(seq 1 "$workers"); do
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$garden" train --experiment=wmt_transformer/tiny \
        --mode=train --model_dir="$scratch/alone$k" \
        --params_override="$overrides,task.train_data.global_batch_size=$((3072 * factor / workers))" \
        >"$scratch/alone$k.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do
      wait "$pid" || { echo "distributed_speed.sh: a process alone failed:" >&2
        tail -n 3 "$scratch"/alone*.log >&2; exit 1; }
    done
    total=0
    for k in $(seq 1 "$workers"); do
      total=$(awk -v a="$total" -v b="$(summarize "$scratch/alone$k.log")" 'BEGIN {print a + b}')
    done
    # Each has 1/WORKERS of the batch (of WORKERS x with SCALE=weak).
    line+=" | $workers alone, no communication: tokens/s / one-thread"
    line+=" $(ratio "$total" "$one" "$(awk -v f="$factor" -v w="$workers" 'BEGIN {print f / w}')")"
  fi
  if [ "$ps" -gt 0 ]; then
    "$garden" launch --nproc_per_node="$workers" --ps="$ps" --master_port=$((port + 50 + round)) -- \
      train --experiment=wmt_transformer/tiny --mode=train --model_dir="$scratch/ps" \
      --params_override="$overrides,runtime.distribution_strategy=parameter_server" \
      >"$scratch/ps.log" 2>&1
    async=$(summarize "$scratch/ps.log")
    line+=" | $workers workers + $ps ps $async steps/s, / one-thread $(ratio "$async" "$one")"
  fi
  echo "$line"
done
