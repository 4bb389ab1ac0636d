#include <gtest/gtest.h>

#include "garden/cli/builtins.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  garden::register_builtins();
  return RUN_ALL_TESTS();
}
