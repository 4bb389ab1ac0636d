#include "garden/core/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "garden/base/crc32c.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"

namespace fs = std::filesystem;

namespace garden {
namespace {

constexpr char kMagic[8] = {'G', 'A', 'R', 'D', 'N', 'C', 'K', '1'};

std::string errno_text() { return std::strerror(errno); }

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

at::ScalarType dtype_from_name(const std::string& name, const std::string& path) {
  static const at::ScalarType kTypes[] = {
      at::kByte,  at::kChar,   at::kShort, at::kInt,      at::kLong,         at::kHalf,
      at::kFloat, at::kDouble, at::kBool,  at::kBFloat16, at::kComplexFloat, at::kComplexDouble};
  for (auto t : kTypes)
    if (name == c10::toString(t)) return t;
  throw Error("checkpoint '" + path + "' holds a tensor of unknown dtype '" + name + "'");
}

// True when `pid` names a process that is still running.
bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
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

  AtomicFile out(path);
  const auto write = [&](const void* bytes, uint64_t size) {
    out.write(bytes, size);
    if (observer) observer(out.bytes_written());
  };
  write(kMagic, sizeof kMagic);
  write(&header_size, sizeof header_size);
  write(header_text.data(), header_text.size());
  write(&header_crc, sizeof header_crc);
  for (const auto& [name, cpu] : tensors) write(cpu.data_ptr(), cpu.numel() * cpu.element_size());
  out.commit();
}

namespace {

// The verified header text of the checkpoint at `path` (magic, size and CRC
// checked), leaving `in` just after it; `file_size` is the file's size.
std::string read_header_text(const std::string& path, std::ifstream& in, uint64_t& file_size) {
  check_input_file(path, "checkpoint");
  in.open(path, std::ios::binary);
  if (!in) throw Error("cannot open checkpoint '" + path + "': " + errno_text());
  std::error_code ec;
  file_size = fs::file_size(path, ec);
  if (ec) throw Error("cannot read checkpoint '" + path + "': " + ec.message());
  char magic[8];
  uint64_t header_size = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0)
    throw Error("'" + path + "' is not a garden checkpoint (bad magic)");
  // The header must fit in the file: a damaged size never allocates more.
  if (!in.read(reinterpret_cast<char*>(&header_size), 8) || header_size > file_size ||
      8 + 8 + header_size + 4 > file_size)
    throw Error("checkpoint '" + path + "' is truncated or corrupt (header size)");
  std::string header_text(header_size, '\0');
  uint32_t header_crc = 0;
  if (!in.read(header_text.data(), static_cast<std::streamsize>(header_size)) ||
      !in.read(reinterpret_cast<char*>(&header_crc), 4))
    throw Error("checkpoint '" + path + "' is truncated (in the header)");
  if (garden::unmask_crc(header_crc) != garden::crc32c(header_text.data(), header_text.size()))
    throw Error("checkpoint '" + path + "' is corrupt (header CRC mismatch)");
  return header_text;
}

}  // namespace

nlohmann::json read_checkpoint_meta(const std::string& path) {
  std::ifstream in;
  uint64_t file_size = 0;
  const std::string header_text = read_header_text(path, in, file_size);
  try {
    return nlohmann::json::parse(header_text).at("meta");
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint '" + path + "' has a malformed header: " + e.what());
  }
}

CheckpointData read_checkpoint_file(const std::string& path) {
  std::ifstream in;
  uint64_t file_size = 0;
  const std::string header_text = read_header_text(path, in, file_size);
  const uint64_t header_size = header_text.size();
  const uint64_t data_start = 8 + 8 + header_size + 4;
  const uint64_t data_size = file_size - data_start;

  CheckpointData out;
  try {
    const nlohmann::json header = nlohmann::json::parse(header_text);
    out.meta = header.at("meta");
    for (const auto& entry : header.at("tensors")) {
      const std::string name = entry.at("name");
      const auto dtype = dtype_from_name(entry.at("dtype"), path);
      const std::vector<int64_t> shape = entry.at("shape");
      const uint64_t nbytes = entry.at("nbytes");
      const uint64_t offset = entry.at("offset");
      // The shape, the size and the place are checked before any memory is
      // taken: they must agree, and the bytes must lie inside the file.
      uint64_t count = 1;
      bool fits = true;
      for (int64_t d : shape) {
        if (d < 0 || (d > 0 && count > data_size / static_cast<uint64_t>(d))) fits = false;
        if (fits) count *= static_cast<uint64_t>(d);
      }
      const uint64_t element = c10::elementSize(dtype);
      if (!fits || count > data_size / element || count * element != nbytes)
        throw Error("checkpoint '" + path + "': tensor '" + name +
                    "' size does not match its shape");
      if (offset > data_size || nbytes > data_size - offset)
        throw Error("checkpoint '" + path + "' is truncated (in tensor '" + name + "')");
      at::Tensor tensor = torch::empty(shape, torch::TensorOptions().dtype(dtype));
      in.seekg(static_cast<std::streamoff>(data_start + offset));
      if (!in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(nbytes)))
        throw Error("checkpoint '" + path + "' is truncated (in tensor '" + name + "')");
      if (garden::crc32c(tensor.data_ptr(), nbytes) != entry.at("crc32c").get<uint32_t>())
        throw Error("checkpoint '" + path + "' is corrupt (CRC mismatch in tensor '" + name + "')");
      if (!out.tensors.emplace(name, std::move(tensor)).second)
        throw Error("checkpoint '" + path + "' holds tensor '" + name + "' twice");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint '" + path + "' has a malformed header: " + e.what());
  }
  return out;
}

