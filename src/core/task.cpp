#include "garden/core/task.h"

#include <torch/torch.h>

#include <map>
#include <mutex>

#include "garden/core/checkpoint.h"
#include "garden/core/config/registry.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/core/precision.h"

namespace garden {

Task::Task(std::shared_ptr<const config::TaskConfig> params, std::string logging_dir)
    : params_(std::move(params)), logging_dir_(std::move(logging_dir)) {
  if (!params_) throw Error("a Task needs a task config");
  name_ = params_->name;
}

MetricList Task::build_metrics(bool) { return {}; }

void Task::process_metrics(MetricList& metrics, const Batch& labels, const Batch& outputs) {
  process_compiled_metrics(metrics, labels, outputs);
}

void Task::process_compiled_metrics(MetricList& metrics, const Batch& labels,
                                    const Batch& outputs) {
  const auto label = labels.find("label");
  const auto logits = outputs.find("logits");
  if (label == labels.end() || logits == outputs.end()) return;
  for (auto& metric : metrics) metric->update_state(label->second, logits->second);
}

Logs Task::train_step(const Batch& inputs, Model& model, optim::Optimizer& optimizer,
                      MetricList& metrics) {
  model.train();
  optimizer.zero_grad();
  Batch outputs;
  at::Tensor loss;
  {
    // Autocast covers the forward pass and the loss; backward follows the
    // dtypes they recorded.
    AutocastGuard autocast(mixed_precision_dtype_, device_);
    outputs = call_model(model, inputs, /*training=*/true);
    loss = build_losses(inputs, outputs).to(at::kFloat);
  }
  optimizer.scale_loss(loss).backward();
  optimizer.step();
  {
    torch::NoGradGuard no_grad;
    process_metrics(metrics, inputs, outputs);
  }
  return {{kLoss, loss.detach()}};
}

Logs Task::validation_step(const Batch& inputs, Model& model, MetricList& metrics) {
  torch::NoGradGuard no_grad;
  model.eval();
  AutocastGuard autocast(mixed_precision_dtype_, device_);
  const Batch outputs = call_model(model, inputs, /*training=*/false);
  const at::Tensor loss = build_losses(inputs, outputs).to(at::kFloat);
  process_metrics(metrics, inputs, outputs);
  return {{kLoss, loss.detach()}};
}

Batch Task::inference_step(const Batch& inputs, Model& model) {
  torch::NoGradGuard no_grad;
  model.eval();
  return call_model(model, inputs, /*training=*/false);
}

void Task::aggregate_logs(Logs&, const Logs&) {}

Logs Task::reduce_aggregated_logs(const Logs&, int64_t) { return {}; }

void Task::initialize(Model& model) {
  const std::string& path = params_->init_checkpoint;
  if (path.empty()) return;
  const auto file = latest_checkpoint(path);
  if (!file) throw Error("init_checkpoint '" + path + "' holds no checkpoint");
  const CheckpointData data = read_checkpoint_file(*file);
  const RestoreReport report = load_model_state(model, data.tensors, "model/", /*strict=*/false);
  log_info() << "initialized the model from " << *file << " (" << report.missing.size()
             << " missing, " << report.unexpected.size() << " unexpected)";
  for (const auto& name : report.missing) log_warning() << "init_checkpoint lacks '" << name << "'";
  for (const auto& name : report.unexpected)
    log_warning() << "init_checkpoint has '" << name << "', which the model does not";
}

std::unique_ptr<optim::Optimizer> Task::create_optimizer(
    const config::OptimizationConfig& optimizer_config, const config::RuntimeConfig& runtime,
    const std::optional<config::DifferentialPrivacyConfig>& dp_config, Model& model) {
  std::vector<optim::NamedParameter> parameters;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    if (item.value().requires_grad()) parameters.push_back({item.key(), item.value()});
  auto optimizer = optim::make_optimizer(optimizer_config, parameters, dp_config);
  if (optimizer_config.ema) {
    std::vector<optim::NamedParameter> buffers;
    for (const auto& item : model.named_buffers(/*recurse=*/true))
      buffers.push_back({item.key(), item.value()});
    optimizer->set_ema(std::make_unique<optim::ExponentialMovingAverage>(
        *optimizer_config.ema, parameters, std::move(buffers)));
  }
  // Model Garden wraps the optimizer in a LossScaleOptimizer for float16.
  if (runtime.mixed_precision_dtype == "float16")
    optimizer->set_loss_scaler(
        std::make_unique<optim::LossScaler>(optim::LossScaler::from_config(runtime.loss_scale)));
  return optimizer;
}

nlohmann::json Task::checkpoint_metadata() const { return nlohmann::json::object(); }

void Task::restore_checkpoint_metadata(const nlohmann::json&) {}

int64_t Task::num_examples(const Batch& batch) const {
  if (batch.empty() || !batch.begin()->second.defined() || batch.begin()->second.dim() == 0)
    return 0;
  return batch.begin()->second.size(0);
}

// ---- registry ----------------------------------------------------------------

namespace {
struct TaskEntry {
  std::string name;
  TaskFactory factory;
};
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::type_index, TaskEntry>& task_entries() {
  static std::map<std::type_index, TaskEntry> entries;
  return entries;
}
}  // namespace

void register_task_factory(std::type_index config_type, const std::string& name,
                           TaskFactory factory) {
  config::check_registry_name(name, "task");
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& [type, entry] : task_entries())
    if (entry.name == name || type == config_type)
      throw Error("task '" + name + "' (or its config type) is already registered");
  task_entries().emplace(config_type, TaskEntry{name, std::move(factory)});
}

