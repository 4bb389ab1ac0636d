#include "garden/optim/optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <regex>

#include "garden/core/error.h"

namespace garden::optim {

Optimizer::Optimizer(std::vector<NamedParameter> parameters, SchedulePtr schedule,
                     ClipOptions clip)
    : parameters_(std::move(parameters)),
      schedule_(std::move(schedule)),
      clip_(clip),
      slots_(parameters_.size()) {}

void Optimizer::zero_grad() {
  for (auto& p : parameters_) {
    auto& grad = p.tensor.mutable_grad();
    if (grad.defined()) {
      grad = at::Tensor();  // set_to_none: no memset, and "no gradient" stays visible
    }
  }
}

at::Tensor& Optimizer::slot(std::size_t index, const std::string& name) {
  auto& slots = slots_[index];
  auto it = slots.find(name);
  if (it == slots.end()) it = slots.emplace(name, torch::zeros_like(parameters_[index].tensor)).first;
  return it->second;
}

double clip_by_global_norm(std::vector<at::Tensor>& gradients, double max_norm) {
  double sum_squares = 0.0;
  for (const auto& g : gradients)
    if (g.defined()) sum_squares += g.to(at::kDouble).pow(2).sum().item<double>();
  const double norm = std::sqrt(sum_squares);
  if (norm > max_norm && std::isfinite(norm)) {
    const double scale = max_norm / norm;
    for (auto& g : gradients)
      if (g.defined()) g.mul_(scale);
  }
  return norm;
}

void Optimizer::clip(std::vector<at::Tensor>& gradients) const {
  if (clip_.clipnorm && *clip_.clipnorm > 0) {
    for (auto& g : gradients) {
      if (!g.defined()) continue;
      const double norm = g.to(at::kDouble).norm().item<double>();
      if (norm > *clip_.clipnorm) g.mul_(*clip_.clipnorm / norm);
    }
  }
  if (clip_.global_clipnorm && *clip_.global_clipnorm > 0)
    clip_by_global_norm(gradients, *clip_.global_clipnorm);
  if (clip_.clipvalue && *clip_.clipvalue > 0)
    for (auto& g : gradients)
      if (g.defined()) g.clamp_(-*clip_.clipvalue, *clip_.clipvalue);
}

void Optimizer::step() {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> gradients;
  gradients.reserve(parameters_.size());
  for (auto& p : parameters_) {
    const auto& g = p.tensor.grad();
    // Clipping scales in place: work on a copy only when clipping is on.
    gradients.push_back(g.defined() ? g : at::Tensor());
  }
  const bool clips = (clip_.clipnorm && *clip_.clipnorm > 0) ||
                     (clip_.global_clipnorm && *clip_.global_clipnorm > 0) ||
                     (clip_.clipvalue && *clip_.clipvalue > 0);
  if (clips) {
    for (auto& g : gradients)
      if (g.defined()) g = g.clone();
    clip(gradients);
  }
  before_updates(gradients);
  const double lr = learning_rate();
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!gradients[i].defined()) continue;
    update(i, parameters_[i].tensor, gradients[i], lr);
  }
  ++iterations_;
}

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    for (const auto& [name, tensor] : slots_[i])
      out.emplace_back(parameters_[i].name + "/" + name, tensor);
  return out;
}

nlohmann::json Optimizer::state_meta() const { return {{"iterations", iterations_}}; }

void Optimizer::load_state(const std::map<std::string, at::Tensor>& tensors,
                           const nlohmann::json& meta) {
  torch::NoGradGuard no_grad;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < parameters_.size(); ++i) index[parameters_[i].name] = i;
  for (auto& slots : slots_) slots.clear();
  for (const auto& [key, tensor] : tensors) {
    const auto slash = key.rfind('/');
    const std::string param = key.substr(0, slash);
    const auto it = index.find(param);
    if (slash == std::string::npos || it == index.end())
      throw Error("optimizer state '" + key + "' names no parameter of this model");
    const auto& target = parameters_[it->second].tensor;
    if (tensor.sizes() != target.sizes())
      throw Error("optimizer state '" + key + "' has shape " + c10::str(tensor.sizes()) +
                  ", the parameter has " + c10::str(target.sizes()));
    // A copy: the optimizer must own its state, never alias the caller's.
    slots_[it->second][key.substr(slash + 1)] =
        tensor.to(target.device(), target.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  }
  iterations_ = meta.value("iterations", int64_t{0});
}

namespace {

// Keras SGD: v = momentum * v - lr * g; p += v (nesterov: p += momentum * v - lr * g).
class SGD : public Optimizer {
 public:
  SGD(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c, const config::SGDConfig& cfg)
      : Optimizer(std::move(p), std::move(s), c), cfg_(cfg) {}

