#include <unistd.h>

#include <string>

#include "garden/cli/cli.h"
#include "garden/core/runtime.h"

int main(int argc, char** argv) {
  garden::keep_freed_memory_in_the_heap();
  // The commands that compute for long start again with passive OpenMP
  // waits; the rest are not worth a second start of the program.
  const std::string command = argc > 1 ? argv[1] : "";
  if ((command == "train" || command == "fx" || command == "serve") &&
      sysconf(_SC_NPROCESSORS_ONLN) > 1)
    garden::restart_with_passive_openmp_waits(argv);
  return garden::run_main(argc, argv);
}
