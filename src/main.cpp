#include "garden/cli/cli.h"
#include "garden/core/runtime.h"

int main(int argc, char** argv) {
  garden::restart_with_passive_openmp_waits(argv);
  return garden::run_main(argc, argv);
}