// ---- CheckpointManager -----------------------------------------------------

CheckpointManager::CheckpointManager(std::string directory, int64_t max_to_keep, std::string prefix)
    : directory_(std::move(directory)), max_to_keep_(max_to_keep), prefix_(std::move(prefix)) {
  // A writer killed mid-write leaves only a temporary file: remove it. The
  // directory itself is made by the first save, so reading touches nothing.
  std::error_code ec;
  if (!fs::is_directory(directory_, ec)) return;
  // A writer still alive (a trainer beside this evaluator) keeps its file.
  const std::regex temporary("^(" + prefix_ + "-[0-9]+|checkpoint)\\.tmp-([0-9]{1,9})$");
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, temporary) && !process_alive(std::stol(match[2])))
      fs::remove(entry.path(), ec);
  }
}

int64_t CheckpointManager::step_of(const std::string& path) {
  static const std::regex pattern(".*-([0-9]{1,18})$");
  std::smatch match;
  const std::string name = fs::path(path).filename().string();
  if (!std::regex_match(name, match, pattern)) return -1;
  return std::stoll(match[1]);
}

std::vector<std::string> CheckpointManager::scan() const {
  std::vector<std::pair<int64_t, std::string>> found;
  const std::regex pattern("^" + prefix_ + "-([0-9]{1,18})$");
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
  return garden::latest_checkpoint(directory_, prefix_);
}

std::optional<std::pair<std::string, CheckpointData>> CheckpointManager::read_latest_intact()
    const {
  // The index's latest first, then every kept one, newest first.
  std::vector<std::string> candidates;
  if (const auto latest = latest_checkpoint()) candidates.push_back(*latest);
  auto kept = checkpoints();
  for (const auto& name : scan()) kept.push_back((fs::path(directory_) / name).string());
  std::sort(kept.begin(), kept.end(),
            [](const std::string& a, const std::string& b) { return step_of(a) > step_of(b); });
  for (const auto& path : kept)
    if (std::find(candidates.begin(), candidates.end(), path) == candidates.end())
      candidates.push_back(path);
  // An index that names nothing usable (damaged, or its file gone) is said
  // once; the directory's own checkpoints are used.
  const fs::path index_path = fs::path(directory_) / "checkpoint";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    std::ifstream index(index_path);
    static const std::regex latest("^model_checkpoint_path: \"(.*)\"$");
    bool usable = false;
    for (std::string line; std::getline(index, line);) {
      std::smatch match;
      if (std::regex_match(line, match, latest)) {
        const fs::path named{std::string(match[1])};
        usable = usable || fs::is_regular_file(
                               named.is_absolute() ? named : fs::path(directory_) / named, ec);
      }
    }
    if (!usable && !candidates.empty())
      log_warning() << "checkpoint index '" << index_path.string()
                    << "' names no checkpoint that exists; using the newest in " << directory_;
  }
  std::optional<std::string> first_fault;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    try {
      CheckpointData data = read_checkpoint_file(candidates[i]);
      if (first_fault) log_warning() << "resuming from the older " << candidates[i] << " instead";
      return std::make_pair(candidates[i], std::move(data));
    } catch (const Error& e) {
      log_warning() << "checkpoint unusable, passed over: " << e.what();
      if (!first_fault) first_fault = e.what();
    }
  }
  if (first_fault)
    throw Error(*first_fault + "; no older checkpoint in " + directory_ + " is intact either");
  return std::nullopt;
}

void CheckpointManager::write_index(const std::vector<std::string>& names) const {
  // TensorFlow's CheckpointState text format, so existing tools can read it.
  std::ostringstream text;
  if (!names.empty()) text << "model_checkpoint_path: \"" << names.back() << "\"\n";
  for (const auto& name : names) text << "all_model_checkpoint_paths: \"" << name << "\"\n";
  write_file_atomically((fs::path(directory_) / "checkpoint").string(), text.str());
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
  if (on_saved_) on_saved_(path);
  return path;
}

std::optional<std::string> latest_checkpoint(const std::string& directory_or_file,
                                             const std::string& prefix) {
  std::error_code ec;
  if (fs::is_regular_file(directory_or_file, ec)) return directory_or_file;
  if (!fs::is_directory(directory_or_file, ec)) return std::nullopt;
  const fs::path dir(directory_or_file);
  // The index names the latest (TensorFlow's CheckpointState).
  std::ifstream index(dir / "checkpoint");
  static const std::regex latest("^model_checkpoint_path: \"(.*)\"$");
  for (std::string line; index && std::getline(index, line);) {
    std::smatch match;
    if (std::regex_match(line, match, latest)) {
      const fs::path named{std::string(match[1])};
      const fs::path p = named.is_absolute() ? named : dir / named;
      if (fs::is_regular_file(p, ec)) return p.string();
    }
  }
  // No usable index: the highest-numbered <prefix>-N file.
  std::optional<std::string> best;
  int64_t best_step = -1;
  static const std::regex numbered("^(.*)-([0-9]{1,18})$");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, numbered) || match[1] != prefix) continue;
    const int64_t step = std::stoll(match[2]);
    if (step > best_step) {
      best_step = step;
      best = entry.path().string();
    }
  }
  if (best) return best;
  // A best-checkpoint export (Model Garden writes <dir>/best_ckpt, no index).
  if (fs::is_regular_file(dir / kBestCheckpointName, ec))
    return (dir / kBestCheckpointName).string();
  return std::nullopt;
}

}  // namespace garden
