// Model Garden's training actions (official/core/actions.py): recovery from a
// diverged loss, best-checkpoint export, and checkpoints on preemption.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/core/trainer.h"

namespace garden {

// RecoveryCondition: a training loss that is NaN, or above loss_upper_bound
// once the step is past recovery_begin_steps, means the run diverged.
struct RecoveryOptions {
  double loss_upper_bound = 1e6;
  int64_t recovery_begin_steps = 0;
  int64_t recovery_max_trials = 0;
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

// Thrown by the training loop when SIGTERM or SIGINT arrived; the checkpoint
// at the current step has been written by then.
class Preempted : public Error {
 public:
  Preempted(const std::string& message, int signal) : Error(message), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// While alive, SIGTERM and SIGINT set a flag instead of ending the process
// (a second SIGINT ends it at once). The previous handlers come back on
// destruction.
class PreemptionWatcher {
 public:
  PreemptionWatcher();
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;
  // The signal that arrived, or 0.
  static int pending();
  static void clear();

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
};

}  // namespace garden
