#include "garden/core/minimizer.h"

#include <cmath>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "garden/base/error.h"

namespace garden {

void Minimizer::set_accumulation_steps(int64_t steps) {
  if (steps < 1) throw Error("gradient accumulation steps must be >= 1, not " + std::to_string(steps));
  if (done_ != 0) throw Error("gradient accumulation steps changed in the middle of a step");
  steps_ = steps;
}

void Minimizer::minimize(const Losses& losses) {
  std::vector<at::Tensor> counts;
  for (const auto& part : losses.parts()) counts.push_back(part.count);
  const bool last = done_ + 1 >= steps_;
  at::Tensor total;
  if (steps_ == 1) {
    total = count_reducer_ ? losses.total_for(count_reducer_(counts)) : losses.total();
  } else {
    const std::vector<at::Tensor> global = count_reducer_ ? count_reducer_(counts) : counts;
    if (done_ == 0) {
      estimate_.clear();
      total_.assign(global.size(), 0.0);
      for (const auto& count : global) {
        // A part with no items in the first part of the batch (no masked
        // token) still needs a finite divisor.
        const double c = count.defined() ? count.item<double>() : 1.0;
        estimate_.push_back(static_cast<double>(steps_) * (c > 0 ? c : 1.0));
      }
    } else if (global.size() != estimate_.size()) {
      throw Error("the loss has " + std::to_string(global.size()) + " parts in part " +
                  std::to_string(done_ + 1) + " of the step's batch but " +
                  std::to_string(estimate_.size()) + " in the first");
    }
    std::vector<at::Tensor> divisors;
    for (std::size_t i = 0; i < global.size(); ++i) {
      total_[i] += global[i].defined() ? global[i].item<double>() : 1.0;
      divisors.push_back(at::scalar_tensor(estimate_[i], at::kDouble));
    }
    total = losses.total_for(divisors);
  }
  if (done_ == 0) optimizer_.zero_grad();
  if (observer_) observer_(last);
  optimizer_.scale_loss(total).backward();
  if (!last) {
    ++done_;
    return;
  }
  done_ = 0;
  const auto& parameters = optimizer_.parameters();
  if (!hooks_.empty()) {
    std::vector<at::Tensor> gradients;
    for (const auto& parameter : parameters) gradients.push_back(parameter.tensor.mutable_grad());
    for (auto& hook : hooks_) hook(gradients);
    // A hook may have replaced a gradient rather than changed it in place.
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (!gradients[i].is_same(parameters[i].tensor.grad()))
        parameters[i].tensor.mutable_grad() = gradients[i];
  }
  if (steps_ > 1) {
    // Every part divided by estimate / true count: one factor when the
    // ratios agree (always for a loss of one part).
    std::optional<double> factor;
    bool one_ratio = true;
    for (std::size_t i = 0; i < estimate_.size(); ++i) {
      if (total_[i] <= 0) continue;
      const double ratio = estimate_[i] / total_[i];
      if (!factor) factor = ratio;
      else if (std::abs(ratio - *factor) > 1e-12 * std::abs(*factor)) one_ratio = false;
    }
    if (one_ratio && factor && *factor != 1.0) {
      at::NoGradGuard no_grad;
      for (const auto& parameter : parameters)
        if (parameter.tensor.grad().defined()) parameter.tensor.mutable_grad().mul_(*factor);
    }
  }
  if (apply_)
    apply_();
  else
    optimizer_.step();
}

}  // namespace garden