std::vector<std::string> registered_tasks() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [type, entry] : task_entries()) names.push_back(entry.name);
  std::sort(names.begin(), names.end());
  return names;
}

TaskPtr get_task(std::shared_ptr<const config::TaskConfig> params,
                 const std::string& logging_dir) {
  if (!params) throw Error("no task config");
  TaskFactory factory;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    const auto it = task_entries().find(typeid(*params));
    if (it != task_entries().end()) factory = it->second.factory;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : registered_tasks()) known += (known.empty() ? "" : ", ") + n;
    throw Error(std::string("no task is registered for config type ") + typeid(*params).name() +
                "; registered tasks: " + (known.empty() ? "(none)" : known) +
                ". Register it with garden::register_task<Config, Task>(name).");
  }
  return factory(std::move(params), logging_dir);
}

// ---- model state -------------------------------------------------------------

std::map<std::string, at::Tensor> model_state(Model& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters(true)) out[item.key()] = item.value();
  for (const auto& item : model.named_buffers(true)) out[item.key()] = item.value();
  return out;
}

RestoreReport load_model_state(Model& model, const std::map<std::string, at::Tensor>& tensors,
                               const std::string& prefix, bool strict) {
  torch::NoGradGuard no_grad;
  RestoreReport report;
  auto targets = model_state(model);
  for (auto& [name, target] : targets) {
    const auto it = tensors.find(prefix + name);
    if (it == tensors.end()) {
      report.missing.push_back(name);
      continue;
    }
    if (it->second.sizes() != target.sizes())
      throw Error("checkpoint tensor '" + name + "' has shape " + c10::str(it->second.sizes()) +
                  ", the model's has " + c10::str(target.sizes()));
    target.copy_(it->second);
  }
  for (const auto& [name, tensor] : tensors)
    if (name.rfind(prefix, 0) == 0 && !targets.count(name.substr(prefix.size())))
      report.unexpected.push_back(name.substr(prefix.size()));
  if (strict && (!report.missing.empty() || !report.unexpected.empty()))
    throw Error("checkpoint does not match the model: " + std::to_string(report.missing.size()) +
                " missing (first: '" + (report.missing.empty() ? "" : report.missing[0]) + "'), " +
                std::to_string(report.unexpected.size()) + " unexpected (first: '" +
                (report.unexpected.empty() ? "" : report.unexpected[0]) + "')");
  return report;
}

}  // namespace garden
