// Inverted dropout, alone or fused with ReLU and a layer's bias.
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

// Inverted dropout as every layer applies it: in training, each element is
// zeroed with probability p and the others are scaled by 1 / (1 - p); the
// identity otherwise. On the CPU (float, double, bfloat16 computed in float
// and rounded once) the mask comes from a counter-based generator seeded by
// one draw from LibTorch's default CPU generator: torch::manual_seed
// reproduces it, whatever the thread count.
at::Tensor dropout(const at::Tensor& x, double p, bool training);
// dropout(relu(x)) in one pass.
at::Tensor relu_dropout(const at::Tensor& x, double p, bool training);
// relu_dropout(y + bias) (bias [C] over y's last dimension, or undefined):
// a ReLU feed-forward layer's activation with its product's bias, so the
// product runs without it. In training with 0 < p < 1 on float32 CPU
// tensors with a bias, one pass forward (the mask and values relu_dropout
// gives y + bias, to the bit) and one backward that also sums the bias
// gradient (in double, the same bits with any number of threads);
// otherwise relu_dropout(y + bias). Not twice differentiable.
at::Tensor bias_relu_dropout(const at::Tensor& y, const at::Tensor& bias, double p, bool training);

}  // namespace garden::kernels
