// What a Trainer's checkpoint holds and how it comes back: the model, the
// optimizer, the step, the random state and the input position (each
// worker's, over several), the task's metadata and the resolved config.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/core/strategy.h"
#include "garden/core/trainer.h"
#include "garden/optim/optimizer.h"

namespace garden {

at::Tensor cpu_random_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

at::Tensor device_random_state(const at::Device& device) {
  auto generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_random_state(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

void set_device_random_state(const at::Device& device, const at::Tensor& state) {
  auto generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
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
  data.tensors["rng/cpu"] = cpu_random_state();
  // On a GPU, dropout draws from the device's generator: it is saved too, so
  // a resumed GPU run continues as the CPU one does.
  if (device_.is_cuda()) data.tensors["rng/cuda"] = device_random_state(device_);
  if (train_dataset_ && strategy_->checkpoint_holds_input_position())
    meta["train_data"] = train_dataset_->state();
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
  random_state_restored_ = false;
  global_step_ = data.meta.value("global_step", int64_t{0});
  examples_seen_ = data.meta.value("examples_seen", int64_t{0});
  if (optimizer_) {
    std::map<std::string, at::Tensor> slots;
    for (const auto& [name, tensor] : data.tensors)
      if (name.rfind("optimizer/", 0) == 0) slots[name.substr(10)] = tensor;
    optimizer_->load_state(slots, data.meta.value("optimizer", nlohmann::json::object()));
  }
  if (!restore_input) return;
  // Each worker's own position and random state (a checkpoint of as many
  // workers as this run), or the one process's.
  const int64_t workers = strategy_->num_workers();
  const int64_t written_by =
      data.meta.contains("workers") ? static_cast<int64_t>(data.meta.at("workers").size()) : 1;
  if (written_by != workers) {
    log_warning() << "the checkpoint was written by " << written_by << " worker(s), this run has "
                  << workers << ": the model and optimizer continue, the input starts over "
                  << "and the random state comes from the seed";
    return;
  }
  const std::string rng_key = "rng/cpu" + strategy_->random_state_suffix();
  const std::string cuda_rng_key = "rng/cuda" + strategy_->random_state_suffix();
  const nlohmann::json input_state = strategy_->input_position(data.meta);
  if (const auto it = data.tensors.find(rng_key); it != data.tensors.end()) {
    set_cpu_random_state(it->second);
    random_state_restored_ = true;
  }
  // A GPU's state continues on a GPU; a CPU run, or a checkpoint written on a
  // CPU, leaves the device's generator as the seed set it.
  if (const auto it = data.tensors.find(cuda_rng_key);
      it != data.tensors.end() && device_.is_cuda())
    set_device_random_state(device_, it->second);
  if (train_dataset_ && !input_state.is_null()) train_dataset_->restore(input_state);
}

CheckpointData Trainer::checkpoint_state_of_all_workers() {
  CheckpointData data = checkpoint_state();
  strategy_->add_worker_states(data, train_dataset_, device_);
  return data;
}

}  // namespace garden
