#include "garden/core/controller.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <iomanip>
#include <sstream>
#include <thread>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/core/progress.h"
#include "garden/core/summary_writer.h"
#include "garden/platform/stop_signals.h"

namespace garden {
namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// True when the step moved past a multiple of `interval` since `previous`.
bool crossed(int64_t previous, int64_t current, int64_t interval) {
  if (interval <= 0) return false;
  const int64_t before = previous < 0 ? -1 : previous / interval;
  return current / interval > before;
}

std::string format_number(double value) {
  std::ostringstream out;
  const double magnitude = std::fabs(value);
  if (value != 0 && (magnitude < 1e-3 || magnitude >= 1e6))
    out << std::scientific << std::setprecision(3) << value;
  else
    out << std::fixed << std::setprecision(4) << value;
  return out.str();
}
}  // namespace

std::string format_logs(const Logs& logs) {
  std::string out;
  for (const auto& [key, value] : logs) {
    if (!is_scalar(value)) continue;
    out += (out.empty() ? "" : " | ") + key + ": " + format_number(to_double(value));
  }
  return out;
}

Controller::Controller(Trainer* trainer, Trainer* evaluator, CheckpointManager* checkpoint_manager,
                       ControllerOptions options)
    : trainer_(trainer),
      evaluator_(evaluator),
      checkpoint_manager_(checkpoint_manager),
      options_(std::move(options)) {
  if (!trainer_ && !evaluator_) throw Error("a Controller needs a trainer or an evaluator");
  if (options_.steps_per_loop < 1) throw Error("steps_per_loop must be >= 1");
}

Controller::~Controller() = default;

SummaryWriter* Controller::train_writer() {
  if (!train_writer_ && !options_.summary_dir.empty())
    train_writer_ = std::make_unique<SummaryWriter>(options_.summary_dir);
  return train_writer_.get();
}

SummaryWriter* Controller::eval_writer() {
  if (!eval_writer_ && !options_.eval_summary_dir.empty())
    eval_writer_ = std::make_unique<SummaryWriter>(options_.eval_summary_dir);
  return eval_writer_.get();
}

void Controller::write_summaries(SummaryWriter* writer, const Logs& logs, int64_t step) {
  if (!writer) return;
  std::map<std::string, double> scalars;
  for (const auto& [key, value] : logs) {
    if (is_scalar(value)) {
      scalars[key] = to_double(value);
    } else if (const auto* texts = std::get_if<std::vector<std::string>>(&value)) {
      std::string joined;
      for (const auto& t : *texts) joined += t + "\n\n";
      writer->text(key, joined, step);
    }
  }
  if (!scalars.empty()) writer->scalars(scalars, step);
  writer->flush();
}

std::optional<std::string> Controller::restore_checkpoint(const std::optional<std::string>& path,
                                                          const CheckpointData* preloaded) {
  Trainer* owner = trainer_ ? trainer_ : evaluator_;
  std::optional<std::string> target = path;
  if (!target && checkpoint_manager_) target = checkpoint_manager_->latest_checkpoint();
  if (!target) {
    owner->initialize();
    last_checkpoint_step_ = owner->global_step();
    return std::nullopt;
  }
  const CheckpointData data = preloaded ? CheckpointData{} : read_checkpoint_file(*target);
  const CheckpointData& checkpoint = preloaded ? *preloaded : data;
  owner->restore_checkpoint_state(checkpoint);
  if (evaluator_ && evaluator_ != owner) evaluator_->restore_checkpoint_state(checkpoint);
  last_checkpoint_step_ = owner->global_step();
  log_info() << "restored " << *target << " at step " << owner->global_step();
  return target;
}

std::optional<std::string> Controller::save_checkpoint() {
  if (!checkpoint_manager_ || !trainer_) return std::nullopt;
  const int64_t step = trainer_->global_step();
  // Every worker takes part (their input positions go in); the chief writes.
  const CheckpointData data = trainer_->checkpoint_state_of_all_workers();
  last_checkpoint_step_ = step;
  if (!trainer_->is_chief()) return std::nullopt;
  const std::string path = checkpoint_manager_->save(data, step);
  log_info() << "saved checkpoint " << path;
  return path;
}

void Controller::maybe_save_checkpoint(bool force) {
  if (!checkpoint_manager_ || !trainer_) return;
  const int64_t step = trainer_->global_step();
  if (step == last_checkpoint_step_) return;
  if (force || crossed(last_checkpoint_step_, step, options_.checkpoint_interval))
    save_checkpoint();
}

