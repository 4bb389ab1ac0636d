#!/usr/bin/env bash
# All-reduce between simulated hosts: N network namespaces on a bridge
# (scripts/netns_hosts.sh, as root), one allreduce_bench process in each,
# over real TCP between their network stacks. Prints rank 0's JSON lines.
#   bash bench/allreduce_hosts.sh [HOSTS=2] [MB=0.1,1,6,24] [ITERS=60]
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=${1:-2} mb=${2:-0.1,1,6,24} iters=${3:-60}
bench=$PWD/build/bench/allreduce_bench
[ -x "$bench" ] || { echo "allreduce_hosts: build first (bash scripts/build.sh)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export BENCH=$bench MB=$mb ITERS=$iters OUT=$out HOSTS=$hosts
scripts/netns_hosts.sh with "$hosts" -- bash -c '
  read -r -a names <<<"$NETNS_HOSTS"; read -r -a addrs <<<"$NETNS_ADDRS"
  for ((r = 0; r < HOSTS; r++)); do
    "$NETNS_SCRIPT" run "${names[$r]}" env RANK=$r WORLD_SIZE=$HOSTS MASTER_ADDR=${addrs[0]} \
      MASTER_PORT=29655 OMP_NUM_THREADS=1 "$BENCH" --mb "$MB" --iters "$ITERS" > "$OUT/rank$r" 2>&1 &
  done
  wait' 2>/dev/null
grep '^{' "$out/rank0" || { cat "$out/rank0" >&2; exit 1; }
