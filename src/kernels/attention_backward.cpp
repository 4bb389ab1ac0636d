// The backward loops of multi-head attention (attention_loops.h).
#include "attention_loops.h"

#include "simd/small_gemm.h"
#include "simd/vector_math.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

namespace garden::kernels::detail {

namespace {

// Head (b, h) backward from grad_out [B, T, D] and the saved probs [T, S].
// work holds 2 T S floats.
__attribute__((always_inline)) inline void backward_head(const Geometry& g, const Gradients& d,
                                                         int64_t b, int64_t h, const float* probs,
                                                         const float* grad_out, float* work,
                                                         KeepScratch& mask, float* pack) {
  const int64_t T = g.q_len, S = g.kv_len, Dh = g.head_size;
  const float* q = g.q + b * g.q_batch + h * g.q_head;
  const float* k = g.k + b * g.kv_batch + h * g.kv_head;
  const float* v = g.v + b * g.kv_batch + h * g.kv_head;
  const float* go = grad_out + b * T * g.hidden + h * Dh;
  float* grad_p = work;           // [T, S]: d/d(dropped probs), then d/d(scores)
  float* dropped = work + T * S;  // [T, S]
  // d dropped = dO v^T: b[l, j] = v[j, l].
  small_product({go, g.hidden, 1, v, 1, g.kv_row, T, Dh, S, 1.0f, grad_p, S}, pack);
  // Through the dropout mask, row by row: the dropped probabilities (for
  // dV) and d probabilities = d dropped * keep.
  const float* p = probs;
  if (g.dropout) {
    for (int64_t t = 0; t < T; ++t) {
      keep_row(g, row_index(g, b, h, t), S, mask.bits.data(), mask.keep.data());
      const float* __restrict keep = mask.keep.data();
      const float* __restrict row = probs + t * S;
      float* __restrict out_row = dropped + t * S;
      float* __restrict grad_row = grad_p + t * S;
      for (int64_t s = 0; s < S; ++s) {
        out_row[s] = row[s] * keep[s];
        grad_row[s] *= keep[s];
      }
    }
    p = dropped;
  }
  // dV = dropped^T dO.
  small_product(
      {p, 1, S, go, g.hidden, 1, S, T, Dh, 1.0f, d.dv + b * d.dkv_batch + h * Dh, d.dkv_row}, pack);
  // d scores = P (dP - rowsum(dP P)).
  for (int64_t t = 0; t < T; ++t) {
    float* __restrict row = grad_p + t * S;
    const float* __restrict pr = probs + t * S;
    float sums[kLanes] = {};
    int64_t s = 0;
    for (; s + kLanes <= S; s += kLanes)
      for (int l = 0; l < kLanes; ++l) sums[l] += row[s + l] * pr[s + l];
    for (int64_t r = 0; s < S; ++s, ++r) sums[r] += row[s] * pr[s];
    for (int l = 0; l < 8; ++l) sums[l] += sums[l + 8];
    for (int l = 0; l < 4; ++l) sums[l] += sums[l + 4];
    for (int l = 0; l < 2; ++l) sums[l] += sums[l + 2];
    const float dot = sums[0] + sums[1];
    for (s = 0; s < S; ++s) row[s] = pr[s] * (row[s] - dot);
  }
  // dQ = alpha dS k; dK = alpha dS^T q.
  small_product(
      {grad_p, S, 1, k, g.kv_row, 1, T, S, Dh, g.alpha, d.dq + b * d.dq_batch + h * Dh, d.dq_row},
      pack);
  small_product(
      {grad_p, 1, S, q, g.q_row, 1, S, T, Dh, g.alpha, d.dk + b * d.dkv_batch + h * Dh, d.dkv_row},
      pack);
}


}  // namespace

__attribute__((target("avx512f,avx512dq"))) void backward_head_avx512(
    const Geometry& g, const Gradients& d, int64_t b, int64_t h, const float* probs,
    const float* grad_out, float* work, KeepScratch& mask, float* pack) {
  backward_head(g, d, b, h, probs, grad_out, work, mask, pack);
}
__attribute__((target("avx2,fma"))) void backward_head_avx2(const Geometry& g, const Gradients& d,
                                                            int64_t b, int64_t h,
                                                            const float* probs,
                                                            const float* grad_out, float* work,
                                                            KeepScratch& mask, float* pack) {
  backward_head(g, d, b, h, probs, grad_out, work, mask, pack);
}
void backward_head_portable(const Geometry& g, const Gradients& d, int64_t b, int64_t h,
                            const float* probs, const float* grad_out, float* work,
                            KeepScratch& mask, float* pack) {
  backward_head(g, d, b, h, probs, grad_out, work, mask, pack);
}

void backward_heads(const Geometry& g, const Gradients& d, const float* probs,
                    const float* grad_out) {
  static const BackwardHead head =
      widest_kernel<BackwardHead>(backward_head_avx512, backward_head_avx2, backward_head_portable);
  const int64_t TS = g.q_len * g.kv_len;
  at::parallel_for(0, g.batch * g.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> pack(static_cast<size_t>(pack_floats(g)));
    std::vector<float> work(static_cast<size_t>(2 * TS));
    KeepScratch mask(g.dropout ? g.kv_len : 0);
    for (int64_t i = begin; i < end; ++i)
      head(g, d, i / g.heads, i % g.heads, probs + i * TS, grad_out, work.data(), mask,
           pack.data());
  });
}

}  // namespace garden::kernels::detail
