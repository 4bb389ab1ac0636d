// model_dir for the length of one training run.
//
// Made when missing and locked for the run (a second run on the same
// model_dir stops at once, naming the holder's pid); train.log is opened
// first, so it receives every line of the run. Until the run saves its first
// checkpoint, the run has produced nothing worth keeping: if it fails before
// that, a model_dir it made is removed, and an existing one is put back as it
// was (files the run made are removed, files it appended to are cut back to
// their old length, small files it rewrote get their old content).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "garden/base/file_lock.h"

namespace garden {

class RunDirectory {
 public:
  explicit RunDirectory(std::string model_dir);
  // Without commit(): rolls back as described above. Always stops writing
  // train.log and releases the lock.
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // A checkpoint of this run is on disk: from now on nothing is rolled back.
  void commit() { committed_ = true; }
  bool committed() const { return committed_; }
  // Whether this run made model_dir.
  bool created() const { return created_; }
  const std::string& path() const { return dir_; }

 private:
  struct FileState {
    uintmax_t size = 0;
    std::optional<std::string> content;  // kept for small files, which may be rewritten
  };
  void roll_back() noexcept;

  std::string dir_;
  bool created_ = false;
  bool committed_ = false;
  std::unique_ptr<FileLock> lock_;
  std::map<std::string, FileState> before_;  // relative path -> state at start
};

}  // namespace garden
