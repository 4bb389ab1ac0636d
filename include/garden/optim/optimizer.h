// Optimizers with Keras's update formulas, so Model Garden hyperparameters
// mean the same here. Each owns its state tensors ("slots"), which the
// checkpoint saves by parameter name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "garden/config/definitions.h"
#include "garden/config/optimization.h"
#include "garden/config/registry.h"
#include "garden/optim/ema.h"
#include "garden/optim/loss_scaler.h"
#include "garden/optim/lr_schedule.h"
#include "garden/optim/named_parameter.h"

namespace garden::optim {

struct ClipOptions {
  std::optional<double> clipnorm;         // per-gradient L2 norm
  std::optional<double> clipvalue;        // per-element
  std::optional<double> global_clipnorm;  // all gradients together
};

// Keras's `gradient_transformers`: rewrites the batch gradients (one entry
// per parameter, undefined where a parameter has no gradient) in place. The
// tensors are the optimizer's own copies, never the parameters' .grad.
using GradientTransformer = std::function<void(std::vector<at::Tensor>& gradients)>;

class Optimizer {
 public:
  Optimizer(std::vector<NamedParameter> parameters, SchedulePtr schedule, ClipOptions clip);
  virtual ~Optimizer() = default;

  void zero_grad();
  // Replaces a sparse .grad (a table's rows from sparse lookups only, e.g.
  // kernels::embedding_rows without the tied projection in the graph) by its
  // dense form, which everything after backward expects. The Minimizer calls
  // it after each backward, and step() and transform_gradients first.
  void make_gradients_dense();
  // Transforms the gradients as Keras's apply_gradients does (the
  // optimizer's own pre-clipping, then clipvalue, clipnorm, global_clipnorm,
  // then the gradient transformers), applies one update at learning_rate(),
  // and counts the iteration. Parameters without a gradient are left alone.
  void step();
  // step() in two halves, for parameter servers (a worker transforms the
  // whole model's gradients; the server that holds a parameter updates it).
  // transform_gradients: unscale (false on an overflow: skip_step() instead),
  // the optimizer's own pre-clipping, clipvalue, clipnorm, global_clipnorm
  // and the transformers, into `gradients` (one per parameter, undefined
  // where there is none). apply_gradients: the update at learning_rate() of
  // every defined entry, the iteration count and the EMA.
  bool transform_gradients(std::vector<at::Tensor>& gradients);
  void apply_gradients(const std::vector<at::Tensor>& gradients);
  // Counts an iteration without updating anything: what Keras's
  // LossScaleOptimizer does when the gradients overflow (see LossScaler), so
  // the learning-rate schedule still advances.
  void skip_step() { ++iterations_; }
  // A factor of the learning rate for each parameter (in parameters()'
  // order; 1 for all by default): ELECTRA's layer-wise learning-rate decay
  // (nlp::layerwise_learning_rate_scales). Each update runs at
  // learning_rate() times its parameter's factor; the weight decay of
  // AdamWeightDecay and LAMB, which Keras multiplies by the rate, follows
  // it. Throws garden::Error for a count that is not the parameters', a
  // factor that is not finite and positive, or a capturable step.
  void set_learning_rate_scales(std::vector<double> scales);
  const std::vector<double>& learning_rate_scales() const { return scales_; }

  // Runs after clipping, in the order added (Model Garden's differential
  // privacy transforms, see make_optimizer).
  void add_gradient_transformer(GradientTransformer transformer);

  // Model Garden's optimizer wrappers. With a loss scaler (float16), step()
  // unscales the gradients first and skips the update when they overflow;
  // with an EMA, step() updates the averages after each update.
  void set_loss_scaler(std::unique_ptr<LossScaler> scaler) { loss_scaler_ = std::move(scaler); }
  LossScaler* loss_scaler() const { return loss_scaler_.get(); }
  void set_ema(std::unique_ptr<ExponentialMovingAverage> ema) { ema_ = std::move(ema); }
  ExponentialMovingAverage* ema() const { return ema_.get(); }
  // The loss to call backward() on: scaled when there is a loss scaler.
  at::Tensor scale_loss(const at::Tensor& loss) const {
    return loss_scaler_ ? loss_scaler_->scale(loss) : loss;
  }

  // For a step captured as a CUDA graph (core/cuda_graph.h): the numbers
  // that change from step to step (the learning rate, Adam's bias
  // correction, the weight decay) are read from device tensors that
  // prepare_step() writes before each step, instead of being passed to the
  // kernels as numbers. Adam and AdamWeightDecay can (not with amsgrad), on
  // LibTorch 2.1 or later; for the others, and with a loss scaler, an EMA or
  // gradient transformers (they read the host or draw on it), this throws
  // garden::Error naming what stops it.
  void set_capturable(bool on);
  bool capturable() const { return capturable_; }
  // Capturable: writes the numbers of the next step (at iterations()) to
  // the parameters' devices. Call it before every step, eager or replayed;
  // not capturable, it does nothing.
  void prepare_step();
  // Capturable: counts a step that a graph replayed (the host code that
  // counts the iterations ran only when it was captured).
  void count_replayed_step() { ++iterations_; }

  // The rate the next step() uses: the schedule at iterations().
  double learning_rate() const { return (*schedule_)(iterations_); }
  int64_t iterations() const { return iterations_; }
  const std::vector<NamedParameter>& parameters() const { return parameters_; }

