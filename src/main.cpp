#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "garden/cli/cli.h"
#include "garden/platform/process.h"
#include "garden/platform/stop_signals.h"

int main(int argc, char** argv) {
  garden::set_up_process(garden::process_setup_for(argc, argv), argv);
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
