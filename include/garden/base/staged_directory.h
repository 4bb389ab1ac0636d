// A directory that appears whole or not at all.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace garden {

// Makes `target` (which must not exist, or be an empty directory): `fill`
// writes into a staging directory beside it (".<name>.tmp-<pid>"), which is
// then synced and renamed to `target`. If `fill` or the rename throws, the
// staging directory is removed and `target` is left as it was.
void write_directory_whole(const std::filesystem::path& target,
                           const std::function<void(const std::filesystem::path&)>& fill);

// A path a command is writing and will rename or remove (a staging
// directory, an atomic file's temporary): registered while this object
// lives, and removed by remove_unfinished_paths() when a stop signal ends
// the process at once (platform/stop_signals), so that a command stopped
// with Ctrl-C or SIGTERM leaves none behind.
class UnfinishedPath {
 public:
  explicit UnfinishedPath(std::filesystem::path path);
  ~UnfinishedPath();
  UnfinishedPath(const UnfinishedPath&) = delete;
  UnfinishedPath& operator=(const UnfinishedPath&) = delete;

 private:
  int id_;
};

// Removes every registered path (files and directory trees), ignoring
// errors. Called by the stop-signal thread just before the process exits.
void remove_unfinished_paths() noexcept;

}  // namespace garden
