#include "garden/optim/optimizer.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include "garden/base/error.h"
#include "garden/base/torch_features.h"
#include "garden/kernels/adam.h"

namespace garden::optim {

Optimizer::Optimizer(std::vector<NamedParameter> parameters, SchedulePtr schedule, ClipOptions clip)
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

void Optimizer::make_gradients_dense() {
  for (auto& p : parameters_) {
    auto& grad = p.tensor.mutable_grad();
    if (grad.defined() && grad.is_sparse()) grad = grad.to_dense();
  }
}

at::Tensor& Optimizer::slot(std::size_t index, const std::string& name, double initial_value) {
  auto& slots = slots_[index];
  auto it = slots.find(name);
  if (it == slots.end())
    it = slots.emplace(name, torch::full_like(parameters_[index].tensor, initial_value)).first;
  return it->second;
}

void Optimizer::add_gradient_transformer(GradientTransformer transformer) {
  transformers_.push_back(std::move(transformer));
}

namespace {
// max_norm / norm where norm > max_norm (and, with finite_only, finite), 1
// elsewhere: a factor on the norm's device, so no norm is read to the host
// (and x * 1 is x).
at::Tensor factor_above(const at::Tensor& norm, double max_norm, bool finite_only) {
  at::Tensor above = norm.gt(max_norm);
  if (finite_only) above = above.logical_and(norm.isfinite());
  return at::where(above, max_norm / norm, at::ones_like(norm));
}
}  // namespace

at::Tensor clip_by_global_norm(std::vector<at::Tensor>& gradients, double max_norm) {
  std::vector<at::Tensor> squares;
  for (const auto& g : gradients)
    if (g.defined()) squares.push_back(g.to(at::kDouble).pow(2).sum());
  if (squares.empty()) return at::zeros({}, at::kDouble);
  const at::Tensor norm = at::stack(squares).sum().sqrt();
  const at::Tensor factor = factor_above(norm, max_norm, /*finite_only=*/true);
  for (auto& g : gradients)
    if (g.defined()) g.mul_(factor);
  return norm;
}

void add_gaussian_noise(std::vector<at::Tensor>& gradients, double stddev) {
  if (stddev == 0.0) return;  // adding zeros: skip the sampling
  for (auto& g : gradients) {
    if (!g.defined()) continue;
    // Drawn in float32 (float64 for double gradients) on the CPU generator:
    // the same stream on every device, and no half-precision sampling.
    const auto sample_type = g.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor noise = torch::randn(g.sizes(), at::TensorOptions().dtype(sample_type));
    noise.mul_(stddev);
    g.add_(noise.to(g.options()));
  }
}

void Optimizer::own_gradients(std::vector<at::Tensor>& gradients) const {
  for (std::size_t i = 0; i < gradients.size(); ++i)
    if (gradients[i].defined() && gradients[i].is_same(parameters_[i].tensor.grad()))
      gradients[i] = gradients[i].clone();
}

bool Optimizer::clips() const {
  return (clip_.clipnorm && *clip_.clipnorm > 0) ||
         (clip_.global_clipnorm && *clip_.global_clipnorm > 0) ||
         (clip_.clipvalue && *clip_.clipvalue > 0);
}

// Keras OptimizerV2._transform_gradients: clipvalue, then clipnorm, then
// global_clipnorm.
void Optimizer::clip(std::vector<at::Tensor>& gradients) const {
  if (clip_.clipvalue && *clip_.clipvalue > 0)
    for (auto& g : gradients)
      if (g.defined()) g.clamp_(-*clip_.clipvalue, *clip_.clipvalue);
  if (clip_.clipnorm && *clip_.clipnorm > 0) {
    for (auto& g : gradients)
      if (g.defined()) g.mul_(factor_above(g.to(at::kDouble).norm(), *clip_.clipnorm, false));
  }
  if (clip_.global_clipnorm && *clip_.global_clipnorm > 0)
    clip_by_global_norm(gradients, *clip_.global_clipnorm);
}

void Optimizer::set_capturable(bool on) {
  if (on) {
    std::string why = capture_refusal();
    if (why.empty() && loss_scaler_)
      why = "a loss scaler (float16) reads the gradients' finiteness";
    if (why.empty() && ema_) why = "an exponential moving average updates with the step count";
    if (why.empty() && !transformers_.empty())
      why = "gradient transformers (differential privacy) draw their noise on the host";
    if (why.empty() && !scales_.empty())
      why = "layer-wise learning rates pass each layer's rate to the kernels";
#if !GARDEN_HAS_FOREACH_TENSOR_FACTOR
    if (why.empty())
      why = "LibTorch " TORCH_VERSION " has no multi-tensor ops with a tensor factor (2.1)";
#endif
    if (!why.empty()) throw Error("this optimizer's step cannot be captured: " + why);
  }
  capturable_ = on;
}

void Optimizer::set_learning_rate_scales(std::vector<double> scales) {
  if (scales.size() != parameters_.size())
    throw Error("learning-rate factors: " + std::to_string(scales.size()) + " for " +
                std::to_string(parameters_.size()) + " parameters");
  for (std::size_t i = 0; i < scales.size(); ++i)
    if (!std::isfinite(scales[i]) || scales[i] <= 0.0)
      throw Error("learning-rate factor " + std::to_string(scales[i]) + " of '" +
                  parameters_[i].name + "' is not a finite positive number");
  if (capturable_)
    throw Error("this optimizer's step cannot be captured: layer-wise learning rates pass each "
                "layer's rate to the kernels");
  bool all_one = true;
  for (const double scale : scales) all_one = all_one && scale == 1.0;
  scales_ = all_one ? std::vector<double>{} : std::move(scales);
}

void Optimizer::prepare_step() {
  if (!capturable_) return;
  torch::NoGradGuard no_grad;
  write_step_scalars(learning_rate());
}

void Optimizer::step() {
  RECORD_FUNCTION("garden::optimizer_step", std::vector<c10::IValue>());
  std::vector<at::Tensor> gradients;
  if (!transform_gradients(gradients)) {
    skip_step();  // an overflow: no update, and no new average either
    return;
  }
  apply_gradients(gradients);
}

bool Optimizer::transform_gradients(std::vector<at::Tensor>& gradients) {
  torch::NoGradGuard no_grad;
  gradients.clear();
  make_gradients_dense();
  if (loss_scaler_ && !loss_scaler_->unscale_and_check(parameters_)) return false;
  gradients.reserve(parameters_.size());
  // Aliases of .grad: copied only when something transforms them in place.
  for (auto& p : parameters_) gradients.push_back(p.tensor.grad());
  before_clipping(gradients);
  if (clips() || !transformers_.empty()) own_gradients(gradients);
  if (clips()) clip(gradients);
  for (const auto& transform : transformers_) transform(gradients);
  return true;
}

void Optimizer::apply_gradients(const std::vector<at::Tensor>& gradients) {
  torch::NoGradGuard no_grad;
  if (gradients.size() != parameters_.size())
    throw Error("apply_gradients: " + std::to_string(gradients.size()) + " gradients for " +
                std::to_string(parameters_.size()) + " parameters");
  const double rate = learning_rate();
  if (scales_.empty()) {
    std::vector<std::size_t> indices;
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (gradients[i].defined()) indices.push_back(i);
    update_all(indices, gradients, rate);
  } else {
    // One multi-tensor update per factor, in the order of the factors.
    std::map<double, std::vector<std::size_t>> by_scale;
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (gradients[i].defined()) by_scale[scales_[i]].push_back(i);
    for (const auto& [scale, indices] : by_scale) update_all(indices, gradients, rate * scale);
  }
  ++iterations_;
  if (ema_) ema_->update(iterations_);
}

void Optimizer::update_all(const std::vector<std::size_t>& indices,
                           const std::vector<at::Tensor>& gradients, double learning_rate) {
  for (const std::size_t i : indices) update(i, parameters_[i].tensor, gradients[i], learning_rate);
}

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    for (const auto& [name, tensor] : slots_[i])
      out.emplace_back(parameters_[i].name + "/" + name, tensor);
  if (ema_)
    for (auto& [name, tensor] : ema_->state_tensors()) out.emplace_back("ema/" + name, tensor);
  return out;
}

