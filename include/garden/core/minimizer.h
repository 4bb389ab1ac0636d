// The part of a training step that belongs to the framework, not the task:
// from a task's Losses to updated weights.
//
//   minimize(losses):
//     1. the total: each part's mean times its share of the global count
//        (count_reducer sums the counts over workers; one process: the
//        plain total, bit for bit)
//     2. zero the gradients, backward() of the total, scaled by the loss
//        scaler when there is one (float16)
//     3. the gradient hooks, in order: a multi-worker all-reduce (a sum) goes
//        here, on the scaled gradients, before unscaling and clipping, so
//        every worker skips or clips alike
//     4. the optimizer's step: unscale (skip on overflow), clip, transform,
//        update, EMA
//
// A task's train_step computes its Losses (under Task::autocast) and calls
// minimize(); a task that needs a step of its own calls it too, and never
// repeats the sequence.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "garden/core/losses.h"
#include "garden/optim/optimizer.h"

namespace garden {

class Minimizer {
 public:
  // Runs on the parameters' gradients (undefined where a parameter has
  // none), in place, after backward and before the optimizer step.
  using GradientHook = std::function<void(std::vector<at::Tensor>& gradients)>;
  // Turns this process's counts (one scalar per loss part) into the global
  // ones, e.g. by an all-reduce sum.
  using CountReducer = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

  explicit Minimizer(optim::Optimizer& optimizer) : optimizer_(optimizer) {}

  void minimize(const Losses& losses);

  void add_gradient_hook(GradientHook hook) { hooks_.push_back(std::move(hook)); }
  void set_count_reducer(CountReducer reducer) { count_reducer_ = std::move(reducer); }

  optim::Optimizer& optimizer() { return optimizer_; }

 private:
  optim::Optimizer& optimizer_;
  std::vector<GradientHook> hooks_;
  CountReducer count_reducer_;
};

}  // namespace garden
