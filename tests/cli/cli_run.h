// What the tests of the `garden` command line share: a scratch directory per
// test, the real binary (GARDEN_CLI_PATH) run through the shell with its
// stdout, stderr and exit status captured, and the one-line error contract.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"

namespace cli_run {

namespace fs = std::filesystem;

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Setup: throws when the file cannot be written, which ends the test.
inline void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// A fresh directory under ::testing::TempDir(), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("garden_cli_") + (info ? info->name() : "test") + "_XXXXXX";
    std::string pattern = (fs::path(::testing::TempDir()) / name).string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!::mkdtemp(buffer.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

struct Result {
  int status = -1;  // the exit status; 128 + signal when killed
  std::string out;
  std::string err;
  std::string command;
};

inline std::ostream& operator<<(std::ostream& os, const Result& r) {
  return os << "command: " << r.command << "\nstatus: " << r.status << "\n--- stdout ---\n"
            << r.out << "--- stderr ---\n"
            << r.err << "---";
}

// Runs `garden args...` with stdout and stderr in files under `scratch`.
inline Result run_garden(const std::vector<std::string>& args, const fs::path& scratch) {
  static int counter = 0;
  const std::string id = std::to_string(++counter);
  const fs::path out = scratch / ("stdout." + id);
  const fs::path err = scratch / ("stderr." + id);
  std::string command = shell_quote(GARDEN_CLI_PATH);
  for (const auto& arg : args) command += " " + shell_quote(arg);
  Result result;
  result.command = command;
  // A hung run fails the test instead of stalling the suite.
  const std::string prefix = fs::exists("/usr/bin/timeout") ? "/usr/bin/timeout 120 " : "";
  const int raw = std::system((prefix + command + " </dev/null >" + shell_quote(out.string()) +
                               " 2>" + shell_quote(err.string()))
                                  .c_str());
  if (raw != -1 && WIFEXITED(raw))
    result.status = WEXITSTATUS(raw);
  else if (raw != -1 && WIFSIGNALED(raw))
    result.status = 128 + WTERMSIG(raw);
  result.out = read_file(out);
  result.err = read_file(err);
  std::error_code ec;
  fs::remove(out, ec);
  fs::remove(err, ec);
  return result;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using garden_test::lines_of;

// Every file under `root` with its contents (directories as "<dir>").
inline std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> files;
  if (!fs::exists(root)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string name = fs::relative(entry.path(), root).string();
    files[name] = entry.is_directory() ? "<dir>" : read_file(entry.path());
  }
  return files;
}

// The files added, removed or changed between two snapshots; "" when none.
inline std::string changes(const std::map<std::string, std::string>& before,
                           const std::map<std::string, std::string>& after) {
  std::string out;
  for (const auto& [name, content] : before) {
    const auto it = after.find(name);
    if (it == after.end())
      out += "  removed " + name + "\n";
    else if (it->second != content)
      out += "  changed " + name + "\n";
  }
  for (const auto& [name, content] : after)
    if (!before.count(name)) out += "  added " + name + "\n";
  return out;
}

// The error contract: a non-zero status (exactly `status` when given), no
// stdout, and one stderr line "garden: error: ..." holding each of `parts`
// and nothing that looks like a stack trace.
inline void expect_one_line_error(const Result& r, std::initializer_list<std::string> parts,
                                  int status = -1) {
  if (status >= 0)
    EXPECT_EQ(r.status, status) << r;
  else
    EXPECT_NE(r.status, 0) << r;
  EXPECT_LT(r.status, 124) << "killed or timed out\n" << r;
  EXPECT_EQ(r.out, "") << "an error printed on stdout\n" << r;
  if (r.err.empty()) {
    ADD_FAILURE() << "nothing on stderr\n" << r;
    return;
  }
  EXPECT_EQ(r.err.back(), '\n') << r;
  const auto lines = lines_of(r.err);
  EXPECT_EQ(lines.size(), 1u) << "stderr is not exactly one line\n" << r;
  EXPECT_EQ(r.err.rfind("garden: error: ", 0), 0u) << r;
  for (const auto& part : parts) EXPECT_TRUE(contains(r.err, part)) << "no '" << part << "'\n" << r;
  for (const char* trace : {"Exception raised from", "frame #", "terminate called",
                            "what():", "Aborted", "Segmentation fault", "Traceback"})
    EXPECT_FALSE(contains(r.err, trace)) << "looks like a stack trace\n" << r;
}

// Runs a failing `garden train` twice: into a model_dir that does not exist
// (it must not be created), and into one that holds files (they must stay
// as they were). `args` must not name --model_dir.
inline void expect_train_fails_cleanly(const std::vector<std::string>& args,
                                       std::initializer_list<std::string> parts, int status = -1) {
  TempDir dir;
  {
    SCOPED_TRACE("model_dir that does not exist");
    const fs::path model_dir = dir / "model";
    std::vector<std::string> full = args;
    full.push_back("--model_dir=" + model_dir.string());
    const Result r = run_garden(full, dir.path());
    expect_one_line_error(r, parts, status);
    EXPECT_FALSE(fs::exists(model_dir)) << "the failed run created model_dir\n" << r;
  }
  {
    SCOPED_TRACE("model_dir that holds files");
    const fs::path model_dir = dir / "existing";
    fs::create_directories(model_dir / "sub");
    write_file(model_dir / "marker.txt", "keep me\n");
    write_file(model_dir / "sub" / "params.yaml", "trainer: {train_steps: 3}\n");
    const auto before = snapshot(model_dir);
    std::vector<std::string> full = args;
    full.push_back("--model_dir=" + model_dir.string());
    const Result r = run_garden(full, dir.path());
    expect_one_line_error(r, parts, status);
    EXPECT_EQ(changes(before, snapshot(model_dir)), "") << "the failed run changed model_dir\n"
                                                        << r;
  }
}

inline std::vector<std::string> glob_prefix(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  if (!fs::is_directory(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

// Small, quick overrides for training tabular/iris.
inline const std::string kQuickIris = "trainer.train_steps=100";

}  // namespace cli_run
