#include "garden/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "garden/base/error.h"
#include "garden/base/staged_directory.h"

namespace fs = std::filesystem;

namespace garden {

namespace {
std::string errno_text(int error) { return std::strerror(error); }

std::string parent_directory(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}
}  // namespace

std::string temporary_path_for(const std::string& path) {
  return path + ".tmp-" + std::to_string(::getpid());
}

void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw Error("cannot write a file with an empty name");
  std::error_code ec;
  if (fs::is_directory(path_, ec)) throw Error("cannot write '" + path_ + "': it is a directory");
  // Write beside the link's target and replace it, so the link survives.
  if (fs::is_symlink(path_, ec)) {
    const fs::path target = fs::weakly_canonical(path_, ec);
    if (!ec) target_ = target.string();
  }
  if (target_.empty()) target_ = path_;
  temporary_ = temporary_path_for(target_);
  unfinished_ = std::make_unique<UnfinishedPath>(temporary_);
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error = errno;
    throw Error("cannot write '" + path_ + "': " + errno_text(error));
  }
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::write(const void* data, std::size_t size) {
  if (done_) throw Error("'" + path_ + "' is already committed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const std::size_t chunk = std::min<std::size_t>(size, std::size_t{8} << 20);
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      throw Error("cannot write '" + path_ + "': " + errno_text(error));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (done_) throw Error("'" + path_ + "' is already committed");
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    const int error = errno;
    throw Error("cannot write '" + path_ + "': close: " + errno_text(error));
  }
  // The content may have been written through another descriptor (a writer
  // that opened temporary_path() itself): commit_file's fsync covers it.
  commit_file(temporary_, target_);
  done_ = true;
  unfinished_.reset();
}

void commit_file(const std::string& temporary, const std::string& path) {
  const int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    throw Error("cannot write '" + path + "': fsync: " + errno_text(error));
  }
  ::close(fd);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    throw Error("cannot write '" + path + "': rename: " + errno_text(error));
  }
  sync_directory(parent_directory(path));
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!done_ && !temporary_.empty()) ::unlink(temporary_.c_str());
  done_ = true;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

void check_input_file(const std::string& path, const std::string& what) {
  struct stat info {};
  if (path.empty()) throw Error(what + " is empty: name a file");
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT) throw Error(what + " '" + path + "' does not exist");
    throw Error(what + " '" + path + "' cannot be read: " + errno_text(error));
  }
  if (S_ISDIR(info.st_mode)) throw Error(what + " '" + path + "' is a directory, not a file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw Error(what + " '" + path + "' cannot be read: " + errno_text(error));
  }
  ::close(fd);
}

std::string read_file(const std::string& path, const std::string& what) {
  check_input_file(path, what);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(what + " '" + path + "' cannot be read");
  return text;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat first {
  }, second{};
  if (::stat(a.c_str(), &first) != 0 || ::stat(b.c_str(), &second) != 0) return false;
  return first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

void refuse_same_file(const std::string& input, const std::string& input_flag,
                      const std::string& output, const std::string& output_flag) {
  if (same_file(input, output))
    throw Error(output_flag + " '" + output + "' is the same file as " + input_flag + " '" + input +
                "'; writing it would destroy the input: choose another output");
}

namespace {

// The path with the links in its existing part resolved, for comparing
// outputs that do not exist yet.
std::string resolved_path(const std::string& path) {
  std::error_code ec;
  auto resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec) return std::filesystem::absolute(path).lexically_normal().string();
  return resolved.string();
}

}  // namespace

void refuse_outputs_over_inputs(const std::vector<NamedPath>& inputs,
                                const std::vector<NamedPath>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& output = outputs[i];
    if (output.path.empty()) continue;
    for (const auto& input : inputs)
      if (!input.path.empty()) refuse_same_file(input.path, input.flag, output.path, output.flag);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& earlier = outputs[j];
      if (earlier.path.empty()) continue;
      if (same_file(earlier.path, output.path) ||
          resolved_path(earlier.path) == resolved_path(output.path))
        throw Error(output.flag + " '" + output.path + "' is the same file as " + earlier.flag +
                    " '" + earlier.path + "': give each output its own path");
    }
  }
}

}  // namespace garden
