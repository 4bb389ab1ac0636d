#!/usr/bin/env bash
# usage: check_layering.sh <build dir> "<control targets;...>" "<target=header;...>"
# Builds each control probe (must succeed), then each upward probe (must fail
# because its header is not found). Prints one line per failed check.
set -uo pipefail
build_dir=$1
IFS=';' read -r -a controls <<<"$2"
IFS=';' read -r -a upward <<<"$3"
failures=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in "${controls[@]}"; do
  if ! cmake --build "$build_dir" --target "$target" >"$log" 2>&1; then
    echo "layering: FAIL: control probe $target (headers the layer may include) did not build:"
    tail -n 20 "$log"
    failures=$((failures + 1))
  fi
done
for item in "${upward[@]}"; do
  target=${item%%=*}
  header=${item#*=}
  if cmake --build "$build_dir" --target "$target" >"$log" 2>&1; then
    echo "layering: FAIL: $target built, but its layer may not include $header"
    failures=$((failures + 1))
  elif ! grep -qE "$header: No such file or directory|'$header' file not found" "$log"; then  # gcc, clang
    echo "layering: FAIL: $target failed for another reason than the missing $header:"
    tail -n 20 "$log"
    failures=$((failures + 1))
  fi
done
echo "layering: ${#controls[@]} control probes, ${#upward[@]} upward probes, $failures failure(s)"
[[ $failures -eq 0 ]]
