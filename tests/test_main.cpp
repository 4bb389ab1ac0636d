#include <gtest/gtest.h>

#include "garden/core/builtins.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  garden::register_builtins();
  return RUN_ALL_TESTS();
}
