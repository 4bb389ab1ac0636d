// Model Garden's `official/modeling/optimization/configs`: the optimizer,
// learning-rate and warmup one-of configs, same names and defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "garden/config/config.h"

namespace garden::config {

// Fields every Keras optimizer has.
struct BaseOptimizerConfig : Config {
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  void visit(Visitor& v) override;
  void validate() const override;
};

struct SGDConfig : BaseOptimizerConfig {
  std::string name = "SGD";
  double decay = 0.0;
  bool nesterov = false;
  double momentum = 0.0;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct AdamConfig : BaseOptimizerConfig {
  std::string name = "Adam";
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-07;
  bool amsgrad = false;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// Model Garden's AdamWeightDecay (decoupled weight decay, BERT's optimizer).
// Adam's keys and defaults, plus the decay and clipping keys.
struct AdamWeightDecayConfig : AdamConfig {
  AdamWeightDecayConfig() { name = "AdamWeightDecay"; }
  double weight_decay_rate = 0.0;
  std::optional<std::vector<std::string>> include_in_weight_decay;
  std::optional<std::vector<std::string>> exclude_from_weight_decay;
  double gradient_clip_norm = 1.0;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// Layer-wise Adaptive Moments (Model Garden's lamb.py, formerly tfa's LAMB).
struct LAMBConfig : BaseOptimizerConfig {
  std::string name = "LAMB";
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-6;
  double weight_decay_rate = 0.0;
  std::optional<std::vector<std::string>> exclude_from_weight_decay;
  // When unset (or empty) it falls back to exclude_from_weight_decay.
  std::optional<std::vector<std::string>> exclude_from_layer_adaptation;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct RMSPropConfig : BaseOptimizerConfig {
  std::string name = "RMSprop";
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct AdagradConfig : BaseOptimizerConfig {
  std::string name = "Adagrad";
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-07;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// Model Garden's EMAConfig. It derives from BaseOptimizerConfig there too
// (the EMA is a Keras optimizer wrapper), so it carries clipnorm, clipvalue
// and global_clipnorm; they are accepted for key compatibility and have no
// effect, as in Model Garden, where the wrapped optimizer does the update.
struct EMAConfig : BaseOptimizerConfig {
  std::string name = "ExponentialMovingAverage";
  bool trainable_weights_only = true;
  double average_decay = 0.99;
  int64_t start_step = 0;
  bool dynamic_decay = true;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct OptimizerConfig : OneOfConfig {
  SGDConfig sgd;
  AdamConfig adam;
  AdamWeightDecayConfig adamw;
  LAMBConfig lamb;
  RMSPropConfig rmsprop;
  AdagradConfig adagrad;
  void visit(Visitor& v) override;
};

struct ConstantLrConfig : Config {
  std::string name = "Constant";
  double learning_rate = 0.1;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct StepwiseLrConfig : Config {
  std::string name = "PiecewiseConstantDecay";
  std::optional<std::vector<int64_t>> boundaries;
  std::optional<std::vector<double>> values;
  int64_t offset = 0;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct ExponentialLrConfig : Config {
  std::string name = "ExponentialDecay";
  std::optional<double> initial_learning_rate;
  std::optional<int64_t> decay_steps;
  std::optional<double> decay_rate;
  std::optional<bool> staircase;
  int64_t offset = 0;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct PolynomialLrConfig : Config {
  std::string name = "PolynomialDecay";
  std::optional<double> initial_learning_rate;
  std::optional<int64_t> decay_steps;
  double end_learning_rate = 0.0001;
  double power = 1.0;
  bool cycle = false;
  int64_t offset = 0;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct CosineLrConfig : Config {
  std::string name = "CosineDecay";
  std::optional<double> initial_learning_rate;
  std::optional<int64_t> decay_steps;
  double alpha = 0.0;
  int64_t offset = 0;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// lr * max(step, 1)^power (Model Garden's DirectPowerDecay; no offset).
struct DirectPowerLrConfig : Config {
  std::string name = "DirectPowerDecay";
  std::optional<double> initial_learning_rate;
  double power = -0.5;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// lr * max(s, 1)^power, times a linear ramp to zero over the last
// linear_decay_fraction of total_decay_steps; s = step - offset.
struct PowerAndLinearDecayLrConfig : Config {
  std::string name = "PowerAndLinearDecay";
  std::optional<double> initial_learning_rate;
  std::optional<int64_t> total_decay_steps;
  double power = -0.5;
  double linear_decay_fraction = 0.1;
  int64_t offset = 0;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// pre_offset_learning_rate until step > offset, then
// lr * max(step - offset, 1)^power, capped at pre_offset_learning_rate.
struct PowerDecayWithOffsetLrConfig : Config {
  std::string name = "PowerDecayWithOffset";
  std::optional<double> initial_learning_rate;
  double power = -0.5;
  int64_t offset = 0;
  double pre_offset_learning_rate = 1.0e6;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct LrConfig : OneOfConfig {
  ConstantLrConfig constant;
  StepwiseLrConfig stepwise;
  ExponentialLrConfig exponential;
  PolynomialLrConfig polynomial;
  CosineLrConfig cosine;
  DirectPowerLrConfig power;
  PowerAndLinearDecayLrConfig power_linear;
  PowerDecayWithOffsetLrConfig power_with_offset;
  void visit(Visitor& v) override;
  void validate() const override;
};

struct LinearWarmupConfig : Config {
  std::string name = "linear";
  double warmup_learning_rate = 0.0;
  std::optional<int64_t> warmup_steps;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct PolynomialWarmupConfig : Config {
  std::string name = "polynomial";
  double power = 1.0;
  std::optional<int64_t> warmup_steps;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

struct WarmupConfig : OneOfConfig {
  LinearWarmupConfig linear;
  PolynomialWarmupConfig polynomial;
  void visit(Visitor& v) override;
  void validate() const override;
};

struct OptimizationConfig : Config {
  OptimizerConfig optimizer;
  // Set: keep an exponential moving average of the weights
  // (garden::optim::ExponentialMovingAverage, driven by the trainer).
  std::optional<EMAConfig> ema;
  LrConfig learning_rate;
  WarmupConfig warmup;
  void visit(Visitor& v) override;
};

}  // namespace garden::config
