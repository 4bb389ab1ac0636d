#include <gtest/gtest.h>

#include "garden/platform/stop_signals.h"
#include "garden/cli/builtins.h"

int main(int argc, char** argv) {
  // As `garden` does, before any thread starts.
  garden::install_stop_signals();
  ::testing::InitGoogleTest(&argc, argv);
  garden::register_builtins();
  return RUN_ALL_TESTS();
}
