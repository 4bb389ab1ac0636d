// What device-parameterized tests share. As CTranslate2's tests do, a case
// runs on the CPU always and on CUDA when a GPU is present; without one, its
// cuda instance is skipped with a message, so CI stays CPU-only and green.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "garden/core/task.h"
#include "garden/core/trainer.h"

// With CUDA's headers (a CUDA LibTorch), a test can make every CUDA call
// that waits for the device an error (torch.cuda.set_sync_debug_mode).
#if __has_include(<c10/cuda/CUDAFunctions.h>) && __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDAFunctions.h>
#define GARDEN_TEST_CUDA_SYNC_CHECK 1
#endif

namespace garden_test {

// Why a case on `device` cannot run here ("" when it can): use as
//   if (const auto why = unavailable(device); !why.empty()) GTEST_SKIP() << why;
inline std::string unavailable(const c10::Device& device) {
  if (device.is_cuda() && !torch::cuda::is_available())
    return "no CUDA device (LibTorch built without CUDA, or no GPU)";
  return "";
}

// While one lives on a CUDA device, a CUDA call that makes the host wait
// for the device throws ("called a synchronizing CUDA operation"). Built
// without CUDA's headers, it checks nothing and says so once.
class NoHostWait {
 public:
  explicit NoHostWait(const c10::Device& device) {
#ifdef GARDEN_TEST_CUDA_SYNC_CHECK
    on_ = device.is_cuda();
    if (on_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
#else
    static bool said = false;
    if (device.is_cuda() && !said)
      std::cerr << "note: built without CUDA's headers: host waits are not checked\n";
    said = said || device.is_cuda();
#endif
  }
  ~NoHostWait() {
#ifdef GARDEN_TEST_CUDA_SYNC_CHECK
    if (on_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
#endif
  }
  NoHostWait(const NoHostWait&) = delete;
  NoHostWait& operator=(const NoHostWait&) = delete;

 private:
  bool on_ = false;
};

// One training loop on `device`: the model of `task` built after
// torch::manual_seed(seed), the optimizer of `params`, `steps` steps, from
// the second on under NoHostWait. The loop's logs, and the weights after it
// on the CPU.
struct DeviceRun {
  garden::Logs logs;
  std::map<std::string, at::Tensor> weights;
};
inline DeviceRun train_loop_on(const c10::Device& device,
                               std::shared_ptr<const garden::config::ExperimentConfig> params,
                               const garden::TaskPtr& task, int steps, uint64_t seed) {
  torch::manual_seed(seed);
  auto model = task->build_model();
  model->to(device);
  std::shared_ptr<garden::optim::Optimizer> optimizer =
      garden::Task::create_optimizer(params->trainer.optimizer_config, params->runtime,
                                     params->task->differential_privacy_config, *model);
  garden::Trainer trainer(params, task, model, optimizer, garden::TrainerMode::kTrain);
  trainer.train_loop_begin();
  for (int i = 0; i < steps; ++i) {
    std::optional<NoHostWait> guard;
    if (i > 0) guard.emplace(device);
    trainer.train_step(trainer.next_train_inputs());
  }
  DeviceRun run;
  run.logs = trainer.train_loop_end();
  for (const auto& [name, tensor] : garden::model_state(*model))
    run.weights[name] = tensor.detach().cpu();
  return run;
}

}  // namespace garden_test
