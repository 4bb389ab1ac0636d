// Model Garden's `official/modeling/optimization/configs`: the optimizer,
// learning-rate and warmup one-of configs, same names and defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "garden/core/config/config.h"

namespace garden::config {

// Fields every Keras optimizer has.
struct BaseOptimizerConfig : Config {
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  void visit(Visitor& v) override;
};

struct SGDConfig : BaseOptimizerConfig {
  std::string name = "SGD";
  double decay = 0.0;
  bool nesterov = false;
  double momentum = 0.0;
  void visit(Visitor& v) override;
};

struct AdamConfig : BaseOptimizerConfig {
  std::string name = "Adam";
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-07;
  bool amsgrad = false;
  void visit(Visitor& v) override;
};

// Model Garden's AdamWeightDecay (decoupled weight decay, BERT's optimizer).
struct AdamWeightDecayConfig : BaseOptimizerConfig {
  std::string name = "AdamWeightDecay";
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-07;
  bool amsgrad = false;
  double weight_decay_rate = 0.0;
  std::optional<std::vector<std::string>> include_in_weight_decay;
  std::optional<std::vector<std::string>> exclude_from_weight_decay;
  double gradient_clip_norm = 1.0;
  void visit(Visitor& v) override;
};

struct OptimizerConfig : OneOfConfig {
  SGDConfig sgd;
  AdamConfig adam;
  AdamWeightDecayConfig adamw;
  void visit(Visitor& v) override;
};

struct ConstantLrConfig : Config {
  std::string name = "Constant";
  double learning_rate = 0.1;
  void visit(Visitor& v) override;
};

struct StepwiseLrConfig : Config {
  std::string name = "PiecewiseConstantDecay";
  std::optional<std::vector<int64_t>> boundaries;
  std::optional<std::vector<double>> values;
  int64_t offset = 0;
  void visit(Visitor& v) override;
  void validate() const override;
};

struct ExponentialLrConfig : Config {
  std::string name = "ExponentialDecay";
  std::optional<double> initial_learning_rate;
  std::optional<int64_t> decay_steps;
  std::optional<double> decay_rate;
  std::optional<bool> staircase;
  int64_t offset = 0;
  void visit(Visitor& v) override;
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
};

struct CosineLrConfig : Config {
  std::string name = "CosineDecay";
  std::optional<double> initial_learning_rate;
  std::optional<int64_t> decay_steps;
  double alpha = 0.0;
  int64_t offset = 0;
  void visit(Visitor& v) override;
};

struct LrConfig : OneOfConfig {
  ConstantLrConfig constant;
  StepwiseLrConfig stepwise;
  ExponentialLrConfig exponential;
  PolynomialLrConfig polynomial;
  CosineLrConfig cosine;
  void visit(Visitor& v) override;
};

struct LinearWarmupConfig : Config {
  std::string name = "linear";
  double warmup_learning_rate = 0.0;
  std::optional<int64_t> warmup_steps;
  void visit(Visitor& v) override;
};

struct PolynomialWarmupConfig : Config {
  std::string name = "polynomial";
  double power = 1.0;
  std::optional<int64_t> warmup_steps;
  void visit(Visitor& v) override;
};

struct WarmupConfig : OneOfConfig {
  LinearWarmupConfig linear;
  PolynomialWarmupConfig polynomial;
  void visit(Visitor& v) override;
};

struct OptimizationConfig : Config {
  OptimizerConfig optimizer;
  LrConfig learning_rate;
  WarmupConfig warmup;
  void visit(Visitor& v) override;
};

}  // namespace garden::config
