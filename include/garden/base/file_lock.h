// An exclusive lock on a file, held for a process's run: flock(2), so the
// kernel releases it when the process dies, however it dies. The file holds
// the holder's pid, so a second process can say who holds it.
#pragma once

#include <string>

namespace garden {

class FileLock {
 public:
  // Takes the lock on `path` (creating the file), or throws garden::Error
  // naming `what`, the path and the holder's pid when another process holds
  // it. Never waits.
  FileLock(std::string path, const std::string& what);
  // Releases the lock and removes the file.
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace garden
