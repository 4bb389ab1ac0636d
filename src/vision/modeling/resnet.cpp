#include "garden/vision/modeling/resnet.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "garden/base/error.h"
#include "garden/base/initializers.h"
#include "garden/kernels/batch_norm.h"
#include "garden/kernels/convolution.h"

namespace garden::vision {

namespace {

// Keras' VarianceScaling() (scale 1, fan_in, truncated normal): stddev
// sqrt(1 / fan_in) / 0.8796..., truncated at two stddevs.
void variance_scaling_(at::Tensor weight) {
  const int64_t fan_in = weight.numel() / weight.size(0);
  truncated_normal_(weight, std::sqrt(1.0 / static_cast<double>(fan_in)) / 0.87962566103423978);
}

torch::nn::BatchNorm2d batch_norm(const ResNetOptions& o, int64_t channels) {
  return torch::nn::BatchNorm2d(
      torch::nn::BatchNorm2dOptions(channels).momentum(1.0 - o.norm_momentum).eps(o.norm_epsilon));
}

at::Tensor activation(const std::string& name, const at::Tensor& x) {
  if (name == "relu") return at::relu(x);
  return x * at::sigmoid(x);  // swish
}

// activation(norm(x) + residual) (no residual where undefined; no
// activation where `activation` is empty). One process's training with a
// ReLU (or none) runs in kernels::batch_norm_act's fused passes where it
// applies; otherwise the modules' own operators (and the workers' sync
// batch norm).
at::Tensor norm_act(torch::nn::BatchNorm2dImpl& norm, const at::Tensor& x,
                    const at::Tensor& residual, const std::string& activation_name,
                    const ReplicasPtr& replicas) {
  const auto& o = norm.options;
  if (norm.is_training() && (!replicas || replicas->count() < 2) &&
      (activation_name.empty() || activation_name == "relu") && o.affine() &&
      o.track_running_stats() && o.momentum() &&
      kernels::batch_norm_act_applies(x, norm.weight, norm.bias, norm.running_mean,
                                      norm.running_var, residual)) {
    {
      torch::NoGradGuard no_grad;
      norm.num_batches_tracked.add_(1);
    }
    return kernels::batch_norm_act(x, norm.weight, norm.bias, norm.running_mean, norm.running_var,
                                   *o.momentum(), o.eps(), residual, !activation_name.empty());
  }
  at::Tensor y = sync_batch_norm(norm, x, replicas);
  if (residual.defined()) y = y + residual;
  return activation_name.empty() ? y : activation(activation_name, y);
}

// The output size of LibTorch's max_pool2d along one side.
int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode) {
  const int64_t span = size + 2 * padding - kernel;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= size + padding) --out;
  return out;
}

}  // namespace

at::Tensor max_pool_same(const at::Tensor& x, int64_t kernel, int64_t stride) {
  const auto [top, bottom] = same_padding(x.size(2), kernel, stride);
  const auto [left, right] = same_padding(x.size(3), kernel, stride);
  // TensorFlow's windows start `top` (`left`) cells before the image, as
  // LibTorch's do with that padding; where the far side pads one more,
  // ceil_mode adds the last window, cut at the image's edge, which is the
  // same maximum as over -inf padding. No padded copy, forward or backward.
  const bool ceil_mode = bottom > top || right > left;
  if (bottom - top <= 1 && right - left <= 1 && 2 * top <= kernel && 2 * left <= kernel &&
      pooled_size(x.size(2), kernel, stride, top, ceil_mode) == (x.size(2) + stride - 1) / stride &&
      pooled_size(x.size(3), kernel, stride, left, ceil_mode) == (x.size(3) + stride - 1) / stride)
    return at::max_pool2d(x, {kernel, kernel}, {stride, stride}, {top, left}, {1, 1}, ceil_mode);
  const at::Tensor padded =
      at::constant_pad_nd(x, {left, right, top, bottom}, -std::numeric_limits<double>::infinity());
  return at::max_pool2d(padded, {kernel, kernel}, {stride, stride});
}

