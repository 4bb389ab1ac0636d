// The one place that knows which LibTorch Garden is built against: Debian's
// 1.13 (CPU, the default) or a CUDA LibTorch 2.x. Code that uses what only a
// newer LibTorch has tests one of these, so 1.13 keeps building.
#pragma once

#include <torch/version.h>

#define GARDEN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// at::scaled_dot_product_attention (2.0): fused attention kernels (flash,
// memory-efficient) on a GPU.
#define GARDEN_HAS_FUSED_ATTENTION GARDEN_TORCH_AT_LEAST(2, 0)
// c10::Allocator::allocate is no longer const and allocators copy their own
// data (2.3).
#define GARDEN_HAS_ALLOCATOR_COPY_DATA GARDEN_TORCH_AT_LEAST(2, 3)
// Autocast's setters take the device type; the per-device ones are gone (2.4).
#define GARDEN_HAS_DEVICE_TYPE_AUTOCAST GARDEN_TORCH_AT_LEAST(2, 4)
// c10d::TCPStoreOptions::useLibUV (2.2; true by default from 2.4, which
// fails on a LibTorch built without libuv, as Debian's 2.14 is).
#define GARDEN_HAS_TCPSTORE_LIBUV GARDEN_TORCH_AT_LEAST(2, 2)
// Multi-tensor ops that take their factor as a device tensor
// (_foreach_mul(list, tensor), 2.1): an optimizer step that reads its
// learning rate on the device, for CUDA graphs.
#define GARDEN_HAS_FOREACH_TENSOR_FACTOR GARDEN_TORCH_AT_LEAST(2, 1)
// CUDA graphs of a training step (core/cuda_graph.h): at::cuda::CUDAGraph
// with the default generator registered with every capture (2.1).
#define GARDEN_HAS_CUDA_GRAPHS GARDEN_TORCH_AT_LEAST(2, 1)
