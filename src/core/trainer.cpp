#include "garden/core/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/yaml_io.h"

namespace garden {

Trainer::Trainer(std::shared_ptr<const config::ExperimentConfig> config, TaskPtr task,
                 ModelPtr model, std::shared_ptr<optim::Optimizer> optimizer, bool train,
                 bool evaluate, DatasetPtr train_dataset, DatasetPtr validation_dataset,
                 std::shared_ptr<CheckpointExporter> checkpoint_exporter)
    : config_(std::move(config)),
      task_(std::move(task)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      train_dataset_(std::move(train_dataset)),
      validation_dataset_(std::move(validation_dataset)),
      checkpoint_exporter_(std::move(checkpoint_exporter)) {
  if (!config_ || !task_ || !model_) throw Error("Trainer needs a config, a task and a model");
  device_ = at::Device(config_->runtime.device);
  task_->set_mixed_precision(config_->runtime.mixed_precision_dtype, device_);
  const auto build = [this](const config::DataConfig& params, const InputContext& context) {
    return task_->build_inputs(params, context);
  };
  if (optimizer_) minimizer_ = std::make_unique<Minimizer>(*optimizer_);
  // The config the run resolved travels in every checkpoint (the config
  // itself does not change after it is locked).
  params_yaml_ = config::to_yaml_string(const_cast<config::ExperimentConfig&>(*config_));
  if (train) {
    if (!optimizer_) throw Error("a training Trainer needs an optimizer");
    if (!train_dataset_)
      train_dataset_ = distribute_dataset(build, config_->task->train_data_config());
    train_metrics_ = task_->build_metrics(/*training=*/true);
  }
  if (evaluate) {
    if (!validation_dataset_)
      validation_dataset_ = distribute_dataset(build, config_->task->validation_data_config());
    validation_metrics_ = task_->build_metrics(/*training=*/false);
  }
}

DatasetPtr Trainer::distribute_dataset(const DatasetFn& dataset_fn,
                                       const config::DataConfig& params) {
  // One process is one input pipeline and one replica.
  return dataset_fn(params, InputContext{});
}

void Trainer::init_async() {}
void Trainer::join() {}

void Trainer::initialize() { task_->initialize(*model_); }

Batch Trainer::to_device(const Batch& batch) const {
  if (device_.is_cpu()) return batch;
  Batch out;
  for (const auto& [key, tensor] : batch) out[key] = tensor.to(device_, /*non_blocking=*/true);
  return out;
}

Batch Trainer::next_train_inputs() {
  if (!train_dataset_) throw Error("this Trainer has no training data");
  auto batch = train_dataset_->next();
  if (!batch) throw Error("the training data ended; set task.train_data.is_training: true so it repeats");
  return to_device(*batch);
}

void Trainer::check_validation_data() {
  if (!validation_dataset_) return;
  validation_dataset_->reset();
  const bool has_batch = validation_dataset_->next().has_value();
  validation_dataset_->reset();
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

// ---- folding scalars -----------------------------------------------------------

void Trainer::ScalarFolder::add(const LogValue& value, bool weighted) {
  const auto* average = std::get_if<Average>(&value);
  if (!weighted || !average) {
    plain_total_ += to_double(value);
    ++plain_count_;
    return;
  }
  weighted_ = true;
  if (terms_.empty()) terms_.resize(average->terms.size(), {0.0, 0.0, 0.0});
  if (terms_.size() != average->terms.size())
    throw Error("a loss changed its number of parts between steps");
  for (std::size_t i = 0; i < terms_.size(); ++i) {
    const AverageTerm& term = average->terms[i];
    const double count = to_double(term.count);
    terms_[i][0] += to_double(term.value) * count;
    terms_[i][1] += count;
    terms_[i][2] = term.weight;
  }
}

double Trainer::ScalarFolder::result() const {
  if (!weighted_) return plain_count_ > 0 ? plain_total_ / static_cast<double>(plain_count_) : 0.0;
  double total = 0.0;
  for (const auto& [sum, count, weight] : terms_) total += weight * (count > 0 ? sum / count : 0.0);
  return total;
}

// ---- steps ----------------------------------------------------------------------

void Trainer::train_step(const Batch& inputs) {
  const Logs logs = task_->train_step(inputs, *model_, minimizer(), train_metrics_);
  const auto it = logs.find(task_->loss());
  if (it == logs.end()) throw Error("task train_step returned no '" + std::string(task_->loss()) + "'");
  for (const auto& [key, value] : logs) {
    if (!is_scalar(value)) continue;
    const double number = to_double(value);
    if (key == task_->loss()) last_train_loss_ = number;
    train_scalars_[key].add(number, /*weighted=*/false);
  }
  examples_seen_ += task_->num_examples(inputs);
  ++global_step_;
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
  for (auto& metric : train_metrics_) {
    logs[metric->name()] = metric->result();
    metric->reset();
  }
  for (const auto& [key, folder] : train_scalars_)
    logs[scalar_name(key, task_->loss(), "training_loss")] = folder.result();
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
  if (eval_batches_ == 0) {
    const std::string& path = config_->task->validation_data_config().input_path;
    throw Error("the validation data " +
                (path.empty() ? std::string("(none given)") : "'" + path + "'") +
                " gave no batch to evaluate: it is empty, or smaller than "
                "task.validation_data.global_batch_size with drop_remainder: true");
  }
  Logs logs;
  for (auto& metric : validation_metrics_) logs[metric->name()] = metric->result();
  for (const auto& [key, folder] : eval_scalars_)
    logs[scalar_name(key, task_->loss(), "validation_loss")] = folder.result();
  for (auto& [key, value] : task_->reduce_aggregated_logs(aggregated_logs, global_step_))
    logs[key] = value;
  return logs;
}

Trainer::LoopFn Trainer::create_train_loop_fn() {
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
    }
    return state;
  };
}

Logs Trainer::train(int64_t num_steps) {
  train_loop_begin();
  create_train_loop_fn()(num_steps);
  return train_loop_end();
}

Logs Trainer::evaluate(int64_t num_steps) {
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

CheckpointData Trainer::checkpoint_state() const {
  CheckpointData data;
  for (const auto& [name, tensor] : model_state(*model_)) data.tensors["model/" + name] = tensor;
  nlohmann::json meta;
  meta["global_step"] = global_step_;
  meta["examples_seen"] = examples_seen_;
  if (optimizer_) {
    for (const auto& [name, tensor] : optimizer_->state_tensors())
      data.tensors["optimizer/" + name] = tensor;
    meta["optimizer"] = optimizer_->state_meta();
  }
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    data.tensors["rng/cpu"] = generator.get_state();
  }
  if (train_dataset_) meta["train_data"] = train_dataset_->state();
  meta["task"] = task_->checkpoint_metadata();
  meta["checkpoint_items"] = task_->checkpoint_items();
  meta["params"] = params_yaml_;
  data.meta = std::move(meta);
  return data;
}

void Trainer::restore_checkpoint_state(const CheckpointData& data, bool restore_input) {
  // The task checks its own metadata first: its message (e.g. "trained with
  // other classes") says more than a tensor shape mismatch.
  if (data.meta.contains("task")) task_->restore_checkpoint_metadata(data.meta.at("task"));
  load_model_state(*model_, data.tensors, "model/", /*strict=*/true);
  global_step_ = data.meta.value("global_step", int64_t{0});
  examples_seen_ = data.meta.value("examples_seen", int64_t{0});
  if (optimizer_) {
    std::map<std::string, at::Tensor> slots;
    for (const auto& [name, tensor] : data.tensors)
      if (name.rfind("optimizer/", 0) == 0) slots[name.substr(10)] = tensor;
    optimizer_->load_state(slots, data.meta.value("optimizer", nlohmann::json::object()));
  }
  if (!restore_input) return;
  if (const auto it = data.tensors.find("rng/cpu"); it != data.tensors.end()) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(it->second);
  }
  if (train_dataset_ && data.meta.contains("train_data"))
    train_dataset_->restore(data.meta.at("train_data"));
}

}  // namespace garden
