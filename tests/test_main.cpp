#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "garden/cli/builtins.h"
#include "garden/platform/stop_signals.h"

namespace {

// Each test process writes its scratch files in a directory of its own,
// made under the system's temporary directory and removed when the process
// ends: fixed names (garden_pipeline_shuffle, ...) no longer collide
// between two test runs on one machine (two clones, CI beside a developer),
// and a run leaves nothing behind in /tmp. TMPDIR (std::filesystem's
// temp_directory_path, mkdtemp, Python's tempfile) and TEST_TMPDIR
// (::testing::TempDir) both name it, so the commands a test starts write
// there too. A death test's child, which starts main() again, finds
// GARDEN_TEST_SCRATCH set and keeps its parent's directory.
class Scratch {
 public:
  Scratch() {
    if (::getenv("GARDEN_TEST_SCRATCH") != nullptr) return;
    const char* base = ::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/garden_test_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr) {
      std::fprintf(stderr, "tests: cannot make a scratch directory %s; set TMPDIR\n",
                   pattern.c_str());
      std::exit(1);
    }
    path_ = buffer.data();
    ::setenv("GARDEN_TEST_SCRATCH", path_.c_str(), 1);
    ::setenv("TMPDIR", path_.c_str(), 1);
    ::setenv("TEST_TMPDIR", path_.c_str(), 1);
  }
  ~Scratch() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

 private:
  std::string path_;
};

}  // namespace

int main(int argc, char** argv) {
  // As `garden` does, before any thread starts.
  garden::install_stop_signals();
  const Scratch scratch;
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
