#include <gtest/gtest.h>

#include "garden/cli/builtins.h"
#include "garden/platform/stop_signals.h"

int main(int argc, char** argv) {
  // As `garden` does, before any thread starts.
  garden::install_stop_signals();
  ::testing::InitGoogleTest(&argc, argv);
  garden::register_builtins();
  const int status = RUN_ALL_TESTS();
  // Every case that ran was skipped (a CUDA case without a GPU): ctest's
  // SKIP_RETURN_CODE (tests/discover_tests.cmake) reports it as skipped.
  const auto& tests = *::testing::UnitTest::GetInstance();
  if (status == 0 && tests.skipped_test_count() > 0 && tests.successful_test_count() == 0)
    return 77;
  return status;
}
