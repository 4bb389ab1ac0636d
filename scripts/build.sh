#!/usr/bin/env bash
# Configures and builds Garden in build/ (Release, Ninja, ccache when present).
# Arguments, if any, are the targets to build (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache must ignore what precompiled headers change, or it never hits.
export CCACHE_SLOPPINESS=pch_defines,time_macros
# Paths relative to the checkout, so another clone or worktree shares the cache.
export CCACHE_BASEDIR="$PWD"
jobs=$(nproc)
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$jobs" "${targets[@]}"
