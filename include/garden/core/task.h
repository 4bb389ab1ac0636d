// Model Garden's base_task.Task, in C++: how to build the inputs, the model,
// the losses and the metrics, and what one training or validation step does.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include "garden/base/dataset.h"
#include "garden/base/types.h"
#include "garden/config/definitions.h"
#include "garden/core/losses.h"
#include "garden/core/metrics.h"
#include "garden/core/precision.h"
#include "garden/optim/named_parameter.h"

namespace garden {

class Minimizer;
namespace optim {
class Optimizer;
}

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
  // The losses to minimize for one batch (Model Garden's build_losses):
  // one part named "loss", or several named parts (masked_lm_loss,
  // discriminator_loss), each the mean of its own items with their count;
  // aux_losses (regularization), when defined, is added as a part. Every
  // part reaches the logs and the summaries, averaged over each loop and
  // evaluation (Model Garden's tasks update loss metrics with them).
  virtual Losses build_losses(const Batch& labels, const Batch& model_outputs,
                              const at::Tensor& aux_losses = {}) = 0;
  // The metrics, each reading its inputs from the labels and the model
  // outputs by name (MetricInputs).
  virtual MetricList build_metrics(bool training = true);
  // Updates `metrics` from one step's labels and outputs: each metric's
  // update(labels, outputs) by default.
  virtual void process_metrics(MetricList& metrics, const Batch& labels,
                               const Batch& model_outputs);
  // Keras's compiled metrics are those given to model.compile(); LibTorch has
  // no compile(), so here they are metrics attached to the whole model, fed
  // like the others.
  virtual void process_compiled_metrics(MetricList& compiled_metrics, const Batch& labels,
                                        const Batch& model_outputs);

  // One training step: forward pass and build_losses under autocast(), then
  // minimizer.minimize(losses), which does everything from backward to the
  // optimizer update (see Minimizer). Returns losses.logs(): "loss" and each
  // named part. A task overrides it only when its step really differs, and
  // still calls minimize().
  virtual Logs train_step(const Batch& inputs, Model& model, Minimizer& minimizer,
                          MetricList& metrics);
  // Forward pass, losses and metrics without gradients; returns
  // losses.logs() and what add_validation_outputs adds.
  virtual Logs validation_step(const Batch& inputs, Model& model, MetricList& metrics);
  // What an evaluation keeps of each step beyond its losses and metrics:
  // host-side lists (labels with predictions, logits, ids) added to `logs`,
  // which the default aggregate_logs collects for reduce_aggregated_logs.
  // Called by the default validation_step with the step's inputs and the
  // model's outputs; the default adds nothing.
  virtual void add_validation_outputs(const Batch& inputs, const Batch& outputs, Logs& logs);
  // The model's outputs for `inputs`, in inference mode.
  virtual Batch inference_step(const Batch& inputs, Model& model);

