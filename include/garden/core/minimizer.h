// The part of a training step that belongs to the framework, not the task:
// from a task's Losses to updated weights.
//
//   minimize(losses):
//     1. the total: each part's mean times its share of the global count
//        (count_reducer sums the counts over workers; one process: the
//        plain total, bit for bit)
//     2. zero the gradients, backward() of the total, scaled by the loss
//        scaler when there is one (float16); a sparse gradient made dense
//     3. the gradient hooks, in order: a multi-worker all-reduce (a sum) goes
//        here, on the scaled gradients, before unscaling and clipping, so
//        every worker skips or clips alike
//     4. the optimizer's step: unscale (skip on overflow), clip, transform,
//        update, EMA
//
// Gradient accumulation (set_accumulation_steps(k)): minimize() is called
// once per part of the step's batch; the gradients add up, and the hooks
// and the optimizer run after the k-th call. Each part's loss is divided by
// k times the first part's (global) count; after the k-th backward the
// gradients are rescaled by that estimate over the step's true count, so a
// loss of one part (or of parts whose counts keep one ratio) gets the update
// of the whole batch. Parts whose counts change in different ratios keep the
// estimate (the rescale would need one backward per part).
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
  // Called before each backward with whether the optimizer steps after it
  // (with accumulation, only the last part's backward): a gradient
  // all-reduce runs in that backward only.
  using BackwardObserver = std::function<void(bool last)>;

  explicit Minimizer(optim::Optimizer& optimizer) : optimizer_(optimizer) {}

  void minimize(const Losses& losses);

  void add_gradient_hook(GradientHook hook) { hooks_.push_back(std::move(hook)); }
  void set_count_reducer(CountReducer reducer) { count_reducer_ = std::move(reducer); }
  void set_backward_observer(BackwardObserver observer) { observer_ = std::move(observer); }
  // Runs instead of the optimizer's step (a parameter-server worker sends
  // its gradients to the servers, which update the weights).
  void set_apply(std::function<void()> apply) { apply_ = std::move(apply); }
  // Parts per step (>= 1); changed only between steps.
  void set_accumulation_steps(int64_t steps);
  int64_t accumulation_steps() const { return steps_; }

  optim::Optimizer& optimizer() { return optimizer_; }

 private:
  optim::Optimizer& optimizer_;
  std::vector<GradientHook> hooks_;
  CountReducer count_reducer_;
  BackwardObserver observer_;
  std::function<void()> apply_;
  int64_t steps_ = 1;
  // After the k-th backward: the gradients times estimate / true count.
  void rescale_to_true_counts();
  int64_t done_ = 0;              // parts of this step already backward
  // Per loss part, double scalars where the counts are (no host read):
  std::vector<at::Tensor> estimate_;  // k * the first part's count
  std::vector<at::Tensor> total_;     // the step's count so far
};

}  // namespace garden