nlohmann::json Optimizer::state_meta() const {
  nlohmann::json meta = {{"iterations", iterations_}};
  if (loss_scaler_) meta["loss_scale"] = loss_scaler_->state();
  return meta;
}

void Optimizer::load_state(const std::map<std::string, at::Tensor>& tensors,
                           const nlohmann::json& meta) {
  torch::NoGradGuard no_grad;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < parameters_.size(); ++i) index[parameters_[i].name] = i;
  // A slot that exists keeps its tensor, filled in place: a step captured
  // as a CUDA graph goes on updating the tensors it was captured with (a
  // restore in the middle of a run: NaN recovery). Capturable, a slot the
  // state lacks goes back to zeros in place (Adam's m and v start at 0);
  // otherwise it is dropped and made again on first use.
  std::vector<std::map<std::string, at::Tensor>> previous = std::move(slots_);
  slots_.assign(parameters_.size(), {});
  std::map<std::string, at::Tensor> averages;
  for (const auto& [key, tensor] : tensors) {
    if (key.rfind("ema/", 0) == 0) {
      averages.emplace(key.substr(4), tensor);
      continue;
    }
    const auto slash = key.rfind('/');
    const std::string param = key.substr(0, slash);
    const auto it = index.find(param);
    if (slash == std::string::npos || it == index.end())
      throw Error("optimizer state '" + key + "' names no parameter of this model");
    const auto& target = parameters_[it->second].tensor;
    if (tensor.sizes() != target.sizes())
      throw Error("optimizer state '" + key + "' has shape " + c10::str(tensor.sizes()) +
                  ", the parameter has " + c10::str(target.sizes()));
    const std::string name = key.substr(slash + 1);
    auto& kept = previous[it->second];
    const auto same = kept.find(name);
    if (same != kept.end() && same->second.scalar_type() == target.scalar_type() &&
        same->second.device() == target.device()) {
      same->second.copy_(tensor);
      slots_[it->second][name] = same->second;
      kept.erase(same);
      continue;
    }
    // A copy: the optimizer must own its state, never alias the caller's.
    slots_[it->second][name] =
        tensor.to(target.device(), target.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  }
  if (capturable_)
    for (std::size_t i = 0; i < previous.size(); ++i)
      for (auto& [name, tensor] : previous[i]) slots_[i][name] = tensor.zero_();
  iterations_ = meta.value("iterations", int64_t{0});
  if (ema_ && !averages.empty()) ema_->load_state(averages);
  if (loss_scaler_ && meta.contains("loss_scale")) loss_scaler_->restore(meta.at("loss_scale"));
}

