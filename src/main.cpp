#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "garden/base/stop_signals.h"
#include "garden/cli/cli.h"
#include "garden/core/runtime.h"

int main(int argc, char** argv) {
  // Before any thread starts (and before the restart below, which keeps the
  // blocked signals): every thread of the process leaves SIGTERM and SIGINT
  // to the signal thread (garden/base/stop_signals.h).
  garden::install_stop_signals();
  garden::keep_freed_memory_in_the_heap();
  // The commands that compute start again with OpenBLAS's best kernels for
  // this CPU, and those that compute for long also with passive OpenMP
  // waits; the rest are not worth a second start of the program. `env`
  // reports what the computing commands run with, so it starts the same way.
  const std::string command = argc > 1 ? argv[1] : "";
  const bool long_work = command == "train" || command == "fx" || command == "serve";
  const bool products = long_work || command == "translate" || command == "predict";
  if (products || command == "env")
    garden::restart_with_fast_settings(
        argv, (long_work || command == "env") && sysconf(_SC_NPROCESSORS_ONLN) > 1);
  const int code = garden::run_main(argc, argv);
  if (garden::StopSignals::work_abandoned()) {
    // Work a stop signal left running (SentencePiece's training) must not
    // meet the static destructors.
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    _exit(code);
  }
  return code;
}
