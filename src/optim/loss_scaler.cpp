#include "garden/optim/loss_scaler.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "garden/base/error.h"
#include "garden/config/config.h"

namespace garden::optim {

LossScaler::LossScaler(double initial_scale, int64_t growth_steps, double multiplier, bool dynamic)
    : scale_(initial_scale),
      growth_steps_(growth_steps),
      multiplier_(multiplier),
      dynamic_(dynamic) {
  if (!(initial_scale > 0) || !std::isfinite(initial_scale))
    throw Error("loss scale must be a positive finite number, got " +
                std::to_string(initial_scale));
  if (dynamic && growth_steps < 1)
    throw Error("loss scale growth_steps must be >= 1, got " + std::to_string(growth_steps));
  if (dynamic && !(multiplier > 1))
    throw Error("loss scale multiplier must be > 1, got " + std::to_string(multiplier));
}

at::Tensor LossScaler::scale(const at::Tensor& loss) const { return loss * scale_; }

bool LossScaler::unscale_and_check(const std::vector<NamedParameter>& params) {
  torch::NoGradGuard no_grad;
  // Keras multiplies by the reciprocal (get_unscaled_gradients).
  const double reciprocal = 1.0 / scale_;
  std::vector<at::Tensor> sums;
  for (const auto& p : params) {
    at::Tensor& grad = p.tensor.mutable_grad();
    if (!grad.defined()) continue;
    grad.mul_(reciprocal);
    // A sum in double stays finite for finite entries and carries any inf or
    // NaN through: one reduction instead of an elementwise isfinite.
    sums.push_back(grad.sum(at::kDouble));
  }
  // One read to the host per step (PyTorch's GradScaler reads one too): the
  // step is skipped, and the scale changed, by what it says.
  const bool finite = sums.empty() || std::isfinite(at::stack(sums).sum().item<double>());
  if (!dynamic_) return finite;
  if (finite) {
    if (good_steps_ + 1 >= growth_steps_) {
      const double grown = scale_ * multiplier_;
      if (std::isfinite(grown)) scale_ = grown;
      good_steps_ = 0;
    } else {
      ++good_steps_;
    }
  } else {
    scale_ = std::max(scale_ / multiplier_, 1.0);
    good_steps_ = 0;
  }
  return finite;
}

nlohmann::json LossScaler::state() const {
  return {{"current_scale", scale_}, {"good_steps", good_steps_}};
}

void LossScaler::restore(const nlohmann::json& state) {
  const auto field = [&](const char* key) -> const nlohmann::json& {
    if (!state.is_object() || !state.contains(key) || !state.at(key).is_number())
      throw Error(std::string("loss scaler state lacks a numeric '") + key + "'");
    return state.at(key);
  };
  const double saved_scale = field("current_scale").get<double>();
  const int64_t saved_good_steps = field("good_steps").get<int64_t>();
  if (!dynamic_) return;
  if (!(saved_scale > 0) || !std::isfinite(saved_scale))
    throw Error("loss scaler state has an invalid current_scale " + std::to_string(saved_scale));
  scale_ = saved_scale;
  good_steps_ = saved_good_steps;
}

LossScaler LossScaler::from_config(const std::optional<std::string>& loss_scale) {
  if (!loss_scale || loss_scale->empty() || *loss_scale == "dynamic") return LossScaler();
  const char* text = loss_scale->c_str();
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value > 0) || !std::isfinite(value))
    throw config::ConfigError(
        "runtime.loss_scale must be null, 'dynamic' or a positive number, "
        "got '" +
        *loss_scale + "'");
  return LossScaler(value, /*growth_steps=*/2000, /*multiplier=*/2.0, /*dynamic=*/false);
}

}  // namespace garden::optim
