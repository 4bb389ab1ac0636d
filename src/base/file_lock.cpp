#include "garden/base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "garden/base/error.h"

namespace garden {

namespace {
std::string read_holder(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string pid = n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : "";
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}
}  // namespace

FileLock::FileLock(std::string path, const std::string& what) : path_(std::move(path)) {
  // The file may be removed by the holder that releases it just as we open
  // it: then we would lock an unlinked file. Retry until the locked file is
  // the one at the path.
  for (int attempt = 0; attempt < 100; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int error = errno;
      throw Error("cannot lock " + what + ": cannot open '" + path_ + "': " + std::strerror(error));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      const std::string holder = read_holder(fd_);
      ::close(fd_);
      fd_ = -1;
      if (error == EWOULDBLOCK)
        throw Error(what + " is in use by another garden process (pid " + holder + ", lock '" +
                    path_ + "'); wait for it to finish or use another directory");
      throw Error("cannot lock " + what + " ('" + path_ + "'): " + std::strerror(error));
    }
    struct stat locked {
    }, current{};
    if (::fstat(fd_, &locked) == 0 && ::stat(path_.c_str(), &current) == 0 &&
        locked.st_dev == current.st_dev && locked.st_ino == current.st_ino) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
        // The pid is only for messages; the lock holds without it.
      }
      return;
    }
    ::close(fd_);
    fd_ = -1;
  }
  throw Error("cannot lock " + what + ": '" + path_ + "' keeps being replaced");
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  // Unlink while still holding the lock, so no one locks the old file after.
  ::unlink(path_.c_str());
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace garden
