// TensorFX's models (tensorfx.models.nn) and the registry `garden fx train
// --model NAME` and prediction find them by.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include "garden/fx/training.h"

namespace garden::fx {

// FeedForwardClassificationArguments: the standard arguments plus
// --learning-rate (0.01) and --hidden-layers:N units (none: softmax
// regression). Every hidden layer is relu; the optimizer is gradient descent.
class FeedForwardClassificationArguments : public ModelArguments {
 public:
  double learning_rate = 0.01;
  // As given (--hidden-layers:N), then by process(): (name, units, activation).
  std::vector<std::optional<int64_t>> hidden_layer_units;
  struct Layer {
    std::string name;
    int64_t units;
    std::string activation;
  };
  std::vector<Layer> hidden_layers;

  void init_parser(ArgumentParser& parser) override;
  void process() override;
};

// StringLabelClassification + FeedForwardClassification: the feature named X
// (numeric, [rows, width]) through the hidden layers to one logit per label;
// the labels are the target feature Y's metadata entries, in their order.
// Loss: mean softmax cross-entropy; outputs: scores (softmax) and label;
// metric: accuracy of the label against Y.
class FeedForwardClassification : public ModelBuilder {
 public:
  explicit FeedForwardClassification(std::shared_ptr<ModelArguments> args);

  void build_init() override;
  Values build_inference(const Transformed& inputs, bool training) override;
  at::Tensor build_training(int64_t global_steps, const Transformed& inputs,
                            const Values& inferences) override;
  Values build_output(const Transformed& inputs, const Values& inferences) override;
  EvaluationValue build_evaluation(const Transformed& inputs, const Values& outputs) override;
  config::OptimizationConfig build_optimizer_config() override;
  torch::nn::Module& module() override { return *module_; }
  std::string model_name() const override { return "feedforward_classification"; }

  const std::vector<std::string>& labels() const { return labels_; }

 private:
  const FeedForwardClassificationArguments& ff_args() const;
  at::Tensor label_indices(const Transformed& inputs) const;

  std::shared_ptr<torch::nn::Module> module_;
  std::vector<torch::nn::Linear> layers_;  // hidden layers, then the logits
  std::vector<std::string> labels_;
};

// A model type `garden fx train --model NAME` can build: its arguments and
// its builder.
struct ModelType {
  std::function<std::shared_ptr<ModelArguments>(const std::vector<std::string>& args)> parse;
  std::function<std::unique_ptr<ModelBuilder>(std::shared_ptr<ModelArguments>)> build;
};
// Registers a model type (first thing in main, from your own project).
void register_model(const std::string& name, ModelType type);
// The type, or throws naming the registered ones.
const ModelType& model_type(const std::string& name);
std::vector<std::string> model_names();

}  // namespace garden::fx
