// bfloat16 on the CPU, what LibTorch's CPU autocast returns from products,
// widened to float32 for Garden's float kernels: attention, GELU, layer
// norm, the loss and ELECTRA's sampling take it this way (one cast each; a
// gradient through the cast returns in bfloat16). Anything else is returned
// as it is.
#pragma once

#include <ATen/ATen.h>

namespace garden::kernels {

inline bool is_cpu_bfloat16(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kBFloat16;
}

inline at::Tensor widened_on_cpu(const at::Tensor& t) {
  return is_cpu_bfloat16(t) ? t.to(at::kFloat) : t;
}

}  // namespace garden::kernels
