// Checkpoints: model_dir/ckpt-<step> files and the `checkpoint` index that
// names the latest, written with the one atomic write (garden/base/file_io.h),
// so that a kill at any moment leaves the previous checkpoint usable.
//
// File format (little-endian): "GARDNCK1", u64 header length, the header
// (JSON: meta plus each tensor's name, dtype, shape, offset, size, CRC-32C),
// u32 masked CRC-32C of the header, then the tensors' bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace garden {

struct CheckpointData {
  std::map<std::string, at::Tensor> tensors;
  nlohmann::json meta = nlohmann::json::object();
};

// Called as bytes reach the file (for progress, and for tests that simulate a
// crash in the middle of a write by throwing).
using WriteObserver = std::function<void(uint64_t bytes_written)>;

// Writes `data` to `path` atomically. Throws garden::Error naming the path.
void write_checkpoint_file(const std::string& path, const CheckpointData& data,
                           const WriteObserver& observer = {});
// Reads and verifies every CRC. Throws garden::Error naming the path and what
// is wrong (not a checkpoint, truncated, corrupt tensor '...').
CheckpointData read_checkpoint_file(const std::string& path);
// The meta of the checkpoint at `path` (its header, CRC checked), without
// reading its tensors; errors as read_checkpoint_file's.
nlohmann::json read_checkpoint_meta(const std::string& path);

class CheckpointManager {
 public:
  // Removes temporary files that a killed writer left in `directory`.
  CheckpointManager(std::string directory, int64_t max_to_keep, std::string prefix = "ckpt");

  const std::string& directory() const { return directory_; }
  // Paths of the kept checkpoints, oldest first.
  std::vector<std::string> checkpoints() const;
  std::optional<std::string> latest_checkpoint() const;
  // Writes <prefix>-<step>, updates the index, then deletes the oldest beyond
  // max_to_keep. Returns the path.
  std::string save(const CheckpointData& data, int64_t step);
  void set_write_observer(WriteObserver observer) { observer_ = std::move(observer); }
  // Called with the path after each save (a run commits its model_dir).
  void set_on_saved(std::function<void(const std::string&)> on_saved) {
    on_saved_ = std::move(on_saved);
  }

  // The newest checkpoint that reads back whole (every CRC checked), with its
  // data. One that does not (truncated, bit-flipped, not a checkpoint) is
  // passed over with a warning naming it, its fault and the older one used
  // instead. nullopt when there is no checkpoint; throws naming the newest
  // one's fault when none is intact (a run never silently starts over).
  std::optional<std::pair<std::string, CheckpointData>> read_latest_intact() const;
  // The step in a checkpoint path's name (ckpt-200 -> 200), or -1.
  static int64_t step_of(const std::string& path);

 private:
  void write_index(const std::vector<std::string>& names) const;
  std::vector<std::string> scan() const;

  std::string directory_;
  int64_t max_to_keep_;
  std::string prefix_;
  WriteObserver observer_;
  std::function<void(const std::string&)> on_saved_;
};

// The name of the best checkpoint an export directory holds (Model Garden's
// BestCheckpointExporter writes <export_dir>/best_ckpt).
inline constexpr const char* kBestCheckpointName = "best_ckpt";

// The one way to find a checkpoint: `directory_or_file` itself when it is a
// file; in a directory, the one its `checkpoint` index names, else the
// highest-numbered <prefix>-N, else a best-checkpoint export's best_ckpt;
// nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& directory_or_file,
                                             const std::string& prefix = "ckpt");

}  // namespace garden
