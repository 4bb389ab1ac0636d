// A training step captured as a CUDA graph, one graph per input shape.
//
// A small step on a GPU is bound by launching its kernels (the tiny
// Transformer's step launches a few thousand): captured once, it replays
// with one launch. StepGraphs::run(inputs, step):
//   - the first `warmup` times a shape is seen (the inputs' sizes and
//     dtypes): runs `step` eagerly, on a side stream (cuBLAS, autograd and
//     the caching allocator set themselves up);
//   - the next time: copies the inputs into static ones, captures `step`
//     on them into a graph of its own (with its own memory pool), and
//     replays it once;
//   - after that: copies the inputs into the static ones and replays.
// Each call runs the step exactly once.
//
// The step must be capturable: it reads nothing back to the host, creates
// no tensor whose shape depends on data, and changes what outlives it (the
// weights, the optimizer's state, metric state) in place. Its host code runs
// only when it is run eagerly or captured (run() says which): what changes
// from step to step must come from device tensors written before run()
// (the optimizer's learning rate: Optimizer::set_capturable). Dropout draws
// from the device's default generator, which the graph advances at each
// replay. Autocast's cast cache is off while capturing.
//
// The outputs are the graph's static outputs: valid until the next run of
// the same shape. Needs a CUDA LibTorch 2.1 or later; elsewhere the
// constructor throws garden::Error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace garden {

class StepGraphs {
 public:
  using Step = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;
  struct Result {
    std::vector<at::Tensor> outputs;
    bool replayed = false;  // true: only the graph ran (the step's host code did not)
  };

  // Whether this build can capture CUDA graphs (a CUDA LibTorch 2.1+).
  static bool available();

  StepGraphs(const c10::Device& device, int64_t warmup = 2);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  Result run(const std::vector<at::Tensor>& inputs, const Step& step);

  int64_t graphs() const;   // captured so far (one per shape)
  int64_t replays() const;  // runs that replayed a graph, the capturing run included

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace garden
