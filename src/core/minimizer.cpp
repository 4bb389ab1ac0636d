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
    const auto count_of = [](const at::Tensor& count) {
      return count.defined() ? count.detach().reshape({}).to(at::kDouble)
                             : at::ones({}, at::TensorOptions().dtype(at::kDouble));
    };
    if (done_ == 0) {
      estimate_.clear();
      total_.clear();
      for (const auto& count : global) {
        // A part with no items in the first part of the batch (no masked
        // token) still needs a finite divisor.
        const at::Tensor c = count_of(count);
        estimate_.push_back(static_cast<double>(steps_) * at::where(c > 0, c, at::ones_like(c)));
        total_.push_back(at::zeros_like(c));
      }
    } else if (global.size() != estimate_.size()) {
      throw Error("the loss has " + std::to_string(global.size()) + " parts in part " +
                  std::to_string(done_ + 1) + " of the step's batch but " +
                  std::to_string(estimate_.size()) + " in the first");
    }
    for (std::size_t i = 0; i < global.size(); ++i) total_[i] = total_[i] + count_of(global[i]);
    total = losses.total_for(estimate_);
  }
  if (done_ == 0) optimizer_.zero_grad();
  if (observer_) observer_(last);
  optimizer_.scale_loss(total).backward();
  optimizer_.make_gradients_dense();
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
  if (steps_ > 1) rescale_to_true_counts();
  if (apply_)
    apply_();
  else
    optimizer_.step();
}

void Minimizer::rescale_to_true_counts() {
  // Every part was divided by estimate / true count: one factor when the
  // ratios agree (always for a loss of one part, whose factor is applied
  // on the device: no host read, and a factor of 1 changes nothing).
  at::NoGradGuard no_grad;
  at::Tensor factor;
  if (estimate_.size() == 1) {
    factor = at::where(total_[0] > 0, estimate_[0] / total_[0], at::ones_like(total_[0]));
  } else {
    // Several parts: read to the host (one wait for the device: the first
    // read), to compare their ratios.
    std::optional<double> ratio;
    for (std::size_t i = 0; i < estimate_.size(); ++i) {
      const double total = total_[i].item<double>();
      if (total <= 0) continue;
      const double r = estimate_[i].item<double>() / total;
      if (!ratio)
        ratio = r;
      else if (std::abs(r - *ratio) > 1e-12 * std::abs(*ratio))
        return;
    }
    if (!ratio || *ratio == 1.0) return;
    factor = at::scalar_tensor(*ratio, at::kDouble);
  }
  for (const auto& parameter : optimizer_.parameters())
    if (parameter.tensor.grad().defined()) parameter.tensor.mutable_grad().mul_(factor);
}

}  // namespace garden
