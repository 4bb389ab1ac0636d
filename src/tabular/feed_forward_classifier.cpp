#include "garden/tabular/feed_forward_classifier.h"

#include <torch/torch.h>

namespace garden::tabular {

FeedForwardClassifierImpl::FeedForwardClassifierImpl(const FeedForwardConfig& config,
                                                     const TableSchema& schema)
    : activation_(config.activation), dropout_rate_(config.dropout_rate) {
  const auto width = static_cast<int64_t>(schema.feature_columns.size());
  mean_ =
      register_buffer("feature_mean", torch::tensor(schema.mean, torch::kDouble).to(torch::kFloat));
  stddev_ = register_buffer("feature_stddev",
                            torch::tensor(schema.stddev, torch::kDouble).to(torch::kFloat));
  int64_t in = width;
  std::vector<int64_t> sizes = config.hidden_layer_sizes;
  sizes.push_back(static_cast<int64_t>(schema.classes.size()));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    layers_.push_back(
        register_module("dense_" + std::to_string(i), torch::nn::Linear(in, sizes[i])));
    in = sizes[i];
  }
}

at::Tensor FeedForwardClassifierImpl::forward(const at::Tensor& features) {
  at::Tensor x = (features - mean_) / stddev_;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    x = layers_[i]->forward(x);
    if (i + 1 == layers_.size()) break;
    if (activation_ == "relu")
      x = torch::relu(x);
    else if (activation_ == "gelu")
      x = torch::gelu(x);
    else
      x = torch::tanh(x);
    if (dropout_rate_ > 0) x = torch::dropout(x, dropout_rate_, is_training());
  }
  return x;
}

}  // namespace garden::tabular
