// Batch normalization in training, with the residual addition and the ReLU
// that follow it in a ResNet fused into the same passes over memory.
//
// LibTorch runs relu(batch_norm(x) + residual) as three operators: the
// statistics and the normalization read x three times and write once, the
// addition and the ReLU each read and write again, and their backward
// passes do as much. Here the forward pass reads x twice (its statistics,
// then the output) and writes once. The backward pass makes the ReLU's mask
// again from x (and the residual) instead of keeping the output: without a
// residual it reads the gradient and x twice and writes only x's gradient;
// with one it writes the masked gradient (the residual's) once and reads
// it back. On ResNet-18's training step this is about 3 % faster than
// LibTorch's operators (docs/tasks/image_classification.md).
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

// Whether batch_norm_act runs these operands: a float32 CPU batch
// [N, C, H, W] in channels-last memory with at least two values per
// channel, outside autocast, and a residual (if defined) of x's sizes,
// dtype and memory format; float32 [C] weight, bias and running statistics.
bool batch_norm_act_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& running_mean, const at::Tensor& running_var,
                            const at::Tensor& residual);

// y = batch_norm(x) (+ residual) (then max(y, 0) if relu), in training:
// the mean and biased variance of each channel over the batch normalize x,
// then weight and bias scale and shift it, as LibTorch's batch_norm in
// training; running_mean and running_var move towards the batch's mean and
// unbiased variance by `momentum` (LibTorch's convention: new = (1 -
// momentum) old + momentum batch). Differentiable in x, weight, bias and
// residual. The sums are taken in double in a fixed number of row blocks,
// so reruns agree bitwise whatever the thread count. Operands
// batch_norm_act_applies refuses: std::invalid_argument.
at::Tensor batch_norm_act(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& running_mean, const at::Tensor& running_var,
                          double momentum, double eps, const at::Tensor& residual, bool relu);

}  // namespace garden::kernels
