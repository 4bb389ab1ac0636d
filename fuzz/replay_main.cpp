// fuzz_replay TARGET PATH...: runs the fuzz target TARGET once on every file
// under each PATH (a file or a directory; a missing one is skipped): the
// seed corpus and the inputs of past findings, in a build without libFuzzer.
// A failed check or a crash ends it; otherwise it prints how many ran.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define GARDEN_FUZZ_TARGET(name) extern "C" int garden_fuzz_##name(const uint8_t*, size_t);
#include "fuzz_targets.inc"
#undef GARDEN_FUZZ_TARGET

namespace {

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};

const Target kTargets[] = {
#define GARDEN_FUZZ_TARGET(name) {#name, garden_fuzz_##name},
#include "fuzz_targets.inc"
#undef GARDEN_FUZZ_TARGET
};

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_replay TARGET PATH...\n");
    return 2;
  }
  const Target* target = nullptr;
  for (const Target& t : kTargets)
    if (std::strcmp(t.name, argv[1]) == 0) target = &t;
  if (!target) {
    std::fprintf(stderr, "fuzz_replay: no target '%s'\n", argv[1]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_regular_file(argv[i], ec)) {
      files.emplace_back(argv[i]);
    } else if (fs::is_directory(argv[i], ec)) {
      for (const auto& entry : fs::recursive_directory_iterator(argv[i]))
        if (entry.is_regular_file() && entry.path().filename() != "README.md")
          files.push_back(entry.path());
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: %s: no input found\n", target->name);
    return 1;
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    std::fprintf(stderr, "fuzz_replay: %s %s\n", target->name, file.c_str());
    target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("fuzz_replay: %s: %zu inputs ran\n", target->name, files.size());
  return 0;
}
