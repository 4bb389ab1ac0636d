#!/usr/bin/env bash
# usage: check_layering.sh <compiler> <probe dir> [C++ standard: 17]
# <probe dir>/probes.txt lists "<layer>:control:" and
# "<layer>:includes_<other>:<header>" probes; <layer>.flags holds the include
# folders and definitions of that layer's sources. Each control probe must
# preprocess; each upward probe must fail because its header is not found.
# Prints one line per failed check.
set -uo pipefail
compiler=$1
probe_dir=$2
standard=-std=c++${3:-17}
read -r -a probes <"$probe_dir/probes.txt"
failures=0
controls=0
upward=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for probe in "${probes[@]}"; do
  IFS=: read -r layer kind header <<<"$probe"
  mapfile -t flags < <(grep -v '^$' "$probe_dir/$layer.flags")
  source="$probe_dir/${layer}_$kind.cpp"
  if [[ $kind == control ]]; then
    controls=$((controls + 1))
    if ! "$compiler" "$standard" "${flags[@]}" -E -o /dev/null "$source" >"$log" 2>&1; then
      echo "layering: FAIL: the control probe of layer $layer (headers it may include) did not preprocess:"
      tail -n 20 "$log"
      failures=$((failures + 1))
    fi
    continue
  fi
  upward=$((upward + 1))
  if "$compiler" "$standard" "${flags[@]}" -E -o /dev/null "$source" >"$log" 2>&1; then
    echo "layering: FAIL: layer $layer may not include $header, but it was found"
    failures=$((failures + 1))
  elif ! grep -qE "$header: No such file or directory|'$header' file not found" "$log"; then  # gcc, clang
    echo "layering: FAIL: layer $layer's probe of $header failed for another reason than the missing header:"
    tail -n 20 "$log"
    failures=$((failures + 1))
  fi
done
echo "layering: $controls control probes, $upward upward probes, $failures failure(s)"
[[ $failures -eq 0 ]]
