// my_garden: Garden's command line, plus the tasks and experiments of this
// project. `my_garden experiments` lists them next to Garden's own.
#include <garden/cli/cli.h>

#include "linear_regression.h"

int main(int argc, char** argv) {
  example::register_linear_regression();
  return garden::run_main(argc, argv);
}
