// Model Garden's base_task.Task, in C++: how to build the inputs, the model,
// the losses and the metrics, and what one training or validation step does.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>

#include <torch/nn/module.h>

#include "garden/core/config/definitions.h"
#include "garden/base/dataset.h"
#include "garden/core/metrics.h"
#include "garden/base/types.h"
#include "garden/optim/optimizer.h"

namespace garden {

// A model is a torch::nn::Module; a Task knows its concrete type and reaches
// it with model.as<MyModel>().
using Model = torch::nn::Module;
using ModelPtr = std::shared_ptr<torch::nn::Module>;

class Task {
 public:
  // Model Garden's `loss` name: the key of the loss in the step logs.
  static constexpr const char* kLoss = "loss";

  explicit Task(std::shared_ptr<const config::TaskConfig> params, std::string logging_dir = "");
  virtual ~Task() = default;

  const config::TaskConfig& task_config() const { return *params_; }
  const std::string& logging_dir() const { return logging_dir_; }
  const std::string& name() const { return name_; }
  const char* loss() const { return kLoss; }

  // The dataset for `params`, sharded for `input_context`.
  virtual DatasetPtr build_inputs(const config::DataConfig& params,
                                  const InputContext& input_context) = 0;
  virtual ModelPtr build_model() = 0;
  // The nearest LibTorch meaning of Keras's `model(features, training)`:
  // runs the forward pass and returns the named outputs.
  virtual Batch call_model(Model& model, const Batch& features, bool training) = 0;
  // The scalar loss to minimize; aux_losses (e.g. regularization) is added
  // when defined.
  virtual at::Tensor build_losses(const Batch& labels, const Batch& model_outputs,
                                  const at::Tensor& aux_losses = {}) = 0;
  virtual MetricList build_metrics(bool training = true);
  // Updates `metrics` from one step's labels and outputs.
  virtual void process_metrics(MetricList& metrics, const Batch& labels,
                               const Batch& model_outputs);
  // Keras's compiled metrics are those given to model.compile(); LibTorch has
  // no compile(), so here they are the metrics the Trainer attaches to the
  // whole model (its MetricList), updated by each metric's own
  // update_state(labels["label"], outputs["logits"]) when both are present.
  virtual void process_compiled_metrics(MetricList& compiled_metrics, const Batch& labels,
                                        const Batch& model_outputs);

  // Forward, loss, backward, optimizer step; returns logs with "loss".
  virtual Logs train_step(const Batch& inputs, Model& model, optim::Optimizer& optimizer,
                          MetricList& metrics);
  // Forward and loss without gradients; returns logs with "loss".
  virtual Logs validation_step(const Batch& inputs, Model& model, MetricList& metrics);
  // The model's outputs for `inputs`, in inference mode.
  virtual Batch inference_step(const Batch& inputs, Model& model);

  // Folds one validation step's logs into `state` (Model Garden returns the
  // new state; here it is updated in place). The default keeps nothing.
  virtual void aggregate_logs(Logs& state, const Logs& step_logs);
  // Turns the aggregated state into final metrics (e.g. BLEU).
  virtual Logs reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step);

  // Restores task_config().init_checkpoint into `model` by parameter name. A
  // partial restore is allowed; missing and unexpected names are logged.
  virtual void initialize(Model& model);

  // Model Garden's Task.create_optimizer. Keras optimizers find their
  // variables on the first step; a LibTorch optimizer is given the model's
  // parameters when it is made, hence `model`.
  static std::unique_ptr<optim::Optimizer> create_optimizer(
      const config::OptimizationConfig& optimizer_config, const config::RuntimeConfig& runtime,
      const std::optional<config::DifferentialPrivacyConfig>& dp_config, Model& model);

  // Task state that must travel with the model (vocabularies, class names,
  // statistics): saved in every checkpoint and given back on restore.
  virtual nlohmann::json checkpoint_metadata() const;
  virtual void restore_checkpoint_metadata(const nlohmann::json& metadata);

  // Examples in a batch, for examples/s: the first dimension of its first
  // tensor unless a task says otherwise.
  virtual int64_t num_examples(const Batch& batch) const;

  // runtime.mixed_precision_dtype and the device, set by the Trainer: the
  // default steps run the forward pass and loss under autocast with them.
  void set_mixed_precision(std::optional<std::string> dtype, c10::Device device) {
    mixed_precision_dtype_ = std::move(dtype);
    device_ = device;
  }
  const std::optional<std::string>& mixed_precision_dtype() const { return mixed_precision_dtype_; }

 protected:
  std::shared_ptr<const config::TaskConfig> params_;
  std::optional<std::string> mixed_precision_dtype_;
  c10::Device device_{c10::kCPU};

 private:
  std::string logging_dir_;
  std::string name_;
};

using TaskPtr = std::shared_ptr<Task>;

// Model Garden's task_factory: the Task for a config type.
using TaskFactory =
    std::function<TaskPtr(std::shared_ptr<const config::TaskConfig>, const std::string&)>;

void register_task_factory(std::type_index config_type, const std::string& name,
                           TaskFactory factory);

template <class ConfigT, class TaskT>
void register_task(const std::string& name) {
  register_task_factory(typeid(ConfigT), name,
                        [](std::shared_ptr<const config::TaskConfig> params,
                           const std::string& logging_dir) -> TaskPtr {
                          return std::make_shared<TaskT>(
                              std::static_pointer_cast<const ConfigT>(params), logging_dir);
                        });
}

// The registered Task for `params`' concrete type; throws naming the type and
// the registered tasks.
TaskPtr get_task(std::shared_ptr<const config::TaskConfig> params,
                 const std::string& logging_dir = "");

std::vector<std::string> registered_tasks();

// Model parameters and buffers by name, for checkpoints.
std::map<std::string, at::Tensor> model_state(Model& model);
struct RestoreReport {
  std::vector<std::string> missing;     // in the model, not in the checkpoint
  std::vector<std::string> unexpected;  // in the checkpoint, not in the model
};
// Copies tensors named `prefix + name` into the model. With strict, anything
// missing, unexpected or of another shape is an error.
RestoreReport load_model_state(Model& model, const std::map<std::string, at::Tensor>& tensors,
                               const std::string& prefix, bool strict);

}  // namespace garden
