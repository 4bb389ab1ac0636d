// GELU, alone or with a layer's bias.
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

// GELU, the exact (erf) form, x Phi(x). On the CPU in float32 with
// gradients, its backward is one pass (LibTorch 1.13's is several);
// bfloat16 is widened to float32 for it and the result rounded back;
// otherwise at::gelu. Not twice differentiable on that path.
at::Tensor gelu(const at::Tensor& x);
// gelu(x + bias), bias [C] over x's last dimension: the feed-forward layer's
// activation with its product's bias, so the product runs without it. On
// the CPU in float32 one pass forward (the erf form, x Phi(x), with erf to
// 1.5e-7 absolute, Abramowitz and Stegun 7.1.26) and one backward
// that also sums the bias gradient (in double, the same bits with any
// number of threads); otherwise gelu(x + bias). Not twice differentiable.
bool bias_gelu_applies(const at::Tensor& x, const at::Tensor& bias);
at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias);

}  // namespace garden::kernels
