// A TensorFX model of your own: a classifier with one optional hidden layer,
// dropout, an L2 penalty and Adam, written as a garden::fx::ModelBuilder.
#pragma once

#include <memory>
#include <string>

#include <garden/fx/training.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

namespace example {

// The standard TensorFX arguments plus this model's own.
class RegularizedClassificationArguments : public garden::fx::ModelArguments {
 public:
  double learning_rate = 0.01;
  int64_t hidden_units = 0;  // 0: no hidden layer (softmax regression)
  double dropout = 0.0;
  double l2 = 0.0;

  void init_parser(garden::fx::ArgumentParser& parser) override;
  void process() override;
};

// Reads the feature named X (numeric) and predicts the discrete target Y,
// whose metadata entries are the labels.
class RegularizedClassification : public garden::fx::ModelBuilder {
 public:
  explicit RegularizedClassification(std::shared_ptr<garden::fx::ModelArguments> args);

  void build_init() override;
  garden::fx::Values build_inference(const garden::fx::Transformed& inputs, bool training) override;
  at::Tensor build_training(int64_t global_steps, const garden::fx::Transformed& inputs,
                            const garden::fx::Values& inferences) override;
  garden::fx::Values build_output(const garden::fx::Transformed& inputs,
                                  const garden::fx::Values& inferences) override;
  garden::fx::EvaluationValue build_evaluation(const garden::fx::Transformed& inputs,
                                               const garden::fx::Values& outputs) override;
  garden::config::OptimizationConfig build_optimizer_config() override;
  torch::nn::Module& module() override { return *module_; }
  // The name `my_fx fx train --model` and prediction find it by.
  std::string model_name() const override { return "regularized_classification"; }

 private:
  const RegularizedClassificationArguments& my_args() const;
  at::Tensor targets(const garden::fx::Transformed& inputs) const;

  std::shared_ptr<torch::nn::Module> module_;
  torch::nn::Linear hidden_{nullptr}, logits_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  std::vector<std::string> labels_;
};

// Registers the model with garden::fx::register_model.
void register_regularized_classification();

}  // namespace example
