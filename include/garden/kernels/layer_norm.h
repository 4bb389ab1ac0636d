// Layer normalization over the last dimension.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>

namespace garden::kernels {

// (x - mean) / sqrt(var + eps) * weight + bias with the biased variance, as
// at::layer_norm (weight and bias [C]; differentiable in all three). On the
// CPU in float and double, forward and backward are one pass per row
// (AVX-512, AVX2 or portable builds; the sums in double, the weight and bias
// gradients summed in the same order whatever the thread count); otherwise
// at::layer_norm. A bfloat16 input with float32 parameters on the CPU
// (autocast) is widened and the result is float32.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps);

// layer_norm for a tensor a residual sublayer uses twice: {y, skip}, where
// skip is x itself (kInput: pre-LN, x feeds the norm and the residual sum)
// or y itself (kOutput: post-LN, y feeds the next sublayer and its residual
// sum). Use skip for the second use. Where layer_norm's loops apply and a
// gradient is taken, one autograd node takes both gradients and adds them
// in its pass (kInput: skip's gradient into dx as it is written; kOutput:
// the two gradients of y before the normalization's backward), where
// autograd would add them in a pass and a tensor of their own; the same
// sums, so the same bits. skip is then a view LibTorch will not change in
// place. Otherwise {layer_norm(x), x or y}.
enum class LayerNormSkip { kInput, kOutput };
std::array<at::Tensor, 2> layer_norm_and_skip(const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& bias, double eps,
                                              LayerNormSkip skip);

}  // namespace garden::kernels
