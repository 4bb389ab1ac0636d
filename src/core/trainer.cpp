#include "garden/core/trainer.h"

#include <torch/torch.h>

#include "accumulation.h"
#include "garden/base/error.h"
#include "garden/config/validation.h"
#include "garden/config/yaml_io.h"
#include "garden/core/cuda_graph.h"
#include "garden/core/strategy.h"
#include "garden/optim/optimizer.h"
#include "garden/platform/cpu_share.h"

namespace garden {

Trainer::Trainer(std::shared_ptr<const config::ExperimentConfig> config, TaskPtr task,
                 ModelPtr model, std::shared_ptr<optim::Optimizer> optimizer, TrainerMode mode,
                 std::shared_ptr<DistributionStrategy> strategy,
                 std::shared_ptr<CheckpointExporter> checkpoint_exporter, DatasetPtr train_dataset,
                 DatasetPtr validation_dataset)
    : config_(std::move(config)),
      task_(std::move(task)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      strategy_(strategy ? std::move(strategy) : single_process_strategy()),
      train_dataset_(std::move(train_dataset)),
      validation_dataset_(std::move(validation_dataset)),
      checkpoint_exporter_(std::move(checkpoint_exporter)) {
  if (!config_ || !task_ || !model_) throw Error("Trainer needs a config, a task and a model");
  const bool train = mode != TrainerMode::kEvaluate;
  const bool evaluate = mode != TrainerMode::kTrain;
  device_ = at::Device(config_->runtime.device);
  task_->set_mixed_precision(config_->runtime.mixed_precision_dtype, device_);
  const auto build = [this](const config::DataConfig& params, const InputContext& context) {
    return task_->build_inputs(params, context);
  };
  // The data layers name their keys relative to their DataConfig
  // (config::refuse("input_path", ...)): say which of the task's it is.
  const auto build_named = [&](const char* key, const config::DataConfig& params) {
    const config::detail::KeyPrefix where(key);
    return distribute_dataset(build, params);
  };
  if (optimizer_) {
    minimizer_ = std::make_unique<Minimizer>(*optimizer_);
    minimizer_->set_accumulation_steps(config_->trainer.gradient_accumulation_steps);
    if (train)
      strategy_->attach(*minimizer_, *optimizer_, *config_, [this] { return global_step_; });
  }
  if (config_->runtime.cuda_graphs && optimizer_ && train) enable_cuda_graphs();
  // The config the run resolved travels in every checkpoint (the config
  // itself does not change after it is locked).
  params_yaml_ = config::to_yaml_string(const_cast<config::ExperimentConfig&>(*config_));
  if (train) {
    if (!optimizer_) throw Error("a training Trainer needs an optimizer");
    if (!train_dataset_ && strategy_->computes_steps())
      train_dataset_ = build_named("task.train_data", config_->task->train_data_config());
    train_metrics_ = task_->build_metrics(/*training=*/true);
  }
  if (evaluate) {
    if (!validation_dataset_)
      validation_dataset_ =
          build_named("task.validation_data", config_->task->validation_data_config());
    validation_metrics_ = task_->build_metrics(/*training=*/false);
  }
}

Trainer::~Trainer() = default;

DatasetPtr Trainer::distribute_dataset(const DatasetFn& dataset_fn,
                                       const config::DataConfig& params) {
  return strategy_->distribute_dataset(dataset_fn, params);
}

const distribute::ProcessGroupPtr& Trainer::process_group() const {
  return strategy_->process_group();
}

bool Trainer::is_chief() const { return strategy_->is_chief(); }

bool Trainer::stop_requested() const { return strategy_->stop_requested(); }

void Trainer::init_async() { strategy_->init_async(*optimizer_, global_step_); }

void Trainer::join() {
  if (Coordinator* coordinator = strategy_->coordinator()) coordinator->join();
}

Coordinator* Trainer::coordinator_for_async() { return strategy_->coordinator(); }

void Trainer::run_async_worker() {
  strategy_->run_worker([this](int64_t step) {
    global_step_ = step - 1;  // the step being computed, for messages
    const Batch inputs = next_train_inputs();
    const Logs logs = run_task_step(inputs);
    DistributionStrategy::WorkerStep done;
    for (const auto& [key, value] : logs)
      if (is_scalar(value)) done.scalars[key] = to_double(value);
    done.examples = task_->num_examples(inputs);
    global_step_ = step;
    return done;
  });
}

void Trainer::wait_for_async_steps(int64_t num_steps) {
  // The coordinator's loop: schedule the steps, join them, then hold the
  // weights and optimizer state they made (for checkpoints and evaluation).
  const int64_t target = global_step_ + num_steps;
  examples_seen_ += strategy_->coordinate_steps(target, *optimizer_, train_scalars_);
  global_step_ = target;
  if (step_observer_) step_observer_(global_step_);
}

void Trainer::initialize() { task_->initialize(*model_); }

Batch Trainer::to_device(const Batch& batch) const {
  if (device_.is_cpu()) return batch;
  Batch out;
  for (const auto& [key, tensor] : batch) {
    // From pageable memory a copy waits for the device's queue; from pinned
    // memory it is queued behind this step's work and the host goes on.
    const bool pin = device_.is_cuda() && tensor.device().is_cpu() && !tensor.is_pinned();
    out[key] = (pin ? tensor.pin_memory() : tensor).to(device_, /*non_blocking=*/true);
  }
  return out;
}

Batch Trainer::next_train_inputs() {
  if (!train_dataset_) throw Error("this Trainer has no training data");
  auto batch = train_dataset_->next();
  strategy_->agree_on_step(batch.has_value(), global_step_ + 1);
  if (!batch)
    throw Error("the training data ended; set task.train_data.is_training: true so it repeats");
  return to_device(*batch);
}

void Trainer::check_validation_data() {
  if (!validation_dataset_) return;
  validation_dataset_->reset();
  bool has_batch = validation_dataset_->next().has_value();
  validation_dataset_->reset();
  // Over several workers, a shard may be empty; the whole set may not.
  has_batch = strategy_->any_worker(has_batch, "the validation data check");
  if (!has_batch) {
    const std::string& path = config_->task->validation_data_config().input_path;
    throw Error("the validation data " +
                (path.empty() ? std::string("(none given)") : "'" + path + "'") +
                " gives no batch to evaluate: it is empty, or smaller than "
                "task.validation_data.global_batch_size with drop_remainder: true");
  }
}

std::optional<std::pair<Batch, Logs>> Trainer::next_eval_inputs() {
  if (!validation_dataset_) throw Error("this Trainer has no validation data");
  auto batch = validation_dataset_->next();
  if (!batch) return std::nullopt;
  return std::make_pair(to_device(*batch), Logs{});
}

Minimizer& Trainer::minimizer() {
  if (!minimizer_) throw Error("this Trainer has no optimizer");
  return *minimizer_;
}

// ---- steps ----------------------------------------------------------------------

Logs Trainer::run_task_step(const Batch& inputs) {
  const int64_t accumulation = config_->trainer.gradient_accumulation_steps;
  if (accumulation == 1) return task_->train_step(inputs, *model_, minimizer(), train_metrics_);
  std::vector<Logs> part_logs;
  for (const Batch& part : split_rows(inputs, accumulation))
    part_logs.push_back(task_->train_step(part, *model_, minimizer(), train_metrics_));
  return merge_part_logs(part_logs);
}

void Trainer::train_step(const Batch& inputs) {
  const Logs logs = graphs_ ? run_graphed_step(inputs) : run_task_step(inputs);
  if (logs.find(task_->loss()) == logs.end())
    throw Error("task train_step returned no '" + std::string(task_->loss()) + "'");
  pending_scalars_.keep(logs);
  strategy_->count_examples(task_->num_examples(inputs), examples_seen_);
  ++global_step_;
  share_cpus();  // fewer threads while other processes keep cores busy
  if (step_observer_) step_observer_(global_step_);
}

Logs Trainer::eval_step(const Batch& inputs, const Logs& passthrough) {
  Logs logs = task_->validation_step(inputs, *model_, validation_metrics_);
  for (const auto& [key, value] : logs)
    if (is_scalar(value)) eval_scalars_[key].add(value, /*weighted=*/true);
  ++eval_batches_;
  for (const auto& [key, value] : passthrough) logs.emplace(key, value);
  return logs;
}

namespace {
// The summary name of a step's scalar: Model Garden's training_loss /
// validation_loss for the loss itself, the scalar's own name otherwise.
std::string scalar_name(const std::string& key, const char* loss_key, const char* loss_name) {
  return key == loss_key ? loss_name : key;
}
}  // namespace

void Trainer::train_loop_begin() {
  // Metrics are reset at the end of each loop, so a loop's logs cover it alone.
}

Logs Trainer::train_loop_end() {
  Logs logs;
  examples_seen_ += strategy_->fold_loop(pending_scalars_.take(), global_step_, train_scalars_);
  strategy_->reduce_metrics(train_metrics_,
                            "the training metrics at step " + std::to_string(global_step_));
  strategy_->add_loop_logs(logs);
  // The parameter-server chief computes no metric: the workers' losses come
  // through ps 0.
  if (strategy_->computes_steps()) {
    for (auto& metric : train_metrics_) {
      logs[metric->name()] = metric->result();
      metric->reset();
    }
  }
  for (const auto& [key, mean] : train_scalars_)
    logs[scalar_name(key, task_->loss(), "training_loss")] = mean.result();
  train_scalars_.clear();
  logs["learning_rate"] = optimizer_->learning_rate();
  return logs;
}

void Trainer::eval_begin() {
  // Model Garden evaluates the averaged weights when there is an EMA.
  if (auto* ema = optimizer_ ? optimizer_->ema() : nullptr) {
    if (!ema_swapped_) ema->swap_weights();
    ema_swapped_ = true;
  }
  for (auto& metric : validation_metrics_) metric->reset();
  eval_scalars_.clear();
  eval_batches_ = 0;
  validation_dataset_->reset();
}

void Trainer::eval_reduce(Logs& state, const Logs& step_outputs) {
  task_->aggregate_logs(state, step_outputs);
}

void Trainer::swap_back_ema() {
  if (ema_swapped_) optimizer_->ema()->swap_weights();
  ema_swapped_ = false;
}

Logs Trainer::eval_end(const Logs& aggregated_logs) {
  swap_back_ema();
  // Over several workers, every worker's shard folded together.
  strategy_->reduce_evaluation(eval_scalars_, eval_batches_);
  strategy_->reduce_metrics(validation_metrics_, "the validation metrics");
  const Logs aggregated = strategy_->gather_aggregated_logs(aggregated_logs);
  if (eval_batches_ == 0) {
    const std::string& path = config_->task->validation_data_config().input_path;
    throw Error("the validation data " +
                (path.empty() ? std::string("(none given)") : "'" + path + "'") +
                " gave no batch to evaluate: it is empty, or smaller than "
                "task.validation_data.global_batch_size with drop_remainder: true");
  }
  Logs logs;
  for (auto& metric : validation_metrics_) logs[metric->name()] = metric->result();
  for (const auto& [key, mean] : eval_scalars_)
    logs[scalar_name(key, task_->loss(), "validation_loss")] = mean.result();
  for (auto& [key, value] : task_->reduce_aggregated_logs(aggregated, global_step_))
    logs[key] = value;
  return logs;
}

Trainer::LoopFn Trainer::create_train_loop_fn() {
  // The parameter-server chief computes no step: it coordinates the
  // workers'.
  if (!strategy_->computes_steps())
    return [this](int64_t num_steps) { wait_for_async_steps(num_steps); };
  return [this](int64_t num_steps) {
    for (int64_t i = 0; i < num_steps; ++i) train_step(next_train_inputs());
  };
}

Trainer::EvalLoopFn Trainer::create_eval_loop_fn() {
  return [this](int64_t num_steps) {
    Logs state;
    for (int64_t i = 0; num_steps < 0 || i < num_steps; ++i) {
      auto next = next_eval_inputs();
      if (!next) break;
      eval_reduce(state, eval_step(next->first, next->second));
      share_cpus();
      if (eval_batch_observer_) eval_batch_observer_();
    }
    return state;
  };
}

Logs Trainer::train(int64_t num_steps) {
  train_loop_begin();
  create_train_loop_fn()(num_steps);
  return train_loop_end();
}

namespace {

// Puts the random generators back as it found them: an evaluation draws
// from them (ELECTRA samples its replacements), and the training after it
// continues the stream where the last training step left it, so a run
// trains the same with evaluations between its steps or without.
class RandomStateGuard {
 public:
  explicit RandomStateGuard(const at::Device& device)
      : device_(device),
        cpu_(cpu_random_state()),
        device_state_(device.is_cuda() ? device_random_state(device) : at::Tensor()) {}
  ~RandomStateGuard() {
    set_cpu_random_state(cpu_);
    if (device_state_.defined()) set_device_random_state(device_, device_state_);
  }
  RandomStateGuard(const RandomStateGuard&) = delete;
  RandomStateGuard& operator=(const RandomStateGuard&) = delete;

 private:
  at::Device device_;
  at::Tensor cpu_, device_state_;
};

}  // namespace

Logs Trainer::evaluate(int64_t num_steps) {
  const RandomStateGuard random_state(device_);
  eval_begin();
  Logs state;
  try {
    state = create_eval_loop_fn()(num_steps);
  } catch (...) {
    swap_back_ema();  // never leave the averages in the live model
    throw;
  }
  return eval_end(state);
}

}  // namespace garden
