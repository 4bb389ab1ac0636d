// What the libFuzzer targets share. Readers that take a path get the input
// as a scratch file; garden::Error (one line naming what is wrong) is the
// answer bad input must get, so any other exception escapes the target and
// libFuzzer reports the abort, like a crash or a sanitizer finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

#include "garden/base/error.h"

namespace garden_fuzz {

// A directory of this process's own, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto path = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                ("garden-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    static struct Remover {
      std::filesystem::path path;
      ~Remover() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
      }
    } remover{path};
    return path;
  }();
  return dir;
}

inline std::string scratch(const std::string& name) { return (scratch_dir() / name).string(); }

inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property the code under test must keep, checked on every input.
#define GARDEN_FUZZ_CHECK(condition)                                                           \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "fuzz: %s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

}  // namespace garden_fuzz
