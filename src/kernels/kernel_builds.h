// Each build of head_attention's loops, for the tests: head_attention
// (garden/kernels/attention.h) runs only the widest this CPU supports, and the
// builds are meant to agree (AVX-512 and AVX2 to the bit).
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

enum class KernelBuild { kAvx512, kAvx2, kPortable };

// Whether this CPU runs `build`.
bool kernel_build_runs(KernelBuild build);

// head_attention through `build`'s loops; std::invalid_argument where this
// CPU does not run it, or as head_attention.
at::Tensor head_attention_with_build(KernelBuild build, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, const at::Tensor& mask,
                                     const at::Tensor& rows);

}  // namespace garden::kernels
