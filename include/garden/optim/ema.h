// Model Garden's ExponentialMovingAverage
// (official/modeling/optimization/ema_optimizer.py): a moving average of the
// weights, swapped in for evaluation and export.
//
// In Model Garden it wraps the optimizer; here it stands beside it, and the
// trainer drives it:
//
//   optimizer.step();
//   ema.update(optimizer.iterations());   // after the step: the count is already incremented
//
// Model Garden's apply_gradients runs the inner optimizer (which increments
// `iterations`) and then update_average(), which reads `iterations`: so the
// first update sees step 1, not 0. When a LossScaler finds an overflow the
// step is skipped (Optimizer::skip_step) and there is no update: Keras's
// LossScaleOptimizer does not call the wrapped apply_gradients then.
//
// For evaluation or export, swap_weights(), use the model, swap_weights()
// again.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "garden/config/optimization.h"
#include "garden/optim/named_parameter.h"

namespace garden::optim {

class ExponentialMovingAverage {
 public:
  // Averages `parameters`, and `buffers` too when config.trainable_weights_only
  // is false (Model Garden's model.variables: batch-norm statistics). Buffers
  // that are not floating point (num_batches_tracked) are never averaged: an
  // average of a counter means nothing. The averages start at zero, as Model
  // Garden's shadow_copy creates them (slots with the 'zeros' initializer);
  // with dynamic decay the zero start has faded after a few updates, with a
  // fixed decay it lasts about 1 / (1 - average_decay) updates. Names must
  // be unique.
  ExponentialMovingAverage(const config::EMAConfig& config, std::vector<NamedParameter> parameters,
                           std::vector<NamedParameter> buffers = {});

  // The decay update(step) uses: 0 before start_step (the average copies the
  // weights); with dynamic_decay min(average_decay, (1 + s) / (10 + s)),
  // s = step - start_step; otherwise average_decay.
  double decay(int64_t step) const;
  // average -= (1 - decay(step)) * (average - weight), for every weight.
  // Call it after each optimizer step with optimizer.iterations() (see above).
  void update(int64_t step);
  // Exchanges the averages and the live weights in place; a second call
  // restores both.
  void swap_weights();

  // The averages by weight name, for the checkpoint (the tensors themselves:
  // serialize them, do not modify them).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  // Copies saved averages into this one's own tensors (never aliasing the
  // caller's). Throws garden::Error when a name is unknown or missing or a
  // shape differs.
  void load_state(const std::map<std::string, at::Tensor>& tensors);
  // Copies of the averages by weight name (for export without swapping).
  std::map<std::string, at::Tensor> averaged_weights() const;

  const config::EMAConfig& config() const { return config_; }

 private:
  config::EMAConfig config_;
  std::vector<NamedParameter> weights_;  // live tensors of the model
  std::vector<at::Tensor> averages_;     // same order as weights_
};

}  // namespace garden::optim
