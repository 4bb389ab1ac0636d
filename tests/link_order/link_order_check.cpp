// Garden's calls into the C++ library reach the system libstdc++ even when a
// library loaded before it exports copies of the same functions (the fake
// one linked into this program, as LibTorch is from Python PyTorch's wheel).
#include <filesystem>
#include <fstream>
#include <string>

#include <dlfcn.h>
#include <link.h>
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

// The dynamic linker looks symbols up in load order: this program, then the
// libraries it needs, in order. The first library that holds C++ library
// code must be a shared libstdc++ (the toolchain's, or the system's where the
// compiler has only a static one), not LibTorch or Garden.
TEST(LinkOrder, AfterTheProgramTheFirstLibraryLoadedIsASharedLibstdcxx) {
  void* self = dlopen(nullptr, RTLD_NOW);
  ASSERT_NE(self, nullptr);
  link_map* map = nullptr;
  ASSERT_EQ(dlinfo(self, RTLD_DI_LINKMAP, &map), 0);
  std::string first;
  for (link_map* m = map ? map->l_next : nullptr; m != nullptr; m = m->l_next) {
    const std::string name = m->l_name ? m->l_name : "";
    if (name.empty() || name.find("linux-vdso") != std::string::npos) continue;
    first = name;
    break;
  }
  dlclose(self);
  EXPECT_NE(first.find("libstdc++.so"), std::string::npos)
      << "the first library after the program is " << first;
}