namespace {

// Keras' AveragePooling2D(2, 2, 'same'): the padded cells are not counted.
at::Tensor avg_pool_same(const at::Tensor& x) {
  const auto [top, bottom] = same_padding(x.size(2), 2, 2);
  const auto [left, right] = same_padding(x.size(3), 2, 2);
  const at::Tensor padded = at::constant_pad_nd(x, {left, right, top, bottom}, 0.0);
  const at::Tensor ones = at::constant_pad_nd(at::ones({1, 1, x.size(2), x.size(3)}, x.options()),
                                              {left, right, top, bottom}, 0.0);
  return at::avg_pool2d(padded, {2, 2}, {2, 2}) / at::avg_pool2d(ones, {2, 2}, {2, 2});
}

int64_t scaled(int64_t filters, double multiplier) {
  return std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(filters) * multiplier));
}

}  // namespace

std::vector<ResNetGroupSpec> resnet_spec(int64_t model_id) {
  switch (model_id) {
    case 10:
      return {{false, 64, 1}, {false, 128, 1}, {false, 256, 1}, {false, 512, 1}};
    case 18:
      return {{false, 64, 2}, {false, 128, 2}, {false, 256, 2}, {false, 512, 2}};
    case 34:
      return {{false, 64, 3}, {false, 128, 4}, {false, 256, 6}, {false, 512, 3}};
    case 50:
      return {{true, 64, 3}, {true, 128, 4}, {true, 256, 6}, {true, 512, 3}};
    case 101:
      return {{true, 64, 3}, {true, 128, 4}, {true, 256, 23}, {true, 512, 3}};
    case 152:
      return {{true, 64, 3}, {true, 128, 8}, {true, 256, 36}, {true, 512, 3}};
    case 200:
      return {{true, 64, 3}, {true, 128, 24}, {true, 256, 36}, {true, 512, 3}};
    default:
      break;
  }
  throw Error("resnet model_id " + std::to_string(model_id) +
              " is not one of 10, 18, 34, 50, 101, 152, 200");
}

std::pair<int64_t, int64_t> same_padding(int64_t size, int64_t kernel, int64_t stride) {
  const int64_t remainder = size % stride;
  const int64_t total = std::max<int64_t>(kernel - (remainder == 0 ? stride : remainder), 0);
  return {total / 2, total - total / 2};
}

Conv2dSameImpl::Conv2dSameImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, bool bias)
    : kernel_(kernel), stride_(stride) {
  conv = register_module(
      "conv",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).bias(bias)));
  variance_scaling_(conv->weight);
  if (bias) {
    torch::NoGradGuard no_grad;
    conv->bias.zero_();
  }
}

at::Tensor Conv2dSameImpl::forward(const at::Tensor& x) {
  const auto [top, bottom] = same_padding(x.size(2), kernel_, stride_);
  const auto [left, right] = same_padding(x.size(3), kernel_, stride_);
  if (top == bottom && left == right && top == left) {
    // Symmetric: the convolution pads itself, without a copy; 3x3 layers at
    // stride 1 may run Winograd's algorithm (runtime.convolution_algorithm).
    return kernels::conv2d(x, conv->weight, conv->bias, stride_, top);
  }
  return conv->forward(at::constant_pad_nd(x, {left, right, top, bottom}, 0.0));
}

