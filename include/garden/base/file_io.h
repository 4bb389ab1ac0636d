// Files a user or a later run relies on: written whole or not at all, and
// read only when they are what they claim to be.
//
// The one atomic write: every file Garden writes for keeps (checkpoints, the
// checkpoint index, params.yaml, info.json, TFRecord and translation
// outputs, SentencePiece models) goes to a temporary name in the target's
// directory, is fsynced, renamed over the target, and the directory is
// fsynced. A failure or a kill at any moment leaves the target as it was
// (or absent) and, once the process is gone, at most a `<target>.tmp-<pid>`
// file, which the next writer of that directory may remove (none when a stop
// signal ended the process: platform/stop_signals removes it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace garden {

class UnfinishedPath;  // base/staged_directory.h

// Writes `bytes` to `path` atomically. Throws garden::Error naming the path.
void write_file_atomically(const std::string& path, std::string_view bytes);

// An atomic write whose content comes from elsewhere (a stream, a writer
// class that opens its own file): write to temporary_path(), then commit().
// Destroyed without commit(), say by an exception, it removes the
// temporary file and leaves the target untouched.
class AtomicFile {
 public:
  // Creates the temporary file (empty, mode 0644). The target's directory
  // must exist. A target that is a symbolic link stays one: the file it
  // points to is replaced.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return temporary_; }

  // Appends to the temporary file (for writers that do not open it
  // themselves). Throws on a short write (a full disk) naming the target.
  void write(const void* data, std::size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  uint64_t bytes_written() const { return written_; }

  // fsync, rename over path(), fsync of the directory. Throws naming path().
  void commit();
  // Removes the temporary file now (what the destructor does).
  void discard() noexcept;

 private:
  std::string path_;
  std::string target_;  // path_, or the file it links to
  std::string temporary_;
  std::unique_ptr<UnfinishedPath> unfinished_;  // removed if a stop signal ends the process
  int fd_ = -1;
  uint64_t written_ = 0;
  bool done_ = false;
};

// The temporary name AtomicFile uses for `path` in this process.
std::string temporary_path_for(const std::string& path);

// The last step of the atomic write, for a file another library wrote under
// a temporary name (SentencePiece's model): fsync `temporary`, rename it
// over `path`, fsync the directory. Throws garden::Error naming `path`.
void commit_file(const std::string& temporary, const std::string& path);

// fsync of a directory, so a rename in it survives a power loss. Best effort.
void sync_directory(const std::string& directory);

// Throws garden::Error unless `path` is a regular file (after following
// links) that this process can open for reading: "<what> 'path' does not
// exist", "... is a directory, not a file", "... cannot be read: <reason>".
void check_input_file(const std::string& path, const std::string& what);

// The whole content of an input file (checked as above).
std::string read_file(const std::string& path, const std::string& what);

// True when both paths name the same existing file, links resolved (the
// same device and inode).
bool same_file(const std::string& a, const std::string& b);

// Throws garden::Error, naming both flags, when `output` is the existing
// file `input` (writing it would destroy the input before it is read).
void refuse_same_file(const std::string& input, const std::string& input_flag,
                      const std::string& output, const std::string& output_flag);

// A path and the flag (or words) that named it, for messages.
struct NamedPath {
  std::string flag;
  std::string path;
};

// For a command about to read `inputs` and write `outputs`, before it reads
// anything: throws garden::Error naming both flags when an output is one of
// the inputs (the same existing file, links resolved) or when two outputs
// name the same file (the same path once links in it are resolved, or the
// same existing file). Empty paths are skipped (an output not asked for).
void refuse_outputs_over_inputs(const std::vector<NamedPath>& inputs,
                                const std::vector<NamedPath>& outputs);

}  // namespace garden
