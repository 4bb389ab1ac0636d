// Orbit's Controller: runs a Trainer in loops of steps_per_loop, writes
// summaries every summary_interval and checkpoints every checkpoint_interval,
// and evaluates, once or continuously.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "garden/core/actions.h"
#include "garden/core/checkpoint.h"
#include "garden/core/trainer.h"

namespace garden {

class SummaryWriter;

struct ControllerOptions {
  int64_t steps_per_loop = 1000;
  int64_t summary_interval = 1000;     // 0: no training summaries
  int64_t checkpoint_interval = 1000;  // 0: only at the end of training
  std::string summary_dir;             // "": no training summaries
  std::string eval_summary_dir;        // "": no evaluation summaries
  bool interactive = false;            // draw a progress bar
  // Restore the last checkpoint when the training loss diverges.
  std::optional<RecoveryOptions> recovery;
  // Write a checkpoint and stop (throwing Preempted) when a stop signal is
  // pending (garden/platform/stop_signals.h): at the next step, or during an
  // evaluation of a training run.
  bool checkpoint_on_preemption = false;
  // Log a line after each training loop and evaluation; false where the
  // caller's actions report them in a format of their own (TensorFX's).
  bool log_progress = true;
};

class Controller {
 public:
  // Called with the logs of each training loop / each evaluation.
  using Action = std::function<void(const Logs& logs)>;

  // `trainer` and `evaluator` may be the same object, and either may be null
  // when the mode does not need it; `checkpoint_manager` may be null.
  Controller(Trainer* trainer, Trainer* evaluator, CheckpointManager* checkpoint_manager,
             ControllerOptions options);
  ~Controller();

  // Restores `path` (default: the latest checkpoint; `data`, when given, is
  // its content already read); when there is none, initializes the model
  // (Trainer::initialize). Returns the restored path.
  std::optional<std::string> restore_checkpoint(const std::optional<std::string>& path = {},
                                                const CheckpointData* data = nullptr);
  // Trains until the global step reaches `steps`.
  void train(int64_t steps, bool checkpoint_at_completion = true);
  // Evaluates `steps` batches (-1: all the validation data) at the current
  // global step, writing the logs as summaries.
  Logs evaluate(int64_t steps = -1);
  // Trains to train_steps, evaluating every eval_interval steps and at the end.
  Logs train_and_evaluate(int64_t train_steps, int64_t eval_steps, int64_t eval_interval);
  // Evaluates each new checkpoint as it appears; stops when a checkpoint at
  // or past `train_steps` has been evaluated, or when none appears for
  // `timeout_seconds`. Returns the last evaluation's logs.
  Logs evaluate_continuously(int64_t steps, int64_t timeout_seconds, int64_t train_steps,
                             double poll_seconds = 1.0);
  // Writes a checkpoint at the current global step now.
  std::optional<std::string> save_checkpoint();

  void add_train_action(Action action) { train_actions_.push_back(std::move(action)); }
  void add_eval_action(Action action) { eval_actions_.push_back(std::move(action)); }

 private:
  void maybe_save_checkpoint(bool force);
  // Restores the last checkpoint after a diverged loop, or throws once
  // recovery_max_trials is used up. Returns the step trained from next.
  int64_t recover(double loss, int64_t step);
  [[noreturn]] void stop_for_preemption();
  // Thrown by the step and evaluation observers to leave the loop.
  struct StopRequested {};
  void write_summaries(SummaryWriter* writer, const Logs& logs, int64_t step);
  SummaryWriter* train_writer();
  SummaryWriter* eval_writer();

  Trainer* trainer_;
  Trainer* evaluator_;
  CheckpointManager* checkpoint_manager_;
  ControllerOptions options_;
  int64_t last_checkpoint_step_ = -1;
  bool trained_ = false;  // train() ran steps in this process
  int64_t last_summary_step_ = -1;
  // The step the whole run trains to (train_and_evaluate trains in pieces),
  // for the progress bar and the ETA.
  int64_t overall_steps_ = 0;
  int64_t recoveries_ = 0;
  std::unique_ptr<SummaryWriter> train_writer_;
  std::unique_ptr<SummaryWriter> eval_writer_;
  std::vector<Action> train_actions_;
  std::vector<Action> eval_actions_;
};

// "training_loss: 0.4123 | accuracy: 0.9500" from the numeric logs.
std::string format_logs(const Logs& logs);

}  // namespace garden
