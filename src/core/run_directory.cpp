#include "garden/core/run_directory.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"

namespace fs = std::filesystem;

namespace garden {

namespace {
constexpr const char* kLockFile = ".garden.lock";
constexpr const char* kLogFile = "train.log";
// Files up to this size are kept whole, so a rewrite (params.yaml, an index,
// info.json) can be undone.
constexpr uintmax_t kKeepContentBelow = 1 << 20;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

RunDirectory::RunDirectory(std::string model_dir) : dir_(std::move(model_dir)) {
  if (dir_.empty()) throw Error("--model_dir is required");
  std::error_code ec;
  if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec))
    throw Error("model_dir '" + dir_ + "' is a file, not a directory");
  created_ = !fs::exists(dir_, ec);
  if (created_) {
    fs::create_directories(dir_, ec);
    if (ec) throw Error("cannot create model_dir '" + dir_ + "': " + ec.message());
  }
  try {
    lock_ = std::make_unique<FileLock>((fs::path(dir_) / kLockFile).string(),
                                       "model_dir '" + dir_ + "'");
  } catch (...) {
    if (created_) fs::remove_all(dir_, ec);
    throw;
  }
  if (!created_) {
    for (auto it = fs::recursive_directory_iterator(dir_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string relative = fs::relative(it->path(), dir_).string();
      if (relative == kLockFile) continue;
      FileState state;
      if (it->is_regular_file()) {
        state.size = it->file_size();
        if (state.size < kKeepContentBelow && relative != kLogFile)
          state.content = slurp(it->path());
      }
      before_.emplace(relative, std::move(state));
    }
  }
  set_log_file((fs::path(dir_) / kLogFile).string());
}

RunDirectory::~RunDirectory() {
  set_log_file("");
  if (!committed_) roll_back();
  lock_.reset();
  // The lock file was the last thing in a model_dir this run made and then
  // rolled back.
  if (!committed_ && created_) {
    std::error_code ec;
    fs::remove(dir_, ec);
  }
}

void RunDirectory::roll_back() noexcept {
  std::error_code ec;
  if (created_) {
    // Everything but the lock, which is released after.
    for (const auto& entry : fs::directory_iterator(dir_, ec))
      if (entry.path().filename() != kLockFile) fs::remove_all(entry.path(), ec);
    return;
  }
  std::vector<fs::path> added;
  for (auto it = fs::recursive_directory_iterator(dir_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string relative = fs::relative(it->path(), dir_).string();
    if (relative == kLockFile) continue;
    const auto before = before_.find(relative);
    if (before == before_.end()) {
      added.push_back(it->path());
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    const FileState& state = before->second;
    if (state.content) {
      if (slurp(it->path()) != *state.content) {
        try {
          write_file_atomically(it->path().string(), *state.content);
        } catch (const std::exception&) {
        }
      }
    } else if (it->file_size() > state.size) {
      fs::resize_file(it->path(), state.size, ec);
    }
  }
  for (const auto& path : added) fs::remove_all(path, ec);
}

}  // namespace garden
