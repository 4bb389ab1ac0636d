// A dense layer's product, x W^T + b, on Garden's GEMM.
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

// x W^T + b as at::linear (x [..., K], weight [N, K], bias [N] or undefined;
// differentiable in all three, not twice). Where linear_applies (float32
// strided CPU tensors, a contiguous weight and bias, no autocast, and
// Garden's GEMM is oneDNN: kernels/gemm.h), the products of the forward and
// the backward go to that GEMM; otherwise at::linear.
bool linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Whether linear transposes an operand first for the products oneDNN's
// sgemm runs faster so (a narrowing or square layer's forward, a widening
// layer's weight gradient; linear.cpp): on by default. For bench/linear_bench
// and the tests, which compare the two layouts in one process.
void set_linear_transposes(bool on);
bool linear_transposes();

}  // namespace garden::kernels
