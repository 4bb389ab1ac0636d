// A dense layer's product, x W^T + b, on Garden's GEMM.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace garden::kernels {

// x W^T + b as at::linear (x [..., K], weight [N, K], bias [N] or undefined;
// differentiable in all three, not twice). Where linear_applies (float32
// strided CPU tensors, a contiguous weight and bias, no autocast, and
// Garden's GEMM is oneDNN: kernels/gemm.h), the products of the forward and
// the backward go to that GEMM; otherwise at::linear. Inside a
// FrozenWeights scope (below), a few rows without gradients go to Garden's
// own loops on held weights, whatever the GEMM, for the same float32
// tensors.
bool linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Keeps the transposed weights that FrozenWeights scopes make, on any
// thread, until it ends, without changing this thread's products: for a
// process that only decodes one model (garden translate, a server's model),
// whose searches each open a FrozenWeights. No weight may change while it
// lives except through LibTorch's operations (which count versions).
class KeepHeldWeights {
 public:
  KeepHeldWeights();
  ~KeepHeldWeights();
  KeepHeldWeights(const KeepHeldWeights&) = delete;
  KeepHeldWeights& operator=(const KeepHeldWeights&) = delete;
};

// A promise that no weight of any linear() call on this thread changes
// while this object lives: a decoder's search opens one. Then linear() on
// this thread takes products of up to 256 rows without gradients through
// Garden's own loops, on each weight laid out transposed once and kept (as
// large as the weights) while any scope or KeepHeldWeights lives; a copy is
// made again when its weight's storage, sizes or version counter change
// (a raw write to a weight's memory is not seen). Each sum is the
// multiply-adds in order over K; oneDNN may split a long K or take a few
// rows its own way, so the bits can differ in the last place from the
// products outside a scope.
class FrozenWeights {
 public:
  FrozenWeights();
  ~FrozenWeights();
  FrozenWeights(const FrozenWeights&) = delete;
  FrozenWeights& operator=(const FrozenWeights&) = delete;

 private:
  KeepHeldWeights keep_;
};

// How many transposed weights are kept now (for the tests).
int64_t held_weight_count();

// Whether linear transposes an operand first for the products oneDNN's
// sgemm runs faster so (a narrowing or square layer's forward, a widening
// layer's weight gradient; linear.cpp): on by default. For bench/linear_bench
// and the tests, which compare the two layouts in one process.
void set_linear_transposes(bool on);
bool linear_transposes();

}  // namespace garden::kernels
