// The model of task `tabular/classification`: a feed-forward network over
// features standardized with what the task learned from the training data.
#pragma once

#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "garden/tabular/classification_config.h"

namespace garden::tabular {

// What the task learns from the training data and saves with the model.
struct TableSchema {
  std::vector<std::string> feature_columns;
  std::vector<std::string> classes;  // sorted; a label's index is its class id
  std::vector<double> mean;          // per feature, from the training rows
  std::vector<double> stddev;
};

// A feed-forward classifier that standardizes its inputs with buffers
// (feature_mean, feature_stddev), so the saved model needs nothing else.
class FeedForwardClassifierImpl : public torch::nn::Module {
 public:
  FeedForwardClassifierImpl(const FeedForwardConfig& config, const TableSchema& schema);
  at::Tensor forward(const at::Tensor& features);

 private:
  at::Tensor mean_, stddev_;
  std::vector<torch::nn::Linear> layers_;
  std::string activation_;
  double dropout_rate_;
};
TORCH_MODULE(FeedForwardClassifier);

}  // namespace garden::tabular
