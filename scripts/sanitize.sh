#!/usr/bin/env bash
# Builds the library, the CLI and the tests with clang's AddressSanitizer and
# UndefinedBehaviorSanitizer in build-san/ (shared with scripts/fuzz.sh) and
# runs the whole test suite there: every report (memory error, leak,
# undefined behaviour) ends its test with a stack, so the suite ends clean
# or failed. Extra arguments go to ctest (e.g. -R Checkpoint).
#
# usage: scripts/sanitize.sh [CTEST_ARGS...]   (as root the first time: it
# installs clang's sanitizer runtimes)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --fuzz
source scripts/sanitize_env.sh
configure_sanitized_build
cmake --build "$san_build" -j "$(nproc)"
ctest --test-dir "$san_build" --output-on-failure -j "$(nproc)" "$@" 2>&1 |
  tee "$san_build/sanitize.log"