void Controller::train(int64_t steps, bool checkpoint_at_completion) {
  if (!trainer_) throw Error("train needs a trainer");
  int64_t current = trainer_->global_step();
  if (current >= steps) {
    log_info() << "global step " << current << " has reached train_steps " << steps
               << "; nothing to train";
    return;
  }
  if (last_summary_step_ < 0) last_summary_step_ = current;
  const int64_t overall = std::max(steps, overall_steps_);
  const bool watch_signals = options_.checkpoint_on_preemption;
  // A stop that came before the first step (while the task was built):
  // nothing new to save. One that came between two calls of a caller that
  // trains in parts (TensorFX's ModelTrainer) saves the steps this run made.
  if (watch_signals && trainer_->stop_requested() && StopSignals::pending() != 0) {
    if (trained_) stop_for_preemption();
    throw Preempted("received " + StopSignals::name(StopSignals::pending()) +
                        " before the first step of this run; nothing new to save; run the "
                        "same command to resume",
                    StopSignals::pending());
  }
  Progress progress(current, overall, options_.interactive);
  trainer_->set_step_observer([&progress, watch_signals, this](int64_t step) {
    progress.update(step);
    // Over several workers, agreed by all at this step.
    if (watch_signals && trainer_->stop_requested()) throw StopRequested{};
  });
  struct ObserverReset {
    Trainer* trainer;
    ~ObserverReset() { trainer->set_step_observer(nullptr); }
  } reset{trainer_};

  while (current < steps) {
    const int64_t num_steps = std::min(options_.steps_per_loop, steps - current);
    const auto start = Clock::now();
    const int64_t examples_before = trainer_->examples_seen();
    Logs logs;
    try {
      logs = trainer_->train(num_steps);
      trained_ = true;
    } catch (const StopRequested&) {
      progress.clear();
      stop_for_preemption();
    }
    const double seconds = std::max(seconds_since(start), 1e-9);
    const int64_t previous = current;
    current = trainer_->global_step();
    const double steps_per_second = static_cast<double>(current - previous) / seconds;
    const double examples_per_second =
        static_cast<double>(trainer_->examples_seen() - examples_before) / seconds;
    logs["steps_per_second"] = steps_per_second;
    progress.clear();
    if (options_.recovery) {
      const double loss = to_double(logs.at("training_loss"));
      if (loss_diverged(loss, current, *options_.recovery)) {
        current = recover(loss, current);
        continue;
      }
    }
    std::ostringstream rate;
    rate << std::fixed << std::setprecision(1) << steps_per_second << " steps/s, "
         << std::setprecision(0) << examples_per_second << " examples/s";
    if (options_.log_progress)
      log_info() << "train | step " << current << "/" << overall << " | " << rate.str() << " | ETA "
                 << Progress::format_duration(progress.eta_seconds(current)) << " | "
                 << format_logs(logs);
    if (options_.summary_interval > 0 &&
        (crossed(last_summary_step_, current, options_.summary_interval) || current >= steps)) {
      write_summaries(train_writer(), logs, current);
      last_summary_step_ = current;
    }
    for (auto& action : train_actions_) action(logs);
    maybe_save_checkpoint(/*force=*/false);
  }
  if (checkpoint_at_completion) maybe_save_checkpoint(/*force=*/true);
}

int64_t Controller::recover(double loss, int64_t step) {
  const auto& recovery = *options_.recovery;
  std::ostringstream what;
  what << "training_loss ";
  if (std::isnan(loss))
    what << "nan";  // never "-nan"
  else
    what << loss;
  what << " at step " << step;
  if (std::isfinite(loss)) what << " is above loss_upper_bound " << recovery.loss_upper_bound;
  if (recoveries_ >= recovery.recovery_max_trials)
    throw Error("training diverged: " + what.str() + "; " +
                (recovery.when_used_up.empty()
                     ? "recovery_max_trials (" + std::to_string(recovery.recovery_max_trials) +
                           ") recoveries used up"
                     : recovery.when_used_up));
  auto intact = checkpoint_manager_ ? checkpoint_manager_->read_latest_intact() : std::nullopt;
  if (!intact) throw Error("training diverged: " + what.str() + "; no checkpoint to recover from");
  ++recoveries_;
  // Model and optimizer go back; the input moves on to new data.
  trainer_->restore_checkpoint_state(intact->second, /*restore_input=*/false);
  const std::string& latest = intact->first;
  log_warning() << what.str() << "; restored " << latest << " (recovery " << recoveries_ << " of "
                << recovery.recovery_max_trials << ")";
  return trainer_->global_step();
}