ResNetBlockImpl::ResNetBlockImpl(const ResNetOptions& o, bool bottleneck, int64_t in_filters,
                                 int64_t filters, int64_t stride, bool use_projection,
                                 double drop_rate)
    : options_(o),
      bottleneck_(bottleneck),
      stride_(stride),
      out_filters_(bottleneck ? 4 * filters : filters),
      drop_rate_(drop_rate) {
  if (use_projection) {
    // ResNet-D: average pooling does the striding, the 1x1 keeps stride 1.
    const int64_t shortcut_stride = o.resnetd_shortcut && stride > 1 ? 1 : stride;
    shortcut =
        register_module("shortcut", Conv2dSame(in_filters, out_filters_, 1, shortcut_stride));
    shortcut_norm = register_module("shortcut_norm", batch_norm(o, out_filters_));
  }
  const auto add = [&](int64_t in, int64_t out, int64_t kernel, int64_t s) {
    const std::string index = std::to_string(convs.size() + 1);
    convs.push_back(register_module("conv" + index, Conv2dSame(in, out, kernel, s)));
    norms.push_back(register_module("norm" + index, batch_norm(o, out)));
  };
  if (bottleneck) {
    add(in_filters, filters, 1, 1);
    add(filters, filters, 3, stride);
    add(filters, out_filters_, 1, 1);
  } else {
    add(in_filters, filters, 3, stride);
    add(filters, filters, 3, 1);
  }
  if (o.se_ratio > 0 && o.se_ratio <= 1) {
    const int64_t reduced =
        std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(out_filters_) * o.se_ratio));
    se_reduce = register_module(
        "se_reduce", torch::nn::Conv2d(torch::nn::Conv2dOptions(out_filters_, reduced, 1)));
    se_expand = register_module(
        "se_expand", torch::nn::Conv2d(torch::nn::Conv2dOptions(reduced, out_filters_, 1)));
    for (auto* conv : {&se_reduce, &se_expand}) {
      variance_scaling_((*conv)->weight);
      torch::NoGradGuard no_grad;
      (*conv)->bias.zero_();
    }
  }
}

at::Tensor ResNetBlockImpl::activate(const at::Tensor& x) const {
  return activation(options_.activation, x);
}

at::Tensor ResNetBlockImpl::forward(const at::Tensor& input) {
  at::Tensor residual = input;
  if (shortcut) {
    at::Tensor s = input;
    if (options_.resnetd_shortcut && stride_ > 1) s = avg_pool_same(s);
    residual = norm_act(*shortcut_norm, shortcut->forward(s), {}, "", options_.replicas);
  }
  // The last norm takes the residual and the activation itself where
  // nothing comes between them.
  const bool plain_end = !se_reduce && !(is_training() && drop_rate_ > 0);
  at::Tensor x = input;
  for (std::size_t i = 0; i < convs.size(); ++i) {
    const bool last = i + 1 == convs.size();
    if (last && plain_end)
      return norm_act(*norms[i], convs[i]->forward(x), residual, options_.activation,
                      options_.replicas);
    x = norm_act(*norms[i], convs[i]->forward(x), {}, last ? "" : options_.activation,
                 options_.replicas);
  }
  if (se_reduce) {
    at::Tensor squeeze = x.mean({2, 3}, /*keepdim=*/true);
    squeeze = activate(se_reduce->forward(squeeze));
    x = x * at::sigmoid(se_expand->forward(squeeze));
  }
  if (is_training() && drop_rate_ > 0) {
    // Stochastic depth: the whole residual branch dropped per example.
    const double keep = 1.0 - drop_rate_;
    const at::Tensor mask =
        at::empty({x.size(0), 1, 1, 1}, x.options()).bernoulli_(keep).div_(keep);
    x = x * mask;
  }
  return activate(x + residual);
}

ResNetImpl::ResNetImpl(const ResNetOptions& o) : options_(o) {
  const auto spec = resnet_spec(o.model_id);
  if (o.stem_type != "v0" && o.stem_type != "v1")
    throw Error("resnet stem_type '" + o.stem_type + "' is not one of v0, v1");
  if (o.activation != "relu" && o.activation != "swish")
    throw Error("resnet activation '" + o.activation + "' is not one of relu, swish");
  const double stem_multiplier = o.scale_stem ? o.depth_multiplier : 1.0;
  stem_convs = register_module("stem_convs", torch::nn::ModuleList());
  stem_norms = register_module("stem_norms", torch::nn::ModuleList());
  int64_t channels = 3;
  const auto stem = [&](int64_t out, int64_t kernel, int64_t stride) {
    stem_convs->push_back(Conv2dSame(channels, out, kernel, stride));
    stem_norms->push_back(batch_norm(o, out));
    channels = out;
  };
  if (o.stem_type == "v0") {
    stem(scaled(64, stem_multiplier), 7, 2);
  } else {
    stem(scaled(32, stem_multiplier), 3, 2);
    stem(scaled(32, stem_multiplier), 3, 1);
    stem(scaled(64, stem_multiplier), 3, 1);
  }
  if (o.replace_stem_max_pool) stem(scaled(64, o.depth_multiplier), 3, 2);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::size_t group = 0; group < spec.size(); ++group) {
    const auto& g = spec[group];
    const int64_t filters = scaled(g.filters, o.depth_multiplier);
    // Model Garden's get_stochastic_depth_rate(init_rate, i + 2, 5).
    const double drop = o.stochastic_depth_drop_rate * static_cast<double>(group + 2) / 5.0;
    const bool projection = g.bottleneck || group > 0 || o.use_first_projection;
    for (int64_t r = 0; r < g.repeats; ++r) {
      ResNetBlock block(o, g.bottleneck, channels, filters, r == 0 && group > 0 ? 2 : 1,
                        r == 0 && projection, drop);
      channels = block->out_filters();
      blocks->push_back(block);
    }
  }
  output_channels_ = channels;
}

