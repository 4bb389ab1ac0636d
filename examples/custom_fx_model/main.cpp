// my_fx: Garden's command line with this project's TensorFX model, so
//   my_fx fx train --model regularized_classification ...
//   my_fx fx predict --model <output>/model
// work as `garden fx` does for the built-in models.
#include <garden/cli/cli.h>

#include "regularized_classification.h"

int main(int argc, char** argv) {
  return garden::run_main(argc, argv, example::register_regularized_classification);
}
