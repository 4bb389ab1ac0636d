// my_garden: Garden's command line, plus the tasks and experiments of this
// project. `my_garden experiments` lists them next to Garden's own.
#include <garden/cli/cli.h>

#include "linear_regression.h"

int main(int argc, char** argv) {
  // Registered inside run_main, so a clash of names is a one-line error too.
  return garden::run_main(argc, argv, example::register_linear_regression);
}