  // Folds one validation step's logs into `state` (Model Garden returns the
  // new state; here it is updated in place). The default appends the step's
  // host-side lists (decoded strings, id rows, value rows: a task's
  // validation outputs) to the lists of the same names, which
  // reduce_aggregated_logs then reads (over several workers, in rank
  // order); scalars are averaged by the Trainer, not kept here.
  virtual void aggregate_logs(Logs& state, const Logs& step_logs);
  // Turns the aggregated state into final metrics (e.g. BLEU).
  virtual Logs reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step);

  // The names of what an evaluation reports besides the metrics and
  // validation_loss, known before running one: the parts of the loss (other
  // than "loss") and the keys reduce_aggregated_logs returns. Checked against
  // trainer.best_checkpoint_eval_metric at start.
  virtual std::vector<std::string> loss_part_names() const { return {}; }
  virtual std::vector<std::string> aggregated_log_names() const { return {}; }

  // Config keys (dotted, from the root: "task.sentencepiece_vocab_size")
  // whose value the trained state depends on beyond the model's shapes: a
  // run resumed with another value is refused. The optimizer type always is.
  virtual std::vector<std::string> keys_fixed_by_training() const { return {}; }

  // Restores task_config().init_checkpoint into `model` by parameter name,
  // through task.init_checkpoint_rename (checkpoint prefix -> model prefix)
  // and limited to task.init_checkpoint_modules (empty or "all": the whole
  // model). A module the checkpoint lacks but lists among its
  // checkpoint_items is read from the item's module. Missing and unexpected
  // names are logged; a selected module that restores nothing is an error.
  virtual void initialize(Model& model);

  // Model Garden's Task.create_optimizer. Keras optimizers find their
  // variables on the first step; a LibTorch optimizer is given the model's
  // parameters when it is made, hence `model`.
  static std::unique_ptr<optim::Optimizer> create_optimizer(
      const config::OptimizationConfig& optimizer_config, const config::RuntimeConfig& runtime,
      const std::optional<config::DifferentialPrivacyConfig>& dp_config, Model& model);

  // A factor of the learning rate for each of `parameters` (the optimizer's,
  // in its order), or empty for 1 everywhere: the BERT fine-tuning tasks'
  // task.layerwise_lr_decay (nlp::layerwise_learning_rate_scales). The
  // trainer hands them to the optimizer.
  virtual std::vector<double> learning_rate_scales(
      const std::vector<optim::NamedParameter>& parameters) const {
    (void)parameters;
    return {};
  }

  // Model Garden's model.checkpoint_items: named parts of the model another
  // task may restore alone, item name -> module of this model (ELECTRA:
  // "encoder" -> "discriminator"). Saved in every checkpoint's metadata;
  // a task whose init_checkpoint_modules names an item restores it from that
  // module without an init_checkpoint_rename.
  virtual std::map<std::string, std::string> checkpoint_items() const { return {}; }

  // Task state that must travel with the model (vocabularies, class names,
  // statistics): saved in every checkpoint and given back on restore.
  virtual nlohmann::json checkpoint_metadata() const;
  virtual void restore_checkpoint_metadata(const nlohmann::json& metadata);

  // Examples in a batch, for examples/s: the first dimension of its first
  // tensor unless a task says otherwise.
  virtual int64_t num_examples(const Batch& batch) const;

  // runtime.mixed_precision_dtype and the device, set by the Trainer: the
  // default steps run the forward pass and loss under autocast() with them.
  void set_mixed_precision(std::optional<std::string> dtype, c10::Device device) {
    mixed_precision_dtype_ = std::move(dtype);
    device_ = device;
  }
  const std::optional<std::string>& mixed_precision_dtype() const { return mixed_precision_dtype_; }
  // Autocast for this task's dtype and device while the guard lives.
  AutocastGuard autocast() const { return AutocastGuard(mixed_precision_dtype_, device_); }

 protected:
  std::shared_ptr<const config::TaskConfig> params_;
  std::optional<std::string> mixed_precision_dtype_;
  c10::Device device_{c10::kCPU};

 private:
  std::string logging_dir_;
  std::string name_;
};

using TaskPtr = std::shared_ptr<Task>;

// The tensor `key` of a batch of inputs, labels or model outputs; a
// garden::Error "<task>: the batch has no '<key>'" when it is absent.
const at::Tensor& batch_tensor(const Batch& batch, const std::string& key, std::string_view task);

[[noreturn]] void throw_wrong_model(std::string_view task, std::string_view network);
// The model a task built, as its concrete network type; a garden::Error
// "the <task> task was given a model that is not <network>" otherwise.
template <class Network>
Network& model_as(Model& model, std::string_view task, std::string_view network) {
  if (auto* concrete = model.as<Network>()) return *concrete;
  throw_wrong_model(task, network);
}

// Model Garden's task_factory: the Task for a config type.
using TaskFactory =
    std::function<TaskPtr(std::shared_ptr<const config::TaskConfig>, const std::string&)>;

// Registers a task for its config type in the task registry (names are
// unique, and so are config types).
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

// Which checkpoint tensors initialize which model tensors
// (task.init_checkpoint_modules and task.init_checkpoint_rename).
struct InitCheckpointMapping {
  // Model sub-module paths ("encoder", "decoder.layer_0") to restore; empty
  // or {"all"}: the whole model.
  std::vector<std::string> modules;
  // Checkpoint-name prefix -> model-name prefix, tried longest first, e.g.
  // "discriminator.encoder." -> "encoder.".
  std::map<std::string, std::string> rename;
};
// The model tensors of `checkpoint` (names under "model/") renamed and
// filtered by `mapping`, keyed by model name.
std::map<std::string, at::Tensor> map_init_checkpoint(
    const std::map<std::string, at::Tensor>& checkpoint, const InitCheckpointMapping& mapping);
// Restores the Garden checkpoint at `path` (a run directory's latest, or a
// checkpoint file) into `model` through `mapping`, as Task::initialize does
// with task.init_checkpoint; a task that adds renames of its own (a head
// from a pretrainer's) calls it with them.
void initialize_from_checkpoint(Model& model, const std::string& path,
                                InitCheckpointMapping mapping);

}  // namespace garden
