#include "garden/core/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "garden/base/error.h"
#include "garden/base/crc32c.h"

namespace fs = std::filesystem;

namespace garden {
namespace {

constexpr char kMagic[8] = {'G', 'A', 'R', 'D', 'N', 'C', 'K', '1'};

std::string errno_text() { return std::strerror(errno); }

// A file descriptor that writes everything or throws, and closes itself.
class OutFile {
 public:
  OutFile(const std::string& path, const WriteObserver& observer)
      : path_(path), observer_(observer) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create checkpoint '" + path + "': " + errno_text());
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const std::size_t chunk = std::min<std::size_t>(size, 8 << 20);
      const ssize_t n = ::write(fd_, p, chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw Error("cannot write checkpoint '" + path_ + "': " + errno_text());
      }
      p += n;
      size -= static_cast<std::size_t>(n);
      written_ += static_cast<uint64_t>(n);
      if (observer_) observer_(written_);
    }
  }
  void sync_and_close() {
    if (::fsync(fd_) != 0) throw Error("cannot fsync checkpoint '" + path_ + "': " + errno_text());
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw Error("cannot close checkpoint '" + path_ + "': " + errno_text());
    }
    fd_ = -1;
  }

 private:
  std::string path_;
  const WriteObserver& observer_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

at::ScalarType dtype_from_name(const std::string& name, const std::string& path) {
  static const at::ScalarType kTypes[] = {
      at::kByte,  at::kChar,  at::kShort,    at::kInt,      at::kLong,  at::kHalf,
      at::kFloat, at::kDouble, at::kBool,    at::kBFloat16, at::kComplexFloat,
      at::kComplexDouble};
  for (auto t : kTypes)
    if (name == c10::toString(t)) return t;
  throw Error("checkpoint '" + path + "' holds a tensor of unknown dtype '" + name + "'");
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    WriteObserver none;
    OutFile out(tmp, none);
    out.write(text.data(), text.size());
    out.sync_and_close();
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + errno_text());
  sync_directory(fs::path(path).parent_path().string());
}

}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointData& data,
                           const WriteObserver& observer) {
  // Contiguous CPU copies, so each tensor's bytes can be written as they are.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  nlohmann::json entries = nlohmann::json::array();
  uint64_t offset = 0;
  for (const auto& [name, tensor] : data.tensors) {
    if (!tensor.defined()) throw Error("checkpoint tensor '" + name + "' is undefined");
    at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t nbytes = cpu.numel() * cpu.element_size();
    entries.push_back({{"name", name},
                       {"dtype", dtype_name(cpu.scalar_type())},
                       {"shape", cpu.sizes().vec()},
                       {"offset", offset},
                       {"nbytes", nbytes},
                       {"crc32c", garden::crc32c(cpu.data_ptr(), nbytes)}});
    offset += nbytes;
    tensors.emplace_back(name, std::move(cpu));
  }
  const nlohmann::json header = {{"format", 1}, {"meta", data.meta}, {"tensors", entries}};
  const std::string header_text = header.dump();
  const uint64_t header_size = header_text.size();
  const uint32_t header_crc = garden::mask_crc(garden::crc32c(header_text.data(), header_size));

  const fs::path target(path);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    OutFile out(tmp, observer);
    out.write(kMagic, sizeof kMagic);
    out.write(&header_size, sizeof header_size);
    out.write(header_text.data(), header_text.size());
    out.write(&header_crc, sizeof header_crc);
    for (const auto& [name, cpu] : tensors) out.write(cpu.data_ptr(), cpu.numel() * cpu.element_size());
    out.sync_and_close();
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + errno_text());
  sync_directory(target.parent_path().empty() ? "." : target.parent_path().string());
}

CheckpointData read_checkpoint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open checkpoint '" + path + "': " + errno_text());
  char magic[8];
  uint64_t header_size = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0)
    throw Error("'" + path + "' is not a garden checkpoint (bad magic)");
  if (!in.read(reinterpret_cast<char*>(&header_size), 8) || header_size > (1ull << 32))
    throw Error("checkpoint '" + path + "' is truncated or corrupt (header size)");
  std::string header_text(header_size, '\0');
  uint32_t header_crc = 0;
  if (!in.read(header_text.data(), static_cast<std::streamsize>(header_size)) ||
      !in.read(reinterpret_cast<char*>(&header_crc), 4))
    throw Error("checkpoint '" + path + "' is truncated (in the header)");
  if (garden::unmask_crc(header_crc) != garden::crc32c(header_text.data(), header_text.size()))
    throw Error("checkpoint '" + path + "' is corrupt (header CRC mismatch)");
  const nlohmann::json header = nlohmann::json::parse(header_text);
  const std::streamoff data_start = 8 + 8 + static_cast<std::streamoff>(header_size) + 4;

  CheckpointData out;
  out.meta = header.at("meta");
  for (const auto& entry : header.at("tensors")) {
    const std::string name = entry.at("name");
    const auto dtype = dtype_from_name(entry.at("dtype"), path);
    const std::vector<int64_t> shape = entry.at("shape");
    const uint64_t nbytes = entry.at("nbytes");
    at::Tensor tensor = torch::empty(shape, torch::TensorOptions().dtype(dtype));
    if (static_cast<uint64_t>(tensor.numel() * tensor.element_size()) != nbytes)
      throw Error("checkpoint '" + path + "': tensor '" + name + "' size does not match its shape");
    in.seekg(data_start + static_cast<std::streamoff>(entry.at("offset").get<uint64_t>()));
    if (!in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(nbytes)))
      throw Error("checkpoint '" + path + "' is truncated (in tensor '" + name + "')");
    if (garden::crc32c(tensor.data_ptr(), nbytes) != entry.at("crc32c").get<uint32_t>())
      throw Error("checkpoint '" + path + "' is corrupt (CRC mismatch in tensor '" + name + "')");
    out.tensors.emplace(name, std::move(tensor));
  }
  return out;
}

