#include "garden/core/task.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/registry.h"
#include "garden/core/checkpoint.h"
#include "garden/core/minimizer.h"
#include "garden/optim/optimizer.h"

namespace garden {

Task::Task(std::shared_ptr<const config::TaskConfig> params, std::string logging_dir)
    : params_(std::move(params)), logging_dir_(std::move(logging_dir)) {
  if (!params_) throw Error("a Task needs a task config");
  name_ = params_->name;
}

MetricList Task::build_metrics(bool) { return {}; }

void Task::process_metrics(MetricList& metrics, const Batch& labels, const Batch& outputs) {
  for (auto& metric : metrics) metric->update(labels, outputs);
}

void Task::process_compiled_metrics(MetricList& metrics, const Batch& labels,
                                    const Batch& outputs) {
  for (auto& metric : metrics) metric->update(labels, outputs);
}

Logs Task::train_step(const Batch& inputs, Model& model, Minimizer& minimizer,
                      MetricList& metrics) {
  model.train();
  Batch outputs;
  Losses losses;
  {
    // Autocast covers the forward pass and the loss; backward follows the
    // dtypes they recorded.
    const AutocastGuard guard = autocast();
    outputs = call_model(model, inputs, /*training=*/true);
    losses = build_losses(inputs, outputs);
  }
  minimizer.minimize(losses);
  {
    torch::NoGradGuard no_grad;
    process_metrics(metrics, inputs, outputs);
  }
  return losses.logs();
}

Logs Task::validation_step(const Batch& inputs, Model& model, MetricList& metrics) {
  torch::NoGradGuard no_grad;
  model.eval();
  const AutocastGuard guard = autocast();
  const Batch outputs = call_model(model, inputs, /*training=*/false);
  Logs logs = build_losses(inputs, outputs).logs();
  process_metrics(metrics, inputs, outputs);
  add_validation_outputs(inputs, outputs, logs);
  return logs;
}

void Task::add_validation_outputs(const Batch&, const Batch&, Logs&) {}

const at::Tensor& batch_tensor(const Batch& batch, const std::string& key, std::string_view task) {
  const auto it = batch.find(key);
  if (it == batch.end()) throw Error(std::string(task) + ": the batch has no '" + key + "'");
  return it->second;
}

void throw_wrong_model(std::string_view task, std::string_view network) {
  throw Error("the " + std::string(task) + " task was given a model that is not " +
              std::string(network));
}

Batch Task::inference_step(const Batch& inputs, Model& model) {
  torch::NoGradGuard no_grad;
  // Already so when served: no write to the shared model (predict_batches
  // runs this on several threads at once).
  if (model.is_training()) model.eval();
  return call_model(model, inputs, /*training=*/false);
}

void Task::aggregate_logs(Logs& state, const Logs& step_logs) {
  append_host_lists(state, step_logs);
}

Logs Task::reduce_aggregated_logs(const Logs&, int64_t) { return {}; }

void Task::initialize(Model& model) {
  if (params_->init_checkpoint.empty()) return;
  initialize_from_checkpoint(model, params_->init_checkpoint,
                             {params_->init_checkpoint_modules, params_->init_checkpoint_rename});
}

void initialize_from_checkpoint(Model& model, const std::string& path,
                                InitCheckpointMapping mapping) {
  const auto file = latest_checkpoint(path);
  if (!file) {
    // Weights of a Hugging Face model without the config.json that says
    // what they are.
    std::error_code ec;
    for (const char* weights : {"model.safetensors", "pytorch_model.bin"})
      if (std::filesystem::is_regular_file(std::filesystem::path(path) / weights, ec))
        throw Error("task.init_checkpoint '" + path + "' holds " + weights +
                    " but no config.json: a Hugging Face model directory needs the config.json "
                    "saved with it");
    throw Error("task.init_checkpoint '" + path + "' holds no checkpoint");
  }
  const CheckpointData data = read_checkpoint_file(*file);
  // Model Garden's checkpoint_items: a selected module the checkpoint does
  // not hold under its own name, but names as an item of its model, is read
  // from the item's module (an ELECTRA run's "encoder" is its discriminator).
  // The user's renames come first.
  const nlohmann::json items = data.meta.value("checkpoint_items", nlohmann::json::object());
  for (const auto& module : mapping.modules) {
    if (!items.is_object() || !items.contains(module) || !items.at(module).is_string()) continue;
    const std::string source = items.at(module).get<std::string>();
    const bool held = std::any_of(data.tensors.begin(), data.tensors.end(), [&](const auto& item) {
      return item.first.rfind("model/" + module + ".", 0) == 0;
    });
    if (!held && source != module) mapping.rename.emplace(source + ".", module + ".");
  }
  const auto tensors = map_init_checkpoint(data.tensors, mapping);
  const auto in_modules = [&](const std::string& name) {
    if (mapping.modules.empty() || mapping.modules == std::vector<std::string>{"all"}) return true;
    for (const auto& module : mapping.modules)
      if (name == module || name.rfind(module + ".", 0) == 0) return true;
    return false;
  };
  // Only the selected modules' tensors are expected.
  std::map<std::string, at::Tensor> selected;
  for (const auto& [name, tensor] : tensors)
    if (in_modules(name)) selected.emplace("model/" + name, tensor);
  const RestoreReport report = load_model_state(model, selected, "model/", /*strict=*/false);
  std::vector<std::string> missing;
  for (const auto& name : report.missing)
    if (in_modules(name)) missing.push_back(name);
  for (const auto& module : mapping.modules) {
    if (module == "all") continue;
    const bool restored = std::any_of(selected.begin(), selected.end(), [&](const auto& item) {
      const std::string name = item.first.substr(6);  // after "model/"
      return name == module || name.rfind(module + ".", 0) == 0;
    });
    if (!restored)
      throw Error("task.init_checkpoint_modules names '" + module + "', but init_checkpoint '" +
                  *file + "' has no tensor for it (after task.init_checkpoint_rename)");
  }
  log_info() << "initialized the model from " << *file << ": " << selected.size()
             << " tensors restored, " << missing.size() << " missing, " << report.unexpected.size()
             << " unexpected";
  for (const auto& name : missing) log_warning() << "init_checkpoint lacks '" << name << "'";
  for (const auto& name : report.unexpected)
    log_warning() << "init_checkpoint has '" << name << "', which the model does not";
}

std::map<std::string, at::Tensor> map_init_checkpoint(
    const std::map<std::string, at::Tensor>& checkpoint, const InitCheckpointMapping& mapping) {
  // Longest prefix first, so a specific rule beats a general one.
  std::vector<std::pair<std::string, std::string>> rules(mapping.rename.begin(),
                                                         mapping.rename.end());
  std::sort(rules.begin(), rules.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::map<std::string, at::Tensor> out;
  for (const auto& [key, tensor] : checkpoint) {
    if (key.rfind("model/", 0) != 0) continue;
    std::string name = key.substr(6);
    for (const auto& [from, to] : rules) {
      if (name.rfind(from, 0) == 0) {
        name = to + name.substr(from.size());
        break;
      }
    }
    if (!out.emplace(name, tensor).second)
      throw Error("task.init_checkpoint_rename maps two checkpoint tensors to '" + name + "'");
  }
  return out;
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
  std::type_index config_type;
  TaskFactory factory;
};
config::Registry<TaskEntry>& task_registry() {
  static config::Registry<TaskEntry> registry("task");
  return registry;
}
}  // namespace

void register_task_factory(std::type_index config_type, const std::string& name,
                           TaskFactory factory) {
  for (const auto& other : task_registry().names())
    if (task_registry().get(other).config_type == config_type)
      throw Error("task '" + name + "': its config type is already registered, by task '" + other +
                  "'");
  task_registry().add(name, TaskEntry{config_type, std::move(factory)});
}

std::vector<std::string> registered_tasks() { return task_registry().names(); }

TaskPtr get_task(std::shared_ptr<const config::TaskConfig> params, const std::string& logging_dir) {
  if (!params) throw Error("no task config");
  const config::TaskConfig& config = *params;
  for (const auto& name : task_registry().names()) {
    const TaskEntry& entry = task_registry().get(name);
    if (entry.config_type == std::type_index(typeid(config)))
      return entry.factory(std::move(params), logging_dir);
  }
  std::string known;
  for (const auto& n : registered_tasks()) known += (known.empty() ? "" : ", ") + n;
  throw Error(std::string("no task is registered for config type ") + typeid(config).name() +
              "; registered tasks: " + (known.empty() ? "(none)" : known) +
              ". Register it with garden::register_task<Config, Task>(name).");
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
