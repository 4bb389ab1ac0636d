// Model Garden's training actions (official/core/actions.py): recovery from a
// diverged loss and best-checkpoint export.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/core/trainer.h"
#include "garden/platform/stop_signals.h"

namespace garden {

// RecoveryCondition: a training loss that is NaN, or above loss_upper_bound
// once the step is past recovery_begin_steps, means the run diverged.
struct RecoveryOptions {
  double loss_upper_bound = 1e6;
  int64_t recovery_begin_steps = 0;
  int64_t recovery_max_trials = 0;
  // Replaces "recovery_max_trials (N) recoveries used up" in the message of
  // a run that cannot recover (TensorFX's "lower --learning-rate").
  std::string when_used_up;
};

// True when `loss` at `step` calls for recovery.
bool loss_diverged(double loss, int64_t step, const RecoveryOptions& options);

// Model Garden's BestCheckpointExporter: after each evaluation, writes the
// checkpoint to <export_dir>/best_ckpt with <export_dir>/info.json (the logs
// and the step) when `metric` beats the best so far (strictly). A restarted
// run reads info.json back and keeps comparing.
class BestCheckpointExporter : public CheckpointExporter {
 public:
  BestCheckpointExporter(std::string export_dir, std::string metric, std::string comparison);
  void maybe_export_checkpoint(Trainer& trainer, const Logs& eval_logs,
                               int64_t global_step) override;
  // The best value so far, if any.
  std::optional<double> best() const { return best_; }
  const std::string& export_dir() const { return export_dir_; }
  const std::string& metric() const { return metric_; }
  // Called with the checkpoint's path after each export.
  void set_on_saved(std::function<void(const std::string&)> on_saved) {
    on_saved_ = std::move(on_saved);
  }

 private:
  std::string export_dir_;
  std::string metric_;
  bool higher_is_better_;
  std::optional<double> best_;
  std::function<void(const std::string&)> on_saved_;
};

// Checkpoints on preemption: the training loop stops at a step boundary
// while a GracefulStop (garden/platform/stop_signals.h) lives and a stop signal
// is pending, and throws Preempted once the checkpoint is written.

}  // namespace garden
