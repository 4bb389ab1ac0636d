// Loss scaling for float16 training, with the semantics of Keras's
// LossScaleOptimizer (tf.keras.mixed_precision), which Model Garden wraps
// around the optimizer when runtime.mixed_precision_dtype is float16
// (official/modeling/performance.py configure_optimizer). LibTorch's C++ API
// has no GradScaler.
//
// A training step with it:
//
//   scaler.scale(loss).backward();
//   if (scaler.unscale_and_check(optimizer.parameters())) {
//     optimizer.step();
//     if (ema) ema->update(optimizer.iterations());
//   } else {
//     optimizer.skip_step();  // Keras still counts the iteration
//   }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "garden/optim/named_parameter.h"

namespace garden::optim {

class LossScaler {
 public:
  // Keras's defaults: initial_scale 2^15, dynamic_growth_steps 2000, and
  // the dynamic scale's fixed multiplier 2. With dynamic false the scale
  // stays initial_scale.
  explicit LossScaler(double initial_scale = 32768.0 /*2^15*/, int64_t growth_steps = 2000,
                      double multiplier = 2.0, bool dynamic = true);

  // loss * current_scale(), to call backward() on.
  at::Tensor scale(const at::Tensor& loss) const;

  // Multiplies the gradients of `params` by 1 / current_scale(), in place,
  // then checks them. When any gradient holds an inf or NaN it returns false
  // and the caller must skip the update (Optimizer::skip_step); a dynamic
  // scale is then divided by the multiplier (never below 1) and the run of
  // good steps restarts. Otherwise it returns true and counts a good step;
  // after growth_steps good steps in a row a dynamic scale is multiplied by
  // the multiplier (unless that overflows) and the count restarts. A fixed
  // scale never changes but still reports the overflow (Keras would apply
  // the non-finite update).
  bool unscale_and_check(const std::vector<NamedParameter>& params);

  double current_scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  bool dynamic() const { return dynamic_; }

  // {"current_scale": ..., "good_steps": ...}, for the checkpoint. Keras
  // checkpoints the same two variables.
  nlohmann::json state() const;
  // Restores what state() saved; throws garden::Error when a field is
  // missing or not a number. A fixed scale keeps its configured value (it
  // has no state in Keras either).
  void restore(const nlohmann::json& state);

  // Model Garden's reading of runtime.loss_scale: null or "dynamic" give a
  // dynamic scale with Keras's defaults; a number gives that fixed scale.
  // Anything else throws config::ConfigError naming runtime.loss_scale.
  static LossScaler from_config(const std::optional<std::string>& loss_scale);

 private:
  double scale_;
  int64_t growth_steps_;
  double multiplier_;
  bool dynamic_;
  int64_t good_steps_ = 0;
};

}  // namespace garden::optim
