// What the checkpoint and safetensors targets check of a file written back.
#pragma once

#include <ATen/ATen.h>

#include "fuzz_util.h"

namespace garden_fuzz {

// Named tensors read back equal those read first: the same names, dtypes,
// shapes and bytes (bitwise, so NaNs compare equal).
template <typename Tensors>
void check_same_tensors(const Tensors& first, const Tensors& again) {
  GARDEN_FUZZ_CHECK(again.size() == first.size());
  for (const auto& [name, tensor] : first) {
    const at::Tensor& other = again.at(name);
    GARDEN_FUZZ_CHECK(other.dtype() == tensor.dtype() && other.sizes() == tensor.sizes());
    GARDEN_FUZZ_CHECK(other.numel() == 0 || at::equal(other.view({-1}).view(at::kByte),
                                                      tensor.view({-1}).view(at::kByte)));
  }
}

}  // namespace garden_fuzz
