// The loops of multi-head attention on the CPU in float32, shared by
// training's fused attention (fused_attention.cpp) and inference's
// head_attention (head_attention.cpp): for each (example, head),
// softmax(alpha q k^T + mask) with dropout, times v, forward
// (attention_forward.cpp) and backward (attention_backward.cpp), while the
// head's [T, S] scores stay in cache.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

#include "simd/dropout_bits.h"

namespace garden::kernels::detail {


// Where one call's operands live. Element d of head h of row t of example b
// of the queries is q[b * q_batch + t * q_row + h * q_head + d]; keys and
// values likewise with kv_batch, kv_row and kv_head (q_head = kv_head = Dh
// in the projections). The mask (additive, may be null) is
// read through its four strides (0 where it broadcasts).
struct Geometry {
  int64_t batch, heads, q_len, kv_len, head_size, hidden;
  float alpha;
  const float* q;
  const float* k;
  const float* v;
  int64_t q_batch, q_row, kv_batch, kv_row;
  int64_t q_head, kv_head;  // head h starts at h * q_head (h * kv_head): Dh in the projections
  const float* mask;
  int64_t mask_stride[4];
  // Decoding through a row index (head_attention's `rows`): key and value s
  // of example b are in batch row kv_rows[b * kv_rows_stride + s] of k and
  // v, not in row b. Null: row b.
  const int64_t* kv_rows;
  int64_t kv_rows_stride;
  bool dropout;
  // head_attention's probabilities are scratch: the few-queries loops need
  // not write them out (training keeps them for the backward).
  bool probs_unused;
  uint64_t seed;
  uint32_t threshold;
  float scale;  // 1 / (1 - p)
};

constexpr int kLanes = 16;

// keep[s] = scale where element first + s of the [B, H, T, S]
// probabilities is kept, else 0: one splitmix64 per element pair, in a loop
// that vectorizes (bits holds n + 2 words).
__attribute__((always_inline)) inline void keep_row(const Geometry& g, uint64_t first, int64_t n,
                                                    uint32_t* __restrict bits,
                                                    float* __restrict keep) {
  const uint64_t pair0 = first >> 1;
  const int64_t pairs = static_cast<int64_t>(((first + static_cast<uint64_t>(n) + 1) >> 1) - pair0);
  draw_pair_bits(g.seed + pair0 * kGoldenGamma, pairs, bits);
  const uint32_t* __restrict own = bits + (first & 1);
  const uint32_t threshold = g.threshold;
  const float scale = g.scale;
  for (int64_t s = 0; s < n; ++s) keep[s] = static_cast<float>(own[s] >= threshold) * scale;
}

// Per-task scratch of the dropout mask: one row's bits and factors.
struct KeepScratch {
  std::vector<uint32_t> bits;
  std::vector<float> keep;
  explicit KeepScratch(int64_t n)
      : bits(static_cast<size_t>(n + 2)), keep(static_cast<size_t>(n)) {}
};

// The first element of row t of head (b, h) in the [B, H, T, S] probabilities.
inline uint64_t row_index(const Geometry& g, int64_t b, int64_t h, int64_t t) {
  return static_cast<uint64_t>(((b * g.heads + h) * g.q_len + t) * g.kv_len);
}

inline const float* mask_row(const Geometry& g, int64_t b, int64_t h, int64_t t) {
  return g.mask ? g.mask + b * g.mask_stride[0] + h * g.mask_stride[1] + t * g.mask_stride[2]
                : nullptr;
}

// Queries a decoding step has at most for the few-queries loops.
constexpr int64_t kFewQueries = 8;

// Where one call's gradients go: dq like q (dq_batch, dq_row), dk and dv
// like k and v (dkv_batch, dkv_row).
struct Gradients {
  float* dq;
  float* dk;
  float* dv;
  int64_t dq_batch, dq_row, dkv_batch, dkv_row;
};

// Per instruction set: the row loops (softmax, the dropout bits, the row dot
// products) vectorize to the widest the CPU runs; the products dispatch
// themselves.
using ForwardHead = void (*)(const Geometry&, int64_t, int64_t, float*, float*, KeepScratch&,
                             float*, float*);
using BackwardHead = void (*)(const Geometry&, const Gradients&, int64_t, int64_t, const float*,
                              const float*, float*, KeepScratch&, float*);
// Every head of one example for a few queries (head_attention).
using ForwardExample = void (*)(const Geometry&, int64_t, float*);

// Each build of the loops (attention_forward.cpp, attention_backward.cpp).
void forward_head_avx512(const Geometry& g, int64_t b, int64_t h, float* probs, float* dropped,
                         KeepScratch& mask, float* pack, float* out);
void forward_head_avx2(const Geometry& g, int64_t b, int64_t h, float* probs, float* dropped,
                       KeepScratch& mask, float* pack, float* out);
void forward_head_portable(const Geometry& g, int64_t b, int64_t h, float* probs, float* dropped,
                           KeepScratch& mask, float* pack, float* out);
void forward_example_avx512(const Geometry& g, int64_t b, float* out);
void forward_example_avx2(const Geometry& g, int64_t b, float* out);
void forward_example_portable(const Geometry& g, int64_t b, float* out);

// The floats of scratch one thread's products need.
int64_t pack_floats(const Geometry& g);
// Every head forward (probs [B, H, T, S], out [B, T, D]) and backward, on
// LibTorch's threads with the widest build the CPU runs.
void forward_heads(const Geometry& g, float* probs, float* out);
void backward_heads(const Geometry& g, const Gradients& d, const float* probs,
                    const float* grad_out);

// Whether the loops take `mask` (undefined: none): a float32 CPU tensor
// without a gradient, broadcastable to `full` [B, H, T, S].
bool mask_applies(const at::Tensor& mask, const std::array<int64_t, 4>& full);

}  // namespace garden::kernels::detail
