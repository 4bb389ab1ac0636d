#include <unistd.h>

#include <string>

#include "garden/cli/cli.h"
#include "garden/core/runtime.h"

int main(int argc, char** argv) {
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
  return garden::run_main(argc, argv);
}
