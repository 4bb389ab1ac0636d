// Model Garden's ResNet backbone (official/vision/modeling/backbones/
// resnet.py, its blocks from layers/nn_blocks.py) and ClassificationModel
// (modeling/classification_model.py), in LibTorch. Tensors are [B, C, H, W];
// convolutions pad as TensorFlow's 'same' (more at the bottom and right when
// the total is odd), so a stride-2 layer sees the pixels Model Garden's does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "garden/vision/modeling/sync_batch_norm.h"

namespace garden::vision {

struct ResNetOptions {
  int64_t model_id = 50;  // 10, 18, 34 (basic blocks), 50, 101, 152, 200 (bottleneck)
  double depth_multiplier = 1.0;
  std::string stem_type = "v0";  // v0: 7x7/2; v1: three 3x3 (ResNet-D's stem)
  bool resnetd_shortcut = false;
  bool replace_stem_max_pool = false;
  double se_ratio = 0.0;  // 0: no squeeze-and-excitation
  double stochastic_depth_drop_rate = 0.0;  // init_stochastic_depth_rate
  bool scale_stem = true;
  bool use_first_projection = true;
  std::string activation = "relu";  // relu, swish
  double norm_momentum = 0.99;  // Keras' momentum: moving = m * moving + (1 - m) * batch
  double norm_epsilon = 0.001;
  // Batch norms over these replicas in training (use_sync_bn); null: each
  // batch alone.
  ReplicasPtr replicas;
};

// The blocks of each group: {bottleneck?, filters, repeats}.
struct ResNetGroupSpec {
  bool bottleneck;
  int64_t filters;
  int64_t repeats;
};
// Model Garden's RESNET_SPECS; throws naming the supported ids.
std::vector<ResNetGroupSpec> resnet_spec(int64_t model_id);

// A convolution without bias padded as TensorFlow's 'same'.
class Conv2dSameImpl : public torch::nn::Module {
 public:
  Conv2dSameImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, bool bias = false);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv{nullptr};

 private:
  int64_t kernel_, stride_;
};
TORCH_MODULE(Conv2dSame);

// TensorFlow's 'same' padding for one dimension: (before, after).
std::pair<int64_t, int64_t> same_padding(int64_t size, int64_t kernel, int64_t stride);

// Max pooling with TensorFlow's 'same' padding (the padded cells count as
// -inf): a kernel x kernel window every `stride` cells, ceil(size / stride)
// outputs per side.
at::Tensor max_pool_same(const at::Tensor& x, int64_t kernel, int64_t stride);

// A residual block (ResidualBlock, two 3x3) or a bottleneck (1x1, 3x3 with
// the stride, 1x1 to 4x the filters), each with its shortcut.
class ResNetBlockImpl : public torch::nn::Module {
 public:
  ResNetBlockImpl(const ResNetOptions& options, bool bottleneck, int64_t in_filters,
                  int64_t filters, int64_t stride, bool use_projection, double drop_rate);
  at::Tensor forward(const at::Tensor& x);
  int64_t out_filters() const { return out_filters_; }

 private:
  at::Tensor activate(const at::Tensor& x) const;
  ResNetOptions options_;
  bool bottleneck_;
  int64_t stride_, out_filters_;
  double drop_rate_;
  Conv2dSame shortcut{nullptr};
  torch::nn::BatchNorm2d shortcut_norm{nullptr};
  std::vector<Conv2dSame> convs;
  std::vector<torch::nn::BatchNorm2d> norms;
  torch::nn::Conv2d se_reduce{nullptr}, se_expand{nullptr};
};
TORCH_MODULE(ResNetBlock);

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  // The last endpoint (level 5): [B, 4 or 1 x 512 x multiplier, H/32, W/32].
  at::Tensor forward(const at::Tensor& images);
  int64_t output_channels() const { return output_channels_; }
  const ResNetOptions& options() const { return options_; }

 private:
  at::Tensor activate(const at::Tensor& x) const;
  ResNetOptions options_;
  torch::nn::ModuleList stem_convs, stem_norms;
  torch::nn::ModuleList blocks;
  int64_t output_channels_ = 0;
};
TORCH_MODULE(ResNet);

struct ClassificationModelOptions {
  ResNetOptions backbone;
  int64_t num_classes = 0;
  double dropout_rate = 0.0;
  bool add_head_batch_norm = false;
  std::string kernel_initializer = "random_uniform";  // of the dense head
};

// Backbone, global average pooling, optional batch norm, dropout, dense.
class ClassificationModelImpl : public torch::nn::Module {
 public:
  explicit ClassificationModelImpl(const ClassificationModelOptions& options);
  at::Tensor forward(const at::Tensor& images);  // logits [B, num_classes]
  // The L2 term Model Garden's kernel_regularizer adds: (weight_decay / 2)
  // x the squared sum of every convolution and dense kernel.
  at::Tensor l2_loss(double weight_decay);
  // Every 4-D weight in channels-last order (NHWC in memory): with images in
  // that order too, oneDNN's convolutions skip their reorders.
  void to_channels_last();
  ResNet backbone{nullptr};
  torch::nn::BatchNorm1d head_norm{nullptr};
  torch::nn::Linear head{nullptr};
  const ClassificationModelOptions& options() const { return options_; }

 private:
  ClassificationModelOptions options_;
};
TORCH_MODULE(ClassificationModel);

}  // namespace garden::vision
