// 2-D convolution, with Winograd's algorithm on the CPU where it pays.
//
// LibTorch runs a float32 CPU convolution on oneDNN's direct algorithm.
// For 3x3 kernels at stride 1 oneDNN also has Winograd's F(4x4, 3x3) (on
// AVX-512 CPUs), which does about a quarter of the multiplications: on a
// training batch of ResNet-18's 3x3 layers it runs forward and backward in
// 0.5 to 0.75 of the direct algorithm's time (docs/tasks/image_classification.md).
// LibTorch never asks for it, so Garden calls oneDNN for those layers itself,
// through the oneDNN library LibTorch loaded (Debian's links libdnnl as a
// shared library), like cuDNN's autotuner on a GPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace garden::kernels {

// runtime.convolution_algorithm: kAuto lets oneDNN choose between Winograd
// and direct for each eligible layer (it takes Winograd for training
// batches, direct for a few images); kWinograd takes Winograd for every
// eligible layer; kDirect leaves every convolution to LibTorch.
enum class ConvolutionAlgorithm { kAuto, kDirect, kWinograd };

// Process-wide; apply_runtime sets it from runtime.convolution_algorithm.
void set_convolution_algorithm(ConvolutionAlgorithm algorithm);
ConvolutionAlgorithm convolution_algorithm();
// "auto", "direct", "winograd" and back; std::invalid_argument otherwise.
ConvolutionAlgorithm parse_convolution_algorithm(const std::string& name);

// "" where Winograd convolutions can run in this process; otherwise why not
// (no oneDNN 2.x loaded as a shared library, Garden built without oneDNN's
// headers, or a CPU oneDNN has no Winograd for).
const std::string& winograd_unavailable_reason();

// at::conv2d(x, weight, bias, stride, padding) with symmetric padding. A
// float32 CPU convolution with a 3x3 kernel, stride 1 and padding 1, outside
// autocast, goes to oneDNN's Winograd algorithm as convolution_algorithm()
// says (forward, and backward for x and weight); everything else to
// at::conv2d. The output has x's memory format. Winograd's results differ
// from the direct algorithm's by rounding (relative 1e-6 to 1e-5).
at::Tensor conv2d(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                  int64_t stride, int64_t padding);

// Whether conv2d sends a convolution of these operands to Winograd under
// `algorithm` (kAuto asks oneDNN, which decides by shape).
bool conv2d_uses_winograd(const at::Tensor& x, const at::Tensor& weight, int64_t stride,
                          int64_t padding, ConvolutionAlgorithm algorithm);

}  // namespace garden::kernels
