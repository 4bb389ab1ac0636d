// The bias gradients of the fused bias kernels (bias_gelu in kernels.cpp,
// bias_dropout_add in bias_dropout_add.cpp): each block of kBiasBlock rows
// sums its columns in double into its own row of `partial` [blocks, width];
// the rows are then added in block order and rounded once to float, so the
// bits do not depend on the thread count.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace garden::kernels {

constexpr int64_t kBiasBlock = 64;

// partial [blocks, width] (double) -> the float32 gradient [width] in `options`.
inline at::Tensor bias_sums_in_block_order(const at::Tensor& partial,
                                           const at::TensorOptions& options) {
  const int64_t blocks = partial.size(0), width = partial.size(1);
  const double* pp = partial.data_ptr<double>();
  std::vector<double> sums(static_cast<std::size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t c = 0; c < width; ++c) sums[static_cast<std::size_t>(c)] += pp[b * width + c];
  at::Tensor grad_bias = at::empty({width}, options);
  float* pgb = grad_bias.data_ptr<float>();
  for (int64_t c = 0; c < width; ++c)
    pgb[c] = static_cast<float>(sums[static_cast<std::size_t>(c)]);
  return grad_bias;
}

}  // namespace garden::kernels