  // The state as named tensors ("<parameter>/<slot>", and "ema/<weight>" for
  // the averages) plus a JSON record (iterations, the loss scale).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  nlohmann::json state_meta() const;
  // Restores what state_tensors() / state_meta() saved; throws garden::Error
  // when a slot's parameter or shape does not match.
  void load_state(const std::map<std::string, at::Tensor>& tensors, const nlohmann::json& meta);

 protected:
  // One parameter's update, under NoGradGuard, in place.
  virtual void update(std::size_t index, at::Tensor& parameter, const at::Tensor& gradient,
                      double learning_rate) = 0;
  // The step's updates of the parameters at `indices` (those with a
  // gradient; gradients[i] is parameter i's): update() one by one, unless an
  // optimizer updates them together (Adam: LibTorch's multi-tensor ops).
  virtual void update_all(const std::vector<std::size_t>& indices,
                          const std::vector<at::Tensor>& gradients, double learning_rate);
  // Called once per step before Keras's clipping, for an optimizer's own
  // transform of the raw gradients (AdamWeightDecay's gradient_clip_norm).
  // An entry may still alias its parameter's .grad: replace it (clone)
  // rather than modify it in place.
  virtual void before_clipping(std::vector<at::Tensor>& gradients) { (void)gradients; }
  // Capturable steps: why this optimizer cannot take its numbers from
  // device tensors ("" when it can), and writing them for a step at
  // learning rate `lr` (called by prepare_step()).
  virtual std::string capture_refusal() const { return "its update passes numbers to the kernels"; }
  virtual void write_step_scalars(double lr) { (void)lr; }
  // Per-parameter state, created on first use filled with initial_value,
  // like the parameter.
  at::Tensor& slot(std::size_t index, const std::string& name, double initial_value = 0.0);

 private:
  // Replaces every entry that still aliases its parameter's .grad by a copy,
  // so in-place transforms leave .grad alone.
  void own_gradients(std::vector<at::Tensor>& gradients) const;
  bool clips() const;
  void clip(std::vector<at::Tensor>& gradients) const;

  std::vector<NamedParameter> parameters_;
  SchedulePtr schedule_;
  ClipOptions clip_;
  std::vector<GradientTransformer> transformers_;
  std::vector<double> scales_;  // empty: every factor is 1
  int64_t iterations_ = 0;
  bool capturable_ = false;
  std::vector<std::map<std::string, at::Tensor>> slots_;
  std::unique_ptr<LossScaler> loss_scaler_;
  std::unique_ptr<ExponentialMovingAverage> ema_;
};

// Scales `gradients` in place so their global L2 norm is at most max_norm
// (tf.clip_by_global_norm; a non-finite norm leaves them as they are);
// returns the norm before clipping, a double scalar on the gradients'
// device. Nothing is read to the host: no wait for a GPU.
at::Tensor clip_by_global_norm(std::vector<at::Tensor>& gradients, double max_norm);

// Adds independent N(0, stddev^2) noise to every defined gradient, in place
// (Model Garden's privacy ops.add_noise). The noise is drawn on the CPU from
// LibTorch's default generator, so torch::manual_seed and a checkpointed
// generator state reproduce it, whatever device the gradients are on.
void add_gaussian_noise(std::vector<at::Tensor>& gradients, double stddev);

// Builds an optimizer from its config subsection (the one
// trainer.optimizer_config.optimizer.type names).
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(
    const config::Config& subsection, std::vector<NamedParameter> parameters, SchedulePtr schedule,
    ClipOptions clip)>;

// Every optimizer type by name: Garden's own (sgd, adam, adamw, lamb,
// rmsprop, adagrad) and those registered with register_optimizer.
config::Registry<OptimizerFactory>& optimizer_registry();

// Registers an optimizer of your own, from your project, as Model Garden's
// register_optimizer_cls does: `type` becomes a choice of
// trainer.optimizer_config.optimizer with ConfigT's keys (derive ConfigT
// from config::BaseOptimizerConfig to get clipnorm, clipvalue and
// global_clipnorm, applied by the Optimizer base class). Register before
// any config is made (first thing in main).
template <class ConfigT>
void register_optimizer(const std::string& type,
                        std::function<std::unique_ptr<Optimizer>(
                            const ConfigT&, std::vector<NamedParameter>, SchedulePtr, ClipOptions)>
                            build) {
  static_assert(std::is_base_of_v<config::Config, ConfigT>, "ConfigT must be a config::Config");
  config::register_oneof_choice(typeid(config::OptimizerConfig), type,
                                [] { return std::make_unique<ConfigT>(); });
  optimizer_registry().add(
      type, [build](const config::Config& subsection, std::vector<NamedParameter> parameters,
                    SchedulePtr schedule, ClipOptions clip) {
        return build(static_cast<const ConfigT&>(subsection), std::move(parameters),
                     std::move(schedule), clip);
      });
}

// Model Garden's OptimizerFactory plus Task.create_optimizer: the optimizer
// and schedule the config names, over `parameters`. With `dp`, the batch
// gradients are clipped to global L2 norm dp->clipping_norm and then get
// Gaussian noise of stddev clipping_norm * noise_multiplier before every
// update. That is per-batch clipping, as Model Garden does it, not
// per-example DP-SGD: it carries no formal privacy guarantee. As in Keras,
// clipnorm/clipvalue/global_clipnorm cannot be combined with it. The
// optional `ema` is not built here: see ExponentialMovingAverage.
std::unique_ptr<Optimizer> make_optimizer(
    const config::OptimizationConfig& config, std::vector<NamedParameter> parameters,
    const std::optional<config::DifferentialPrivacyConfig>& dp = std::nullopt);

}  // namespace garden::optim
