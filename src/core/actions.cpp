#include "garden/core/actions.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/core/checkpoint.h"

namespace fs = std::filesystem;

namespace garden {

bool loss_diverged(double loss, int64_t step, const RecoveryOptions& options) {
  if (std::isnan(loss)) return true;
  return step >= options.recovery_begin_steps && loss > options.loss_upper_bound;
}

// ---- best checkpoint ---------------------------------------------------------

BestCheckpointExporter::BestCheckpointExporter(std::string export_dir, std::string metric,
                                               std::string comparison)
    : export_dir_(std::move(export_dir)),
      metric_(std::move(metric)),
      higher_is_better_(comparison != "lower") {
  const fs::path info = fs::path(export_dir_) / "info.json";
  if (!fs::exists(info)) return;
  std::ifstream in(info);
  try {
    const auto json = nlohmann::json::parse(in);
    if (json.contains(metric_)) best_ = json.at(metric_).get<double>();
  } catch (const std::exception& e) {
    throw Error("cannot read '" + info.string() + "': " + e.what());
  }
  if (best_) log_info() << "best " << metric_ << " so far: " << *best_ << " (" << info.string() << ")";
}

void BestCheckpointExporter::maybe_export_checkpoint(Trainer& trainer, const Logs& eval_logs,
                                                     int64_t global_step) {
  const auto it = eval_logs.find(metric_);
  if (it == eval_logs.end() || !is_scalar(it->second)) {
    std::string names;
    for (const auto& [key, value] : eval_logs)
      if (is_scalar(value)) names += (names.empty() ? "" : ", ") + key;
    throw Error("best_checkpoint_eval_metric '" + metric_ +
                "' is not in the evaluation logs; they have: " + names);
  }
  const double value = to_double(it->second);
  const bool better =
      !best_ || (higher_is_better_ ? value > *best_ : value < *best_);
  if (!better || std::isnan(value)) return;

  std::error_code ec;
  fs::create_directories(export_dir_, ec);
  if (ec) throw Error("cannot create '" + export_dir_ + "': " + ec.message());
  const std::string checkpoint = (fs::path(export_dir_) / kBestCheckpointName).string();
  write_checkpoint_file(checkpoint, trainer.checkpoint_state());
  // TensorFlow's index too, so every tool that takes a checkpoint directory
  // (garden translate --checkpoint=best, init_checkpoint) finds it.
  write_file_atomically((fs::path(export_dir_) / "checkpoint").string(),
                        std::string("model_checkpoint_path: \"") + kBestCheckpointName +
                            "\"\nall_model_checkpoint_paths: \"" + kBestCheckpointName + "\"\n");
  nlohmann::json info = nlohmann::json::object();
  for (const auto& [key, v] : eval_logs)
    if (is_scalar(v)) info[key] = to_double(v);
  info["best_ckpt_global_step"] = global_step;
  write_file_atomically((fs::path(export_dir_) / "info.json").string(), info.dump(2) + "\n");
  if (on_saved_) on_saved_(checkpoint);
  best_ = value;
  log_info() << "new best " << metric_ << " " << value << " at step " << global_step
             << "; exported to " << export_dir_;
}

}  // namespace garden
