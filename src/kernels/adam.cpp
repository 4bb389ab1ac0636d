// Built for AVX-512, AVX2 and the baseline, chosen when the library loads.
// The loop's square root and division vectorize only without errno and
// trapping math, so this file is compiled with -fno-math-errno
// -fno-trapping-math and without the precompiled header (CMakeLists.txt);
// the IEEE results are the same.
#include "garden/kernels/adam.h"

#include <cmath>

namespace garden::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void adam_pass(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    int64_t n, float b1, float b2, float step, float eps, bool decays, float decay) {
  const float b1_rest = 1.0f - b1, b2_rest = 1.0f - b2;
  for (int64_t j = 0; j < n; ++j) {
    float pj = p[j];
    if (decays) pj -= decay * pj;
    const float gj = g[j];
    const float mj = m[j] * b1 + b1_rest * gj;
    const float vj = v[j] * b2 + b2_rest * (gj * gj);
    m[j] = mj;
    v[j] = vj;
    p[j] = pj + step * (mj / (std::sqrt(vj) + eps));
  }
}

}  // namespace garden::kernels
