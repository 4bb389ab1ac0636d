#include "garden/base/staged_directory.h"

#include <unistd.h>

#include <string>
#include <system_error>

#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace garden {

namespace fs = std::filesystem;

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
