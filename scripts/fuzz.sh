#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/) with clang's libFuzzer, ASan and UBSan in
# build-san/ and runs each for SECONDS_PER_TARGET (default 60) from its seed
# corpus fuzz/corpus/<target> (new inputs go to build-san/fuzz-corpus/,
# the repository's seeds are left as they are). Prints one line per target:
# executions, coverage (edges), features, corpus size, findings. A finding
# (crash, failed check, leak, timeout, sanitizer report) is saved under
# build-san/fuzz-findings/<target>/ and makes the script exit 1: add it to
# fuzz/regressions/<target>/ with its fix, where ctest replays it.
#
# usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (as root the
# first time: it installs clang's libFuzzer runtime)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
bash scripts/setup.sh --fuzz
source scripts/sanitize_env.sh
configure_sanitized_build
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  # Every target fuzz/CMakeLists.txt lists.
  targets=($(sed -n '/^set(GARDEN_FUZZ_TARGETS/,/)/p' fuzz/CMakeLists.txt |
    sed 's/set(GARDEN_FUZZ_TARGETS//; s/)//' | xargs))
fi
cmake --build "$san_build" -j "$(nproc)" $(printf -- '--target %s_fuzz ' "${targets[@]}")
report="$san_build/fuzz-report.txt"
printf '%-20s %10s %8s %8s %6s %s\n' target execs cov ft corpus findings | tee "$report"
failed=0
root=$PWD
for t in "${targets[@]}"; do
  corpus="$root/$san_build/fuzz-corpus/$t"
  findings="$root/$san_build/fuzz-findings/$t"
  log="$root/$san_build/fuzz-$t.log"
  mkdir -p "$corpus" "$findings"
  # Findings of earlier runs stay until moved to fuzz/regressions/; only this
  # run's count.
  stamp="$root/$san_build/fuzz-$t.start"
  touch "$stamp"
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  set +e
  (cd "$san_build/fuzz" && "./${t}_fuzz" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=6144 \
    -print_final_stats=1 -artifact_prefix="$findings/" "${dict[@]}" "$corpus" "$root/fuzz/corpus/$t") \
    >"$log" 2>&1
  status=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  stats=$( (grep -E '^#[0-9]+' "$log" || true) | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$stats")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$stats")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$stats")
  found=$(find "$findings" -type f -newer "$stamp" | wc -l)
  if [ "$status" -ne 0 ] || [ "$found" -gt 0 ]; then
    failed=1
    found="$found (exit $status, see $log)"
  fi
  printf '%-20s %10s %8s %8s %6s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$found" | tee -a "$report"
done
exit $failed
