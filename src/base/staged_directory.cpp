#include "garden/base/staged_directory.h"

#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <system_error>

#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace garden {

namespace fs = std::filesystem;

namespace {
struct Unfinished {
  std::mutex mutex;
  std::map<int, fs::path> paths;
  int next_id = 0;
};
// Never destroyed: the stop-signal thread may use it during exit.
Unfinished& unfinished() {
  static auto* registry = new Unfinished;
  return *registry;
}
}  // namespace

UnfinishedPath::UnfinishedPath(fs::path path) {
  Unfinished& u = unfinished();
  std::lock_guard<std::mutex> lock(u.mutex);
  id_ = u.next_id++;
  u.paths.emplace(id_, std::move(path));
}

UnfinishedPath::~UnfinishedPath() {
  Unfinished& u = unfinished();
  std::lock_guard<std::mutex> lock(u.mutex);
  u.paths.erase(id_);
}

void remove_unfinished_paths() noexcept {
  Unfinished& u = unfinished();
  std::lock_guard<std::mutex> lock(u.mutex);
  for (const auto& [id, path] : u.paths) {
    std::error_code ignored;
    // Twice: a writer may have added a file while the tree was removed.
    for (int attempt = 0; attempt < 2 && fs::exists(fs::symlink_status(path, ignored)); ++attempt)
      fs::remove_all(path, ignored);
  }
}

void write_directory_whole(const fs::path& target_dir,
                           const std::function<void(const fs::path&)>& fill) {
  const fs::path target = fs::absolute(target_dir).lexically_normal();
  std::error_code ec;
  if (fs::exists(target, ec) && !(fs::is_directory(target, ec) && fs::is_empty(target, ec)))
    throw Error("'" + target.string() + "' exists and is not an empty directory");
  fs::create_directories(target.parent_path(), ec);
  const fs::path staging = target.parent_path() / ("." + target.filename().string() + ".tmp-" +
                                                   std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  const UnfinishedPath unfinished_staging(staging);
  if (!fs::create_directories(staging, ec) || ec)
    throw Error("cannot create '" + staging.string() + "': " + ec.message());
  try {
    fill(staging);
    sync_directory(staging.string());
    fs::remove(target, ec);  // empty, checked above
    fs::rename(staging, target);
    sync_directory(target.parent_path().string());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

}  // namespace garden
