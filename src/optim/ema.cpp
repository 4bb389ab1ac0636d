#include "garden/optim/ema.h"

#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "garden/base/error.h"

namespace garden::optim {

ExponentialMovingAverage::ExponentialMovingAverage(const config::EMAConfig& config,
                                                   std::vector<NamedParameter> parameters,
                                                   std::vector<NamedParameter> buffers)
    : config_(config), weights_(std::move(parameters)) {
  if (!config_.trainable_weights_only)
    for (auto& buffer : buffers)
      if (buffer.tensor.defined() && buffer.tensor.is_floating_point())
        weights_.push_back(std::move(buffer));
  std::set<std::string> names;
  for (const auto& weight : weights_) {
    if (!names.insert(weight.name).second)
      throw Error("moving average: the weight name '" + weight.name + "' appears twice");
    averages_.push_back(torch::zeros_like(weight.tensor, at::MemoryFormat::Preserve)
                            .detach()
                            .requires_grad_(false));
  }
}

double ExponentialMovingAverage::decay(int64_t step) const {
  if (step < config_.start_step) return 0.0;
  if (!config_.dynamic_decay) return config_.average_decay;
  const double s = static_cast<double>(step - config_.start_step);
  return std::min(config_.average_decay, (1.0 + s) / (10.0 + s));
}

void ExponentialMovingAverage::update(int64_t step) {
  torch::NoGradGuard no_grad;
  const double keep = decay(step);
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    at::Tensor& average = averages_[i];
    // Model Garden's form, average - (1 - decay) * (average - weight), so the
    // rounding matches too.
    average.sub_(average - weights_[i].tensor, 1.0 - keep);
  }
}

void ExponentialMovingAverage::swap_weights() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    at::Tensor& weight = weights_[i].tensor;
    const at::Tensor live = weight.clone();
    weight.copy_(averages_[i]);
    averages_[i].copy_(live);
  }
}

std::vector<std::pair<std::string, at::Tensor>> ExponentialMovingAverage::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(weights_.size());
  for (std::size_t i = 0; i < weights_.size(); ++i)
    out.emplace_back(weights_[i].name, averages_[i]);
  return out;
}

void ExponentialMovingAverage::load_state(const std::map<std::string, at::Tensor>& tensors) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < weights_.size(); ++i) index[weights_[i].name] = i;
  for (const auto& entry : tensors) {
    const auto it = index.find(entry.first);
    if (it == index.end())
      throw Error("moving-average state '" + entry.first + "' names no averaged weight");
    const auto& target = averages_[it->second];
    if (entry.second.sizes() != target.sizes())
      throw Error("moving-average state '" + entry.first + "' has shape " +
                  c10::str(entry.second.sizes()) + ", the weight has " + c10::str(target.sizes()));
  }
  for (const auto& weight : weights_)
    if (!tensors.count(weight.name))
      throw Error("moving-average state lacks the average of '" + weight.name + "'");
  // Checked everything first: a failed load leaves the averages untouched.
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : tensors) averages_[index.at(name)].copy_(tensor);
}

std::map<std::string, at::Tensor> ExponentialMovingAverage::averaged_weights() const {
  std::map<std::string, at::Tensor> out;
  for (std::size_t i = 0; i < weights_.size(); ++i)
    out.emplace(weights_[i].name, averages_[i].clone());
  return out;
}

}  // namespace garden::optim