namespace {

ClipOptions clip_options(const config::BaseOptimizerConfig& c) {
  return ClipOptions{c.clipnorm, c.clipvalue, c.global_clipnorm};
}

// Keras refuses these combinations in OptimizerV2.__init__ and the clip
// setters; refusing them here keeps a config meaning the same in both.
void check_clip_options(const config::BaseOptimizerConfig& c, const std::string& key,
                        bool has_gradient_transformers) {
  if (c.clipnorm && c.global_clipnorm)
    throw config::ConfigError(key + ": clipnorm and global_clipnorm cannot both be set");
  if (has_gradient_transformers && (c.clipnorm || c.clipvalue || c.global_clipnorm))
    throw config::ConfigError(
        key +
        ": clipnorm, clipvalue and global_clipnorm cannot be set together with "
        "differential_privacy_config, which does its own clipping");
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(
    const config::OptimizationConfig& config, std::vector<NamedParameter> parameters,
    const std::optional<config::DifferentialPrivacyConfig>& dp) {
  const auto& o = config.optimizer;
  if (o.type.empty())
    throw config::ConfigError("trainer.optimizer_config.optimizer.type is not set");
  const config::Config* subsection = o.get();
  if (!subsection) throw config::ConfigError("unknown optimizer type '" + o.type + "'");
  ClipOptions clip;
  if (const auto* base = dynamic_cast<const config::BaseOptimizerConfig*>(subsection)) {
    check_clip_options(*base, "trainer.optimizer_config.optimizer." + o.type, dp.has_value());
    clip = clip_options(*base);
  }
  SchedulePtr schedule = make_schedule(config.learning_rate, config.warmup);
  std::unique_ptr<Optimizer> optimizer =
      optimizer_registry().get(o.type)(*subsection, std::move(parameters), schedule, clip);
  if (!optimizer) throw config::ConfigError("optimizer type '" + o.type + "' built nothing");

  if (dp) {
    // Model Garden's base_task.create_optimizer: clip the whole batch
    // gradient, then add noise scaled to the clipping norm (per batch, not
    // per example; see the header).
    const double clipping_norm = dp->clipping_norm;
    const double noise_stddev = dp->clipping_norm * dp->noise_multiplier;
    optimizer->add_gradient_transformer([clipping_norm](std::vector<at::Tensor>& gradients) {
      clip_by_global_norm(gradients, clipping_norm);
    });
    optimizer->add_gradient_transformer([noise_stddev](std::vector<at::Tensor>& gradients) {
      add_gaussian_noise(gradients, noise_stddev);
    });
  }
  return optimizer;
}

}  // namespace garden::optim
