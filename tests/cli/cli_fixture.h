// What the CLI tests share: a fresh scratch directory per test, and the real
// `garden` binary run with its output captured there.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace garden_test {

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The lines of `text`, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Standard padded base64 (written here, not taken from the code under test).
inline std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += alphabet[(v >> shift) & 63];
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += std::string{alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8);
    out += std::string{alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63], alphabet[(v >> 6) & 63],
                       '='};
  }
  return out;
}

inline void spit(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};

// Runs a shell command line with its stdout and stderr in `out` and `err`.
inline CliRun run_captured(const std::string& command_line, const std::filesystem::path& out,
                           const std::filesystem::path& err) {
  const std::string command = command_line + " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int raw = std::system(command.c_str());
  CliRun run;
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.out = slurp(out);
  run.err = slurp(err);
  return run;
}

// The error contract of every command: a non-zero status that is not a
// kill or a timeout, nothing on stdout, and exactly one stderr line
// "garden: error: ..." holding each of `parts`.
inline void expect_one_error_line(const CliRun& run, std::initializer_list<std::string> parts) {
  EXPECT_NE(run.status, 0) << run.err;
  EXPECT_GT(run.status, 0) << "killed\n" << run.err;
  EXPECT_LT(run.status, 124) << "killed or timed out\n" << run.err;
  EXPECT_EQ(run.out, "") << "an error printed on stdout";
  EXPECT_EQ(run.err.rfind("garden: error: ", 0), 0u) << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "not exactly one line:\n" << run.err;
  for (const auto& part : parts)
    EXPECT_NE(run.err.find(part), std::string::npos) << "no '" << part << "' in: " << run.err;
}

// The names in `directory` (not recursive).
inline std::set<std::string> entries(const std::filesystem::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    names.insert(entry.path().filename().string());
  return names;
}

class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("garden_cli_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Runs `garden <args>` (args already shell-quoted where needed). A run
  // that hangs is killed after 120 s (status 124), one that writes a file
  // past 64 MiB (an endless output) by SIGXFSZ: the test fails instead of
  // stalling the suite or filling the disk.
  CliRun garden(const std::string& args) const {
    return run_command("'" + std::string(GARDEN_CLI_PATH) + "' " + args);
  }
  // The same for any shell command line.
  CliRun run_command(const std::string& command_line) const {
    const auto out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string limits =
        std::string("ulimit -f 131072; ") +
        (std::filesystem::exists("/usr/bin/timeout") ? "/usr/bin/timeout 120 " : "");
    return run_captured(limits + command_line, out, err);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

}  // namespace garden_test
