#!/usr/bin/env bash
# The inner loop on a built tree (build/ must be up to date): for one source
# of a folder, a real one-line change is compiled (ccache off), the folder's
# test executable relinked and its tests run; then how much a change to a
# header low in the stack rebuilds. Every file touched is restored after.
#
#   bash bench/build_times.sh                # kernels/gelu.cpp, nlp/tasks/tagging_task.cpp, core/task.h
#   FILES="src/kernels/linear.cpp:kernels:test_kernels" bash bench/build_times.sh
#
# FILES: space-separated source:label:target triples.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
files=${FILES:-"src/kernels/gelu.cpp:kernels:test_kernels src/nlp/tasks/tagging_task.cpp:nlp:test_nlp"}
header=${HEADER:-include/garden/core/task.h}
jobs=$(nproc)
export CCACHE_DISABLE=1

restore=()
cleanup() {
  for f in "${restore[@]}"; do
    if [ -f "$f.build_times" ]; then mv "$f.build_times" "$f"; fi
  done
}
# The sources are restored however the script ends (Ctrl-C, timeout).
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Appends a comment line, so the compiler sees a changed file.
change() {
  cp -p "$1" "$1.build_times"
  restore+=("$1")
  echo "// build_times.sh $(date +%s%N)" >>"$1"
}

seconds() { date +%s.%N; }

cmake --build "$build" -j "$jobs" >/dev/null
for triple in $files; do
  IFS=: read -r source label target <<<"$triple"
  change "$source"
  start=$(seconds)
  cmake --build "$build" -j "$jobs" --target "$target" >/dev/null
  built=$(seconds)
  summary=$(ctest --test-dir "$build" -L "$label" -j "$jobs" 2>&1 | grep "tests passed\|tests failed")
  done_at=$(seconds)
  printf '%s: rebuild %s %.1f s, ctest -L %s %.1f s (%s), total %.1f s\n' \
    "$source" "$target" "$(echo "$built - $start" | bc)" "$label" \
    "$(echo "$done_at - $built" | bc)" "$summary" "$(echo "$done_at - $start" | bc)"
  cleanup
  restore=()
  cmake --build "$build" -j "$jobs" >/dev/null
done

# A header: the objects whose recorded dependencies name it (what ninja
# rebuilds), and the sources inside them.
# Layers see headers through staged trees (build/layers/<layer>/garden/...).
name=${header#include/}
objects=$(ninja -C "$build" -t deps | awk -v h="/$name" '
  /^[^ ].*: #deps/ { object = $1; sub(/:$/, "", object) }
  /^    / && substr($1, length($1) - length(h) + 1) == h { print object }' | sort -u)
count=$(grep -c . <<<"$objects" || true)
sources=0
for object in $objects; do
  case "$object" in
    */batches/*)
      batch=$(sed -n 's|.*\(batches/.*\.cpp\)\.o$|\1|p' <<<"$object")
      n=$(grep -c '^#include' "$build/$batch" || true)
      sources=$((sources + n)) ;;
    *) sources=$((sources + 1)) ;;
  esac
done
includers=$(grep -rlF "#include \"$name\"" src include tests bench fuzz examples | wc -l)
change "$header"
start=$(seconds)
cmake --build "$build" -j "$jobs" --target garden_cli >/dev/null
built=$(seconds)
printf '%s: %d objects depend on it (%d sources in them; %d files include it directly); garden_cli rebuilt in %.1f s\n' \
  "$header" "$count" "$sources" "$includers" "$(echo "$built - $start" | bc)"
