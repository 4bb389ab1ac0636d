// Garden's calls into the C++ library reach the system libstdc++ even when a
// library loaded before it exports copies of the same functions (the fake
// one linked into this program, as LibTorch is from Python PyTorch's wheel).
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "garden/core/run_directory.h"

extern "C" int garden_fake_filesystem_calls();

namespace fs = std::filesystem;

TEST(LinkOrder, GardensFilesystemCallsReachTheSystemLibstdcxx) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("garden_link_order_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    garden::RunDirectory run(dir.string());
    std::ofstream(dir / "made.txt") << "made by the run";
    fs::create_directories(dir / "sub" / "deeper");
    std::ofstream(dir / "sub" / "deeper" / "file.txt") << "also";
  }  // not committed: the run's files are removed with remove_all
  EXPECT_EQ(garden_fake_filesystem_calls(), 0)
      << "std::filesystem::remove_all bound to a copy exported by a library loaded before "
         "libstdc++; Garden's link option that puts libstdc++ first is missing";
  EXPECT_FALSE(fs::exists(dir)) << dir << " was not removed";
}