at::Tensor ResNetImpl::activate(const at::Tensor& x) const {
  return activation(options_.activation, x);
}

at::Tensor ResNetImpl::forward(const at::Tensor& images) {
  if (images.dim() != 4 || images.size(1) != 3)
    throw Error("resnet: expects images [batch, 3, height, width], got " +
                std::to_string(images.dim()) + " dimensions");
  at::Tensor x = images;
  for (std::size_t i = 0; i < stem_convs->size(); ++i)
    x = norm_act(*stem_norms[i]->as<torch::nn::BatchNorm2d>(),
                 stem_convs[i]->as<Conv2dSame>()->forward(x), {}, options_.activation,
                 options_.replicas);
  if (!options_.replace_stem_max_pool) x = max_pool_same(x, 3, 2);
  for (const auto& block : *blocks) x = block->as<ResNetBlock>()->forward(x);
  return x;
}

ClassificationModelImpl::ClassificationModelImpl(const ClassificationModelOptions& o)
    : options_(o) {
  if (o.num_classes < 1)
    throw Error("classification model: num_classes must be at least 1, got " +
                std::to_string(o.num_classes));
  backbone = register_module("backbone", ResNet(o.backbone));
  const int64_t width = backbone->output_channels();
  if (o.add_head_batch_norm)
    head_norm = register_module("head_norm",
                                torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(width)
                                                           .momentum(1.0 - o.backbone.norm_momentum)
                                                           .eps(o.backbone.norm_epsilon)));
  head = register_module("head", torch::nn::Linear(width, o.num_classes));
  torch::NoGradGuard no_grad;
  if (o.kernel_initializer == "random_uniform") {
    head->weight.uniform_(-0.05, 0.05);  // Keras' RandomUniform()
  } else if (o.kernel_initializer == "VarianceScaling") {
    variance_scaling_(head->weight);
  } else {
    throw Error("classification model: kernel_initializer '" + o.kernel_initializer +
                "' is not one of random_uniform, VarianceScaling");
  }
  head->bias.zero_();
}

at::Tensor ClassificationModelImpl::forward(const at::Tensor& images) {
  at::Tensor x = backbone->forward(images).mean({2, 3});
  if (head_norm) x = sync_batch_norm(*head_norm, x, options_.backbone.replicas);
  if (options_.dropout_rate > 0) x = at::dropout(x, options_.dropout_rate, is_training());
  return head->forward(x);
}

void ClassificationModelImpl::to_channels_last() {
  torch::NoGradGuard no_grad;
  for (auto& parameter : parameters())
    if (parameter.dim() == 4)
      parameter.set_data(parameter.contiguous(at::MemoryFormat::ChannelsLast));
}

at::Tensor ClassificationModelImpl::l2_loss(double weight_decay) {
  at::Tensor total;
  for (const auto& item : named_parameters()) {
    // Kernels only (Model Garden regularizes kernels, not biases or norms).
    if (item.value().dim() < 2) continue;
    const at::Tensor term = item.value().pow(2).sum();
    total = total.defined() ? total + term : term;
  }
  return total * (weight_decay / 2.0);
}

}  // namespace garden::vision