 protected:
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    // Legacy Keras time-based decay.
    if (cfg_.decay > 0) lr /= 1.0 + cfg_.decay * static_cast<double>(iterations());
    if (cfg_.momentum == 0.0) {
      param.sub_(grad, lr);
      return;
    }
    at::Tensor& velocity = slot(i, "momentum");
    velocity.mul_(cfg_.momentum).sub_(grad, lr);
    if (cfg_.nesterov)
      param.add_(velocity, cfg_.momentum).sub_(grad, lr);
    else
      param.add_(velocity);
  }

 private:
  config::SGDConfig cfg_;
};

// Keras Adam: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t); p -= lr_t * m / (sqrt(v) + eps).
class Adam : public Optimizer {
 public:
  Adam(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c, double beta_1, double beta_2,
       double epsilon, bool amsgrad)
      : Optimizer(std::move(p), std::move(s), c),
        beta_1_(beta_1),
        beta_2_(beta_2),
        epsilon_(epsilon),
        amsgrad_(amsgrad) {}

 protected:
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    const double t = static_cast<double>(iterations() + 1);
    const double lr_t = lr * std::sqrt(1.0 - std::pow(beta_2_, t)) / (1.0 - std::pow(beta_1_, t));
    at::Tensor& m = slot(i, "m");
    at::Tensor& v = slot(i, "v");
    m.mul_(beta_1_).add_(grad, 1.0 - beta_1_);
    v.mul_(beta_2_).addcmul_(grad, grad, 1.0 - beta_2_);
    at::Tensor denominator;
    if (amsgrad_) {
      at::Tensor& v_hat = slot(i, "vhat");
      at::maximum_out(v_hat, v_hat, v);
      denominator = v_hat.sqrt().add_(epsilon_);
    } else {
      denominator = v.sqrt().add_(epsilon_);
    }
    param.addcdiv_(m, denominator, -lr_t);
  }

 private:
  double beta_1_, beta_2_, epsilon_;
  bool amsgrad_;
};

// Model Garden's AdamWeightDecay: decoupled decay p -= lr * rate * p on the
// parameters the regexes select, then Adam; gradients clipped by global norm.
class AdamWeightDecay : public Adam {
 public:
  AdamWeightDecay(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c,
                  const config::AdamWeightDecayConfig& cfg)
      : Adam(std::move(p), std::move(s), c, cfg.beta_1, cfg.beta_2, cfg.epsilon, cfg.amsgrad),
        cfg_(cfg) {
    for (const auto& param : parameters()) decays_.push_back(uses_weight_decay(param.name));
  }

  bool uses_weight_decay(const std::string& name) const {
    if (cfg_.weight_decay_rate == 0.0) return false;
    if (cfg_.include_in_weight_decay)
      for (const auto& r : *cfg_.include_in_weight_decay)
        if (std::regex_search(name, std::regex(r))) return true;
    if (cfg_.exclude_from_weight_decay)
      for (const auto& r : *cfg_.exclude_from_weight_decay)
        if (std::regex_search(name, std::regex(r))) return false;
    return true;
  }

 protected:
  void before_updates(std::vector<at::Tensor>& gradients) override {
    if (cfg_.gradient_clip_norm > 0) {
      for (auto& g : gradients)
        if (g.defined()) g = g.clone();
      clip_by_global_norm(gradients, cfg_.gradient_clip_norm);
    }
  }
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    if (decays_[i]) param.sub_(param, lr * cfg_.weight_decay_rate);
    Adam::update(i, param, grad, lr);
  }

 private:
  config::AdamWeightDecayConfig cfg_;
  std::vector<bool> decays_;
};

ClipOptions clip_options(const config::BaseOptimizerConfig& c) {
  return ClipOptions{c.clipnorm, c.clipvalue, c.global_clipnorm};
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const config::OptimizationConfig& config,
                                          std::vector<NamedParameter> parameters) {
  SchedulePtr schedule = make_schedule(config.learning_rate, config.warmup);
  const auto& o = config.optimizer;
  if (o.type == "sgd")
    return std::make_unique<SGD>(std::move(parameters), schedule, clip_options(o.sgd), o.sgd);
  if (o.type == "adam")
    return std::make_unique<Adam>(std::move(parameters), schedule, clip_options(o.adam),
                                  o.adam.beta_1, o.adam.beta_2, o.adam.epsilon, o.adam.amsgrad);
  if (o.type == "adamw")
    return std::make_unique<AdamWeightDecay>(std::move(parameters), schedule,
                                             clip_options(o.adamw), o.adamw);
  if (o.type.empty())
    throw config::ConfigError("trainer.optimizer_config.optimizer.type is not set");
  throw config::ConfigError("unknown optimizer type '" + o.type + "'");
}

}  // namespace garden::optim
