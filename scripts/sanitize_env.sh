# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: the hardening build
# (clang, ASan + UBSan, libFuzzer coverage) in build-san/, and the
# sanitizers' run-time settings.
san_build=build-san
configure_sanitized_build() {
  if [ ! -f "$san_build/build.ninja" ]; then
    cmake -S . -B "$san_build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      -DGARDEN_SANITIZE=address,undefined -DGARDEN_FUZZ=ON -DGARDEN_BUILD_BENCH=OFF
  fi
}
export CCACHE_SLOPPINESS=pch_defines,time_macros
export CCACHE_BASEDIR="$PWD"
# Every report ends the process with a stack; third-party suppressions are in
# scripts/sanitizer-suppressions/ (each one says why).
supp="$PWD/scripts/sanitizer-suppressions"
export ASAN_OPTIONS="abort_on_error=1:detect_stack_use_after_return=0:strict_init_order=1:check_initialization_order=1:suppressions=$supp/asan.supp"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
