// The end of a Transformer sublayer: residual + dropout(y + bias).
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

// residual + dropout(y + bias, p) (bias [C] over y's last dimension, or
// undefined; dropout only in training): the end of a Transformer sublayer,
// whose output projection then runs without its bias. Where it applies (a
// bias, float32 CPU tensors) one pass forward, with the mask dropout()
// would draw for y + bias and the same products, and one pass backward that
// also sums the bias gradient (in double, the same bits with any number of
// threads); otherwise the separate operations. Not twice differentiable.
bool bias_dropout_add_applies(const at::Tensor& y, const at::Tensor& bias,
                              const at::Tensor& residual);
at::Tensor bias_dropout_add(const at::Tensor& y, const at::Tensor& bias, const at::Tensor& residual,
                            double p, bool training);

}  // namespace garden::kernels