void Controller::stop_for_preemption() {
  const int signal = StopSignals::pending();
  const std::string name = StopSignals::name(signal);
  const int64_t step = trainer_->global_step();
  std::string message =
      signal == 0
          ? "another worker received a stop signal; stopping at step " + std::to_string(step)
          : std::string("received ") + name + " at step " + std::to_string(step);
  if (const auto path = checkpoint_manager_ ? save_checkpoint() : std::nullopt)
    message += "; saved " + *path + "; run the same command to resume";
  else if (!trainer_->is_chief() && checkpoint_manager_)
    message += "; the chief saved the checkpoint; run the same command to resume";
  throw Preempted(message, signal ? signal : SIGTERM);
}

Logs Controller::evaluate(int64_t steps) {
  if (!evaluator_) throw Error("evaluate needs an evaluator");
  const auto start = Clock::now();
  // One process stops an evaluation between batches for a stop signal
  // (several workers evaluate shards of different lengths: they finish it).
  if (!evaluator_->process_group())
    evaluator_->set_eval_batch_observer([] {
      if (StopSignals::pending() != 0) throw StopRequested{};
    });
  struct ObserverReset {
    Trainer* trainer;
    ~ObserverReset() { trainer->set_eval_batch_observer(nullptr); }
  } reset{evaluator_};
  Logs logs;
  try {
    logs = evaluator_->evaluate(steps);
  } catch (const StopRequested&) {
    if (trainer_ && options_.checkpoint_on_preemption) stop_for_preemption();
    const int signal = StopSignals::pending();
    throw Preempted("received " + StopSignals::name(signal) + " while evaluating step " +
                        std::to_string(evaluator_->global_step()) +
                        "; stopped (an evaluation saves nothing)",
                    signal);
  }
  const int64_t step = evaluator_->global_step();
  if (options_.log_progress)
    log_info() << "eval | step " << step << " | " << std::fixed << std::setprecision(2)
               << seconds_since(start) << " s | " << format_logs(logs);
  write_summaries(eval_writer(), logs, step);
  if (auto* exporter = evaluator_->checkpoint_exporter())
    exporter->maybe_export_checkpoint(*evaluator_, logs, step);
  for (auto& action : eval_actions_) action(logs);
  return logs;
}

Logs Controller::train_and_evaluate(int64_t train_steps, int64_t eval_steps,
                                    int64_t eval_interval) {
  if (!trainer_ || !evaluator_) throw Error("train_and_eval needs a trainer and an evaluator");
  if (eval_interval < 1) throw Error("the evaluation interval must be >= 1");
  Logs logs;
  int64_t current = trainer_->global_step();
  overall_steps_ = train_steps;
  while (current < train_steps) {
    const int64_t interval = std::min(train_steps - current, eval_interval);
    train(current + interval, /*checkpoint_at_completion=*/false);
    current = trainer_->global_step();
    logs = evaluate(eval_steps);
  }
  maybe_save_checkpoint(/*force=*/true);
  return logs;
}

Logs Controller::evaluate_continuously(int64_t steps, int64_t timeout_seconds, int64_t train_steps,
                                       double poll_seconds) {
  if (!evaluator_ || !checkpoint_manager_)
    throw Error("continuous_eval needs an evaluator and a checkpoint directory");
  Logs logs;
  std::string last_path;
  auto deadline = Clock::now() + std::chrono::seconds(timeout_seconds);
  log_info() << "waiting for checkpoints in " << checkpoint_manager_->directory();
  while (true) {
    const auto latest = checkpoint_manager_->latest_checkpoint();
    if (latest && *latest != last_path) {
      const CheckpointData data = read_checkpoint_file(*latest);
      evaluator_->restore_checkpoint_state(data);
      last_path = *latest;
      logs = evaluate(steps);
      if (evaluator_->global_step() >= train_steps) {
        log_info() << "evaluated step " << evaluator_->global_step() << " >= train_steps "
                   << train_steps << "; continuous evaluation done";
        break;
      }
      deadline = Clock::now() + std::chrono::seconds(timeout_seconds);
      continue;
    }
    if (Clock::now() >= deadline) {
      log_info() << "no new checkpoint for " << timeout_seconds
                 << " s (continuous_eval_timeout); stopping";
      break;
    }
    if (StopSignals::wait_for(std::chrono::duration<double>(poll_seconds))) {
      const int signal = StopSignals::pending();
      throw Preempted("received " + StopSignals::name(signal) +
                          " while waiting for a checkpoint; continuous evaluation stopped "
                          "(it saves nothing)",
                      signal);
    }
  }
  return logs;
}

}  // namespace garden