// ---- CheckpointManager -----------------------------------------------------

CheckpointManager::CheckpointManager(std::string directory, int64_t max_to_keep,
                                     std::string prefix)
    : directory_(std::move(directory)), max_to_keep_(max_to_keep), prefix_(std::move(prefix)) {
  // A writer killed mid-write leaves only a temporary file: remove it. The
  // directory itself is made by the first save, so reading touches nothing.
  std::error_code ec;
  if (!fs::is_directory(directory_, ec)) return;
  const std::regex temporary("^" + prefix_ + "-[0-9]+\\.tmp-[0-9]+$|^checkpoint\\.tmp-[0-9]+$");
  for (const auto& entry : fs::directory_iterator(directory_))
    if (std::regex_match(entry.path().filename().string(), temporary))
      fs::remove(entry.path(), ec);
}

int64_t CheckpointManager::step_of(const std::string& path) {
  static const std::regex pattern(".*-([0-9]+)$");
  std::smatch match;
  const std::string name = fs::path(path).filename().string();
  if (!std::regex_match(name, match, pattern)) return -1;
  return std::stoll(match[1]);
}

std::vector<std::string> CheckpointManager::scan() const {
  std::vector<std::pair<int64_t, std::string>> found;
  const std::regex pattern("^" + prefix_ + "-([0-9]+)$");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, pattern)) found.emplace_back(std::stoll(match[1]), name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& [step, name] : found) names.push_back(name);
  return names;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  // The index is the record; files it names that are gone are skipped, and
  // without an index the directory is scanned.
  std::vector<std::string> names;
  std::ifstream index(fs::path(directory_) / "checkpoint");
  if (index) {
    static const std::regex line_pattern("^all_model_checkpoint_paths: \"(.*)\"$");
    for (std::string line; std::getline(index, line);) {
      std::smatch match;
      if (std::regex_match(line, match, line_pattern)) names.push_back(match[1]);
    }
  }
  if (names.empty()) names = scan();
  std::vector<std::string> paths;
  for (const auto& name : names) {
    const fs::path p = fs::path(name).is_absolute() ? fs::path(name) : fs::path(directory_) / name;
    if (fs::exists(p)) paths.push_back(p.string());
  }
  return paths;
}

std::optional<std::string> CheckpointManager::latest_checkpoint() const {
  const auto all = checkpoints();
  if (all.empty()) return std::nullopt;
  return all.back();
}

void CheckpointManager::write_index(const std::vector<std::string>& names) const {
  // TensorFlow's CheckpointState text format, so existing tools can read it.
  std::ostringstream text;
  if (!names.empty()) text << "model_checkpoint_path: \"" << names.back() << "\"\n";
  for (const auto& name : names) text << "all_model_checkpoint_paths: \"" << name << "\"\n";
  write_atomically((fs::path(directory_) / "checkpoint").string(), text.str());
}

std::string CheckpointManager::save(const CheckpointData& data, int64_t step) {
  const std::string name = prefix_ + "-" + std::to_string(step);
  const std::string path = (fs::path(directory_) / name).string();
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec) throw Error("cannot create checkpoint directory '" + directory_ + "': " + ec.message());
  write_checkpoint_file(path, data, observer_);

  std::vector<std::string> names;
  for (const auto& p : checkpoints()) {
    const std::string n = fs::path(p).filename().string();
    if (n != name) names.push_back(n);
  }
  names.push_back(name);
  std::vector<std::string> removed;
  while (static_cast<int64_t>(names.size()) > max_to_keep_) {
    removed.push_back(names.front());
    names.erase(names.begin());
  }
  // The index is updated before old files go, so it never names a missing file.
  write_index(names);
  for (const auto& n : removed) fs::remove(fs::path(directory_) / n, ec);
  return path;
}

std::optional<std::string> latest_checkpoint(const std::string& directory_or_file) {
  std::error_code ec;
  if (fs::is_regular_file(directory_or_file, ec)) return directory_or_file;
  if (!fs::is_directory(directory_or_file, ec)) return std::nullopt;
  std::ifstream index(fs::path(directory_or_file) / "checkpoint");
  static const std::regex latest("^model_checkpoint_path: \"(.*)\"$");
  for (std::string line; index && std::getline(index, line);) {
    std::smatch match;
    if (std::regex_match(line, match, latest)) {
      const fs::path p = fs::path(directory_or_file) / std::string(match[1]);
      if (fs::exists(p)) return p.string();
    }
  }
  // No usable index: the highest-numbered ckpt-N file.
  std::optional<std::string> best;
  int64_t best_step = -1;
  for (const auto& entry : fs::directory_iterator(directory_or_file, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) continue;
    const int64_t step = CheckpointManager::step_of(name);
    if (step > best_step && name.rfind("ckpt-", 0) == 0) {
      best_step = step;
      best = entry.path().string();
    }
  }
  return best;
}

}  // namespace garden
