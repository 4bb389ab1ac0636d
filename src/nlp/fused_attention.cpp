// Training's multi-head attention as one operation on the CPU in float32:
// for each (example, head), softmax(alpha q k^T + mask) with dropout, times
// v, forward and backward, while the head's [T, S] scores stay in cache.
//
// Unfused, a base translation layer's attention was eight LibTorch and
// Garden operations, each a pass over [B, H, T, S] or [B, T, 3, H, Dh]:
// the heads' copy out of the fused projection, the scores' product, the mask
// add, softmax, dropout, the context's product, and in the backward the
// same again plus the stack of the q, k and v gradients back into one
// tensor. Here the heads are read in place from the projections, the
// gradients are written in place into one tensor shaped like them, and one
// [B, H, T, S] tensor (the probabilities) is kept for the backward; the
// dropout mask is drawn again from its seed there.
//
// The products are small_gemm.cpp's; the exponential is vector_math.h's.
// The dropout mask is element for element the one nlp::dropout draws for the
// same seed over the contiguous [B, H, T, S] probabilities (dropout_bits.h),
// so training draws the same masks as the unfused layers did.
#include "garden/nlp/kernels.h"

#include "dropout_bits.h"
#include "kernel_builds.h"
#include "small_gemm.h"
#include "vector_math.h"

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

namespace garden::nlp {

namespace {

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

// The end of a softmax row whose first n values hold e^(x - m), summed in
// 16 lanes: the lanes added pairwise and x[0, count) divided by the sum. A
// NaN anywhere makes the sum NaN, +inf makes x - m NaN and a row of -inf
// leaves m = -inf: the row's n values are then NaN.
__attribute__((always_inline)) inline void divide_by_sum(float* __restrict x, int64_t n,
                                                         int64_t count, float (&sums)[kLanes],
                                                         float m) {
  for (int l = 0; l < 8; ++l) sums[l] += sums[l + 8];
  for (int l = 0; l < 4; ++l) sums[l] += sums[l + 4];
  for (int l = 0; l < 2; ++l) sums[l] += sums[l + 2];
  const float sum = sums[0] + sums[1];
  if (!(sum >= 1.0f && sum <= static_cast<float>(n)) || std::isinf(m)) {
    for (int64_t t = 0; t < n; ++t) x[t] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float inverse = 1.0f / sum;
  for (int64_t t = 0; t < count; ++t) x[t] *= inverse;
}

// x[s] += mask; then softmax(x) in place: e^(x - max) by vector_math.h's
// polynomial, summed in 16 lanes. A row holding a NaN or an infinity, or
// whose every value is -inf, becomes NaN (as LibTorch's softmax gives NaN
// for NaN rows).
__attribute__((always_inline)) inline void softmax_row(float* __restrict x, int64_t n,
                                                       const float* mask, int64_t mask_stride) {
  if (mask) {
    if (mask_stride == 1) {
      for (int64_t s = 0; s < n; ++s) x[s] += mask[s];
    } else {
      for (int64_t s = 0; s < n; ++s) x[s] += mask[s * mask_stride];
    }
  }
  float top[kLanes];
  for (int l = 0; l < kLanes; ++l) top[l] = -std::numeric_limits<float>::infinity();
  int64_t s = 0;
  for (; s + kLanes <= n; s += kLanes)
    for (int l = 0; l < kLanes; ++l) top[l] = x[s + l] > top[l] ? x[s + l] : top[l];
  for (int64_t r = 0; s < n; ++s, ++r) top[r] = x[s] > top[r] ? x[s] : top[r];
  float m = top[0];
  for (int l = 1; l < kLanes; ++l) m = top[l] > m ? top[l] : m;
  float sums[kLanes] = {};
  s = 0;
  for (; s + kLanes <= n; s += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_nonpositive(x[s + l] - m);
      x[s + l] = e;
      sums[l] += e;
    }
  for (int64_t r = 0; s < n; ++s, ++r) {
    const float e = exp_nonpositive(x[s] - m);
    x[s] = e;
    sums[r] += e;
  }
  divide_by_sum(x, n, n, sums, m);
}

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

// Head (b, h) for a few queries (a decoding step's) without dropout, probs
// [T, S] and out as below. Per query: its dot products with four keys at a
// time, each in 16 lanes (GCC's vector type, so the sums stay in registers)
// summed pairwise at the end, the four keys' lanes folded together; the
// softmax; and the values' weighted sum, 32 outputs at a time in four
// running sums. The register-blocked products below are built for
// training's many rows, and a lone dot product waits on its own sum.
constexpr int64_t kFewQueries = 8;
using Lanes16 = float __attribute__((vector_size(kLanes * sizeof(float))));

// acc += x * p[0 .. 16) (by reference: a vector argument or result would
// be passed differently in the builds without AVX-512).
__attribute__((always_inline)) inline void multiply_add(Lanes16& acc, const Lanes16& x,
                                                        const float* p) {
  Lanes16 y;
  std::memcpy(&y, p, sizeof(y));
  acc += x * y;
}

// acc += w * p[0 .. 16).
__attribute__((always_inline)) inline void multiply_add(Lanes16& acc, float w, const float* p) {
  Lanes16 y;
  std::memcpy(&y, p, sizeof(y));
  acc += w * y;
}

// The 16 lanes' sum, halves added pairwise, plus a scalar tail.
__attribute__((always_inline)) inline float lane_sum(const Lanes16& v, float tail) {
  float lane[kLanes];
  std::memcpy(lane, &v, sizeof(v));
  for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  for (int l = 0; l < 2; ++l) lane[l] += lane[l + 2];
  return (lane[0] + lane[1]) + tail;
}

// The four sums lane_sum(a0, t0) .. lane_sum(a3, t3), added in the same
// order (so to the same bits), with the lanes of all four folded together
// by shuffles: lane l + lane l + 8, then + 4, + 2, + 1.
__attribute__((always_inline)) inline void lane_sums4(const Lanes16& a0, const Lanes16& a1,
                                                      const Lanes16& a2, const Lanes16& a3,
                                                      const float tail[4], float out[4]) {
  // [a0 lanes l + l+8 | a1 lanes l + l+8], and the same of a2 and a3.
  const Lanes16 u01 =
      __builtin_shufflevector(a0, a1, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
      __builtin_shufflevector(a0, a1, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const Lanes16 u23 =
      __builtin_shufflevector(a2, a3, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
      __builtin_shufflevector(a2, a3, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  // Four lanes each: l + l+4 of a0, a1, a2, a3.
  const Lanes16 w =
      __builtin_shufflevector(u01, u23, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
      __builtin_shufflevector(u01, u23, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  // Then l + l+2 and l + l+1 within each four.
  const Lanes16 x =
      w + __builtin_shufflevector(w, w, 2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
  const Lanes16 y =
      x + __builtin_shufflevector(x, x, 1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9, 13, 13, 13, 13);
  out[0] = y[0] + tail[0];
  out[1] = y[4] + tail[1];
  out[2] = y[8] + tail[2];
  out[3] = y[12] + tail[3];
}

// The sixteen sums lane_sum(a[j], tail[j]) as one vector (lane j), added in
// the same order, so to the same bits: lane l + lane l+8 of each, then + 4,
// + 2 and + 1, two vectors folded into one at each level (15 folds for 16
// keys, where lane_sums4 takes 5 for 4 and leaves the sums in lanes apart).
__attribute__((always_inline)) inline void lane_sums16(const Lanes16 (&a)[kLanes],
                                                       const Lanes16& tail, Lanes16& sums) {
  Lanes16 b[8], c[4], d[2];
  // b[i]: keys 2i and 2i + 1, 8 lanes each.
  for (int i = 0; i < 8; ++i)
    b[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26,
                                   27, 28, 29, 30, 31);
  // c[i]: keys 4i to 4i + 3, 4 lanes each.
  for (int i = 0; i < 4; ++i)
    c[i] = __builtin_shufflevector(b[2 * i], b[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(b[2 * i], b[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  // d[i]: keys 8i to 8i + 7, 2 lanes each.
  for (int i = 0; i < 2; ++i)
    d[i] = __builtin_shufflevector(c[2 * i], c[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(c[2 * i], c[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  sums = (__builtin_shufflevector(d[0], d[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                  30) +
          __builtin_shufflevector(d[0], d[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                  31)) +
         tail;
}

// The largest of 16 lanes: halves against halves by vector maxima. (By
// reference: a 64-byte vector by value changes the portable build's ABI.)
__attribute__((always_inline)) inline float largest_lane(const Lanes16& lanes) {
  Lanes16 top = lanes;
  Lanes16 y =
      __builtin_shufflevector(top, top, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
  top = y > top ? y : top;
  y = __builtin_shufflevector(top, top, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
  top = y > top ? y : top;
  y = __builtin_shufflevector(top, top, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  top = y > top ? y : top;
  return top[1] > top[0] ? top[1] : top[0];
}

// softmax_row for rows padded to a whole number of 16-lane blocks, kRows
// rows at once (x[r] holds `padded` floats, its first n the row; mask[r] is
// row r's mask or null): the padding is -inf, so each of its exponentials
// adds 0 to its lane's sum, and the largest value is found by vector maxima.
// softmax_row leaves its last n mod 16 elements to scalar loops, whose
// exponentials GCC may round differently from the vector loop's (by a unit
// in the last place), and finds the maximum of its 16 lanes by 15 dependent
// scalar maxima; here every element goes through the vector loop. Each
// row's steps are interleaved with the other rows' in the same loops: one
// row's maximum, exponentials, sum and division are a chain each waiting on
// the one before, which a lone decoding query runs with the core mostly
// idle. Every row's numbers are the same however many rows go together.
template <int kRows>
__attribute__((always_inline)) inline void softmax_padded_rows(float* const* x, int64_t n,
                                                               int64_t padded,
                                                               const float* const* mask,
                                                               int64_t mask_stride) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int r = 0; r < kRows; ++r) {
    float* __restrict row = x[r];
    if (mask[r]) {
      if (mask_stride == 1) {
        for (int64_t s = 0; s < n; ++s) row[s] += mask[r][s];
      } else {
        for (int64_t s = 0; s < n; ++s) row[s] += mask[r][s * mask_stride];
      }
    }
    for (int64_t s = n; s < padded; ++s) row[s] = -kInf;
  }
  float m[kRows];
  {
    Lanes16 top[kRows], y;
    for (int r = 0; r < kRows; ++r) top[r] = -kInf - Lanes16{};
    for (int64_t s = 0; s < padded; s += kLanes)
      for (int r = 0; r < kRows; ++r) {
        std::memcpy(&y, x[r] + s, sizeof(y));
        top[r] = y > top[r] ? y : top[r];
      }
    for (int r = 0; r < kRows; ++r) m[r] = largest_lane(top[r]);
  }
  float sums[kRows][kLanes] = {};
  for (int64_t s = 0; s < padded; s += kLanes)
    for (int r = 0; r < kRows; ++r) {
      float* __restrict row = x[r];
      for (int l = 0; l < kLanes; ++l) {
        const float e = exp_nonpositive(row[s + l] - m[r]);
        row[s + l] = e;
        sums[r][l] += e;
      }
    }
  for (int r = 0; r < kRows; ++r) divide_by_sum(x[r], n, padded, sums[r], m[r]);
}

__attribute__((always_inline)) inline void softmax_padded_row(float* x, int64_t n, int64_t padded,
                                                              const float* mask,
                                                              int64_t mask_stride) {
  softmax_padded_rows<1>(&x, n, padded, &mask, mask_stride);
}

// Where key and value s of example b start in k and v, head 0 (head h adds
// h * kv_head): position s of batch row b, or of the row the index names.
// Past S, to the end of the last block of 16, position 0 again: the scores
// read there are replaced by -inf. One example's offsets serve all its heads.
__attribute__((always_inline)) inline void position_offsets(const Geometry& g, int64_t b,
                                                            int64_t* __restrict at) {
  const int64_t S = g.kv_len, padded = (S + kLanes - 1) / kLanes * kLanes;
  if (g.kv_rows) {
    const int64_t* __restrict rows = g.kv_rows + b * g.kv_rows_stride;
    for (int64_t s = 0; s < S; ++s) at[s] = rows[s] * g.kv_batch + s * g.kv_row;
  } else {
    for (int64_t s = 0; s < S; ++s) at[s] = b * g.kv_batch + s * g.kv_row;
  }
  for (int64_t s = S; s < padded; ++s) at[s] = at[0];
}

// a[j] += the products of q[from, from + 16 kChunks) with the same floats
// of key j (at k + at[j]), j < 16, sixteen at a time in order: the chunks of
// q stay in registers and each key's offset is read once.
template <int kChunks>
__attribute__((always_inline)) inline void dot16(const float* q, const float* k,
                                                 const int64_t* at, int64_t from,
                                                 Lanes16 (&a)[kLanes]) {
  Lanes16 x[kChunks];
  for (int c = 0; c < kChunks; ++c) std::memcpy(&x[c], q + from + c * kLanes, sizeof(x[c]));
#pragma GCC unroll 16
  for (int j = 0; j < kLanes; ++j) {
    const float* p = k + at[j] + from;
    for (int c = 0; c < kChunks; ++c) multiply_add(a[j], x[c], p + c * kLanes);
  }
}

// One query's scores alpha q . key s into scores[0, S) (and, with
// kSixteenKeys, values for the padding up to the next 16, to be replaced),
// keys at k + at[s]. With kSixteenKeys (the AVX-512 build, whose 32
// registers hold sixteen running sums), the dot products go sixteen keys at a
// time and are folded by lane_sums16 straight into a vector of scores; the
// other builds take four keys at a time (lane_sums4). Both give each score
// the same bits.
template <bool kSixteenKeys>
__attribute__((always_inline)) inline void query_scores(const Geometry& g,
                                                        const float* __restrict q, const float* k,
                                                        const int64_t* at, float* scores) {
  const int64_t S = g.kv_len, Dh = g.head_size;
  const int64_t whole = Dh / kLanes * kLanes;
  if constexpr (kSixteenKeys) {
    for (int64_t s = 0; s < S; s += kLanes) {
      Lanes16 a[kLanes] = {};
      int64_t i = 0;
      for (; i + 4 * kLanes <= whole; i += 4 * kLanes) dot16<4>(q, k, at + s, i, a);
      switch ((whole - i) / kLanes) {
        case 3:
          dot16<3>(q, k, at + s, i, a);
          break;
        case 2:
          dot16<2>(q, k, at + s, i, a);
          break;
        case 1:
          dot16<1>(q, k, at + s, i, a);
          break;
        default:
          break;
      }
      // The scalar tail of each dot product (Dh mod 16), as lane_sums4's.
      Lanes16 tail{};
      if (whole < Dh)
        for (int j = 0; j < kLanes; ++j) {
          const float* key = k + at[s + j];
          float sum = 0;
          for (int64_t i = whole; i < Dh; ++i) sum += q[i] * key[i];
          tail[j] = sum;
        }
      Lanes16 sums;
      lane_sums16(a, tail, sums);
      sums *= g.alpha;
      std::memcpy(scores + s, &sums, sizeof(sums));
    }
  } else {
    int64_t s = 0;
    for (; s + 4 <= S; s += 4) {
      const float *k0 = k + at[s], *k1 = k + at[s + 1], *k2 = k + at[s + 2], *k3 = k + at[s + 3];
      Lanes16 a0{}, a1{}, a2{}, a3{};
      for (int64_t i = 0; i < whole; i += kLanes) {
        Lanes16 x;
        std::memcpy(&x, q + i, sizeof(x));
        multiply_add(a0, x, k0 + i);
        multiply_add(a1, x, k1 + i);
        multiply_add(a2, x, k2 + i);
        multiply_add(a3, x, k3 + i);
      }
      float tail[4] = {0, 0, 0, 0}, sum[4];
      for (int64_t i = whole; i < Dh; ++i) {
        tail[0] += q[i] * k0[i];
        tail[1] += q[i] * k1[i];
        tail[2] += q[i] * k2[i];
        tail[3] += q[i] * k3[i];
      }
      lane_sums4(a0, a1, a2, a3, tail, sum);
      for (int j = 0; j < 4; ++j) scores[s + j] = g.alpha * sum[j];
    }
    for (; s < S; ++s) {
      const float* key = k + at[s];
      Lanes16 a{};
      for (int64_t i = 0; i < whole; i += kLanes) {
        Lanes16 x;
        std::memcpy(&x, q + i, sizeof(x));
        multiply_add(a, x, key + i);
      }
      float tail = 0;
      for (int64_t i = whole; i < Dh; ++i) tail += q[i] * key[i];
      scores[s] = g.alpha * lane_sum(a, tail);
    }
  }
}

// c[0, Dh) = sum over s < S of p[s] value s (at v + at[s]): 32 outputs at a
// time in four running sums each, one per position mod 4 (summed at the
// end): one sum would wait on its own multiply-add at every position.
__attribute__((always_inline)) inline void weighted_values(const Geometry& g,
                                                           const float* __restrict p,
                                                           const float* v, const int64_t* at,
                                                           float* __restrict c) {
  const int64_t S = g.kv_len, Dh = g.head_size;
  int64_t j = 0;
  for (; j + 2 * kLanes <= Dh; j += 2 * kLanes) {
    Lanes16 c0[4] = {}, c1[4] = {};
    int64_t r = 0;
    for (; r + 4 <= S; r += 4)
      for (int u = 0; u < 4; ++u) {
        const float* value = v + at[r + u] + j;
        multiply_add(c0[u], p[r + u], value);
        multiply_add(c1[u], p[r + u], value + kLanes);
      }
    for (int u = 0; r < S; ++r, ++u) {
      const float* value = v + at[r] + j;
      multiply_add(c0[u], p[r], value);
      multiply_add(c1[u], p[r], value + kLanes);
    }
    const Lanes16 sum0 = (c0[0] + c0[1]) + (c0[2] + c0[3]);
    const Lanes16 sum1 = (c1[0] + c1[1]) + (c1[2] + c1[3]);
    std::memcpy(c + j, &sum0, sizeof(sum0));
    std::memcpy(c + j + kLanes, &sum1, sizeof(sum1));
  }
  for (; j + kLanes <= Dh; j += kLanes) {
    Lanes16 c0[4] = {};
    int64_t r = 0;
    for (; r + 4 <= S; r += 4)
      for (int u = 0; u < 4; ++u) multiply_add(c0[u], p[r + u], v + at[r + u] + j);
    for (int u = 0; r < S; ++r, ++u) multiply_add(c0[u], p[r], v + at[r] + j);
    const Lanes16 sum0 = (c0[0] + c0[1]) + (c0[2] + c0[3]);
    std::memcpy(c + j, &sum0, sizeof(sum0));
  }
  for (; j < Dh; ++j) {
    float sum = 0;
    for (int64_t r = 0; r < S; ++r) sum += p[r] * v[at[r] + j];
    c[j] = sum;
  }
}

// Head (b, h) for a few queries (a decoding step's) without dropout, probs
// [T, S] and out as below. Per query: its scores (query_scores), the
// softmax, and the values' weighted sum. The register-blocked products below
// are built for training's many rows, and a lone dot product waits on its
// own sum.
template <bool kSixteenKeys>
__attribute__((always_inline)) inline void few_queries_head(const Geometry& g, int64_t b, int64_t h,
                                                            float* probs, float* out) {
  const int64_t T = g.q_len, S = g.kv_len, Dh = g.head_size;
  const int64_t padded = (S + kLanes - 1) / kLanes * kLanes;
  int64_t at[kSmallProductMaxDim + kLanes];
  position_offsets(g, b, at);
  const float* k = g.k + h * g.kv_head;
  const float* v = g.v + h * g.kv_head;
  alignas(64) float scores[kSmallProductMaxDim + kLanes];
  for (int64_t t = 0; t < T; ++t) {
    query_scores<kSixteenKeys>(g, g.q + b * g.q_batch + h * g.q_head + t * g.q_row, k, at, scores);
    softmax_padded_row(scores, S, padded, mask_row(g, b, h, t), g.mask_stride[3]);
    if (!g.probs_unused) std::memcpy(probs + t * S, scores, static_cast<size_t>(S) * sizeof(float));
    weighted_values(g, scores, v, at, out + (b * T + t) * g.hidden + h * Dh);
  }
}

// Every head of example b for a few queries without dropout (head_attention:
// the probabilities are not kept): the positions' offsets found once for all
// heads, and the queries' softmaxes kSoftmaxGroup at a time in one loop, so
// that their chains of dependent steps (maximum, exponential, sum,
// division) run side by side. Each query's numbers are few_queries_head's.
constexpr int kSoftmaxGroup = 4;  // (few_queries_example names its four rows)

template <bool kSixteenKeys>
__attribute__((always_inline)) inline void few_queries_example(const Geometry& g, int64_t b,
                                                               float* out) {
  const int64_t T = g.q_len, S = g.kv_len, Dh = g.head_size;
  const int64_t padded = (S + kLanes - 1) / kLanes * kLanes;
  int64_t at[kSmallProductMaxDim + kLanes];
  position_offsets(g, b, at);
  alignas(64) float scores[kSoftmaxGroup][kSmallProductMaxDim + kLanes];
  const int64_t queries = g.heads * T;
  for (int64_t first = 0; first < queries; first += kSoftmaxGroup) {
    const int n = static_cast<int>(std::min<int64_t>(kSoftmaxGroup, queries - first));
    const float* mask[kSoftmaxGroup] = {};
    for (int i = 0; i < n; ++i) {
      const int64_t h = (first + i) / T, t = (first + i) % T;
      query_scores<kSixteenKeys>(g, g.q + b * g.q_batch + h * g.q_head + t * g.q_row,
                                 g.k + h * g.kv_head, at, scores[i]);
      mask[i] = mask_row(g, b, h, t);
    }
    if (n == kSoftmaxGroup) {
      float* const rows[kSoftmaxGroup] = {scores[0], scores[1], scores[2], scores[3]};
      softmax_padded_rows<kSoftmaxGroup>(rows, S, padded, mask, g.mask_stride[3]);
    } else {
      for (int i = 0; i < n; ++i) softmax_padded_row(scores[i], S, padded, mask[i], g.mask_stride[3]);
    }
    for (int i = 0; i < n; ++i) {
      const int64_t h = (first + i) / T, t = (first + i) % T;
      weighted_values(g, scores[i], g.v + h * g.kv_head, at, out + (b * T + t) * g.hidden + h * Dh);
    }
  }
}

// Head (b, h) forward: probs [T, S] (kept for the backward), and its context
// into out [B, T, D] at columns h * Dh.
template <bool kSixteenKeys>
__attribute__((always_inline)) inline void forward_head(const Geometry& g, int64_t b, int64_t h,
                                                        float* probs, float* dropped,
                                                        KeepScratch& mask, float* pack,
                                                        float* out) {
  const int64_t T = g.q_len, S = g.kv_len, Dh = g.head_size;
  if (T <= kFewQueries && !g.dropout) {
    few_queries_head<kSixteenKeys>(g, b, h, probs, out);
    return;
  }
  const float* q = g.q + b * g.q_batch + h * g.q_head;
  const float* k = g.k + b * g.kv_batch + h * g.kv_head;
  const float* v = g.v + b * g.kv_batch + h * g.kv_head;
  // scores = alpha q k^T: b[l, j] = k[j, l].
  small_product({q, g.q_row, 1, k, 1, g.kv_row, T, Dh, S, g.alpha, probs, S}, pack);
  for (int64_t t = 0; t < T; ++t)
    softmax_row(probs + t * S, S, mask_row(g, b, h, t), g.mask_stride[3]);
  const float* p = probs;
  if (g.dropout) {
    for (int64_t t = 0; t < T; ++t) {
      keep_row(g, row_index(g, b, h, t), S, mask.bits.data(), mask.keep.data());
      const float* __restrict row = probs + t * S;
      float* __restrict out_row = dropped + t * S;
      for (int64_t s = 0; s < S; ++s) out_row[s] = row[s] * mask.keep[s];
    }
    p = dropped;
  }
  small_product(
      {p, S, 1, v, g.kv_row, 1, T, S, Dh, 1.0f, out + b * T * g.hidden + h * Dh, g.hidden}, pack);
}

// Where one call's gradients go: dq like q (dq_batch, dq_row), dk and dv
// like k and v (dkv_batch, dkv_row).
struct Gradients {
  float* dq;
  float* dk;
  float* dv;
  int64_t dq_batch, dq_row, dkv_batch, dkv_row;
};

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

// Per instruction set: the row loops (softmax, the dropout bits, the row dot
// products) vectorize to the widest the CPU runs; the products dispatch
// themselves.
using ForwardHead = void (*)(const Geometry&, int64_t, int64_t, float*, float*, KeepScratch&,
                             float*, float*);
using BackwardHead = void (*)(const Geometry&, const Gradients&, int64_t, int64_t, const float*,
                              const float*, float*, KeepScratch&, float*);
// Every head of one example for a few queries (head_attention).
using ForwardExample = void (*)(const Geometry&, int64_t, float*);

__attribute__((target("avx512f,avx512dq"))) void forward_head_avx512(const Geometry& g, int64_t b,
                                                                     int64_t h, float* probs,
                                                                     float* dropped,
                                                                     KeepScratch& mask, float* pack,
                                                                     float* out) {
  forward_head<true>(g, b, h, probs, dropped, mask, pack, out);
}
__attribute__((target("avx2,fma"))) void forward_head_avx2(const Geometry& g, int64_t b, int64_t h,
                                                           float* probs, float* dropped,
                                                           KeepScratch& mask, float* pack,
                                                           float* out) {
  forward_head<false>(g, b, h, probs, dropped, mask, pack, out);
}
void forward_head_portable(const Geometry& g, int64_t b, int64_t h, float* probs, float* dropped,
                           KeepScratch& mask, float* pack, float* out) {
  forward_head<false>(g, b, h, probs, dropped, mask, pack, out);
}
__attribute__((target("avx512f,avx512dq"))) void forward_example_avx512(const Geometry& g,
                                                                        int64_t b, float* out) {
  few_queries_example<true>(g, b, out);
}
__attribute__((target("avx2,fma"))) void forward_example_avx2(const Geometry& g, int64_t b,
                                                              float* out) {
  few_queries_example<false>(g, b, out);
}
void forward_example_portable(const Geometry& g, int64_t b, float* out) {
  few_queries_example<false>(g, b, out);
}
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

int64_t pack_floats(const Geometry& g) {
  const int64_t widest = std::max({g.q_len, g.kv_len, g.head_size});
  return small_product_scratch(widest, widest);
}

void forward_heads(const Geometry& g, float* probs, float* out) {
  static const ForwardHead head =
      widest_kernel<ForwardHead>(forward_head_avx512, forward_head_avx2, forward_head_portable);
  const int64_t TS = g.q_len * g.kv_len;
  at::parallel_for(0, g.batch * g.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> pack(static_cast<size_t>(pack_floats(g)));
    std::vector<float> dropped(static_cast<size_t>(g.dropout ? TS : 0));
    KeepScratch mask(g.dropout ? g.kv_len : 0);
    for (int64_t i = begin; i < end; ++i)
      head(g, i / g.heads, i % g.heads, probs + i * TS, dropped.data(), mask, pack.data(), out);
  });
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

// The geometry of q_proj [B, T, 3D] (self-attention: q, k, v side by side)
// or q_proj [B, T, D] with kv_proj [B, S, 2D] (k, v side by side), both
// contiguous.
Geometry geometry(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                  const at::Tensor& mask) {
  Geometry g{};
  const bool self = !kv_proj.defined();
  g.batch = q_proj.size(0);
  g.q_len = q_proj.size(1);
  g.hidden = self ? q_proj.size(2) / 3 : q_proj.size(2);
  g.kv_len = self ? g.q_len : kv_proj.size(1);
  g.heads = heads;
  g.head_size = g.hidden / heads;
  g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.head_size)));
  g.q = q_proj.data_ptr<float>();
  g.q_row = q_proj.size(2);
  g.q_batch = g.q_len * g.q_row;
  const at::Tensor& kv = self ? q_proj : kv_proj;
  g.k = kv.data_ptr<float>() + (self ? g.hidden : 0);
  g.v = g.k + g.hidden;
  g.kv_row = kv.size(2);
  g.kv_batch = kv.size(1) * g.kv_row;
  g.q_head = g.kv_head = g.head_size;
  g.mask = mask.defined() ? mask.data_ptr<float>() : nullptr;
  for (int i = 0; i < 4; ++i) g.mask_stride[i] = mask.defined() ? mask.stride(i) : 0;
  return g;
}

// The mask as a [B, H, T, S] view (strides 0 where it broadcasts).
at::Tensor expanded_mask(const at::Tensor& mask, const Geometry& g) {
  if (!mask.defined()) return mask;
  return mask.expand({g.batch, g.heads, g.q_len, g.kv_len});
}

class FusedAttention : public torch::autograd::Function<FusedAttention> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in,
                            const at::Tensor& kv_in, int64_t heads, const at::Tensor& mask_in,
                            double rate, bool training) {
    RECORD_FUNCTION("garden::fused_attention", std::vector<c10::IValue>());
    // Autograd's inputs must be defined: an empty kv_in stands for
    // self-attention and an empty mask_in for none (fused_attention).
    const at::Tensor q_proj = q_in.contiguous();
    const at::Tensor kv_proj = kv_in.dim() == 3 ? kv_in.contiguous() : at::Tensor();
    Geometry g = geometry(q_proj, kv_proj, heads, {});
    const at::Tensor mask = mask_in.numel() > 0 ? expanded_mask(mask_in, g) : at::Tensor();
    g = geometry(q_proj, kv_proj, heads, mask);
    g.dropout = training && rate > 0;
    if (g.dropout) {
      g.seed = draw_dropout_seed();
      g.threshold = dropout_threshold(rate);
      g.scale = static_cast<float>(1.0 / (1.0 - rate));
    }
    at::Tensor probs = at::empty({g.batch, g.heads, g.q_len, g.kv_len}, q_proj.options());
    at::Tensor out = at::empty({g.batch, g.q_len, g.hidden}, q_proj.options());
    forward_heads(g, probs.data_ptr<float>(), out.data_ptr<float>());
    ctx->save_for_backward({q_proj, kv_proj, mask, probs});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["dropout"] = g.dropout;
    ctx->saved_data["seed"] = static_cast<int64_t>(g.seed);
    ctx->saved_data["rate"] = rate;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& q_proj = saved[0];
    const at::Tensor& kv_proj = saved[1];
    const at::Tensor& probs = saved[3];
    Geometry g = geometry(q_proj, kv_proj, ctx->saved_data["heads"].toInt(), saved[2]);
    g.dropout = ctx->saved_data["dropout"].toBool();
    if (g.dropout) {
      const double rate = ctx->saved_data["rate"].toDouble();
      g.seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
      g.threshold = dropout_threshold(rate);
      g.scale = static_cast<float>(1.0 / (1.0 - rate));
    }
    const at::Tensor grad_out = grads[0].contiguous();
    at::Tensor grad_q = at::empty_like(q_proj);
    at::Tensor grad_kv = kv_proj.defined() ? at::empty_like(kv_proj) : at::Tensor();
    Gradients d{};
    d.dq = grad_q.data_ptr<float>();
    d.dq_row = g.q_row;
    d.dq_batch = g.q_batch;
    float* kv_base = kv_proj.defined() ? grad_kv.data_ptr<float>() : d.dq + g.hidden;
    d.dk = kv_base;
    d.dv = kv_base + g.hidden;
    d.dkv_row = g.kv_row;
    d.dkv_batch = g.kv_batch;
    backward_heads(g, d, probs.data_ptr<float>(), grad_out.data_ptr<float>());
    return {grad_q, grad_kv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Whether the kernels take `mask` (undefined: none): a float32 CPU tensor
// without a gradient, broadcastable to `full` [B, H, T, S].
bool mask_applies(const at::Tensor& mask, const std::array<int64_t, 4>& full) {
  if (!mask.defined()) return true;
  if (!mask.device().is_cpu() || mask.scalar_type() != at::kFloat || mask.dim() > 4 ||
      mask.requires_grad())
    return false;
  for (int64_t i = 0; i < mask.dim(); ++i) {
    const int64_t size = mask.size(mask.dim() - 1 - i);
    if (size != 1 && size != full[static_cast<std::size_t>(3 - i)]) return false;
  }
  return true;
}

}  // namespace

bool fused_attention_applies(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                             const at::Tensor& mask) {
  const auto is_cpu_float = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 3;
  };
  if (!is_cpu_float(q_proj) || heads < 1 || q_proj.size(0) < 1 || q_proj.size(1) < 1) return false;
  const bool self = !kv_proj.defined();
  if (!self && (!is_cpu_float(kv_proj) || kv_proj.size(0) != q_proj.size(0) || kv_proj.size(1) < 1))
    return false;
  const int64_t width = q_proj.size(2);
  if (self ? width % 3 != 0 : kv_proj.size(2) != 2 * width) return false;
  const int64_t hidden = self ? width / 3 : width;
  if (hidden < 1 || hidden % heads != 0) return false;
  const int64_t kv_len = self ? q_proj.size(1) : kv_proj.size(1);
  for (int64_t n : {q_proj.size(1), kv_len, hidden / heads})
    if (n > kSmallProductMaxDim) return false;
  return mask_applies(mask, {q_proj.size(0), heads, q_proj.size(1), kv_len});
}

at::Tensor fused_attention(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                           const at::Tensor& mask, double dropout, bool training) {
  if (!fused_attention_applies(q_proj, kv_proj, heads, mask))
    throw std::invalid_argument(
        "fused_attention: expected float32 CPU q_proj [B, T, 3D] (or [B, T, D] with kv_proj "
        "[B, S, 2D]), D a multiple of heads, T, S and D / heads at most 256, and a float32 mask "
        "broadcastable to [B, heads, T, S]");
  if (training && !(dropout >= 0 && dropout < 1))
    throw std::invalid_argument("fused_attention: dropout must be in [0, 1)");
  const at::Tensor none = at::empty({0}, q_proj.options());
  return FusedAttention::apply(q_proj, kv_proj.defined() ? kv_proj : none, heads,
                               mask.defined() ? mask : none, dropout, training);
}

namespace {

// head_attention's operands as it reads them; with `same_batch`, k and v
// have q's rows (false: read through an index).
bool head_operands_usable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, bool same_batch) {
  const auto usable = [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 4 &&
           t.stride(3) == 1 && !t.requires_grad();
  };
  if (!usable(q) || !usable(k) || !usable(v) || k.sizes() != v.sizes() ||
      k.strides() != v.strides() || (same_batch && q.size(0) != k.size(0)) ||
      q.size(1) != k.size(1) || q.size(3) != k.size(3) || q.numel() == 0 || k.numel() == 0)
    return false;
  for (int64_t n : {q.size(2), k.size(2), q.size(3)})
    if (n > kSmallProductMaxDim) return false;
  return mask_applies(mask, {q.size(0), q.size(1), q.size(2), k.size(2)});
}

}  // namespace

bool head_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, const at::Tensor& rows) {
  if (!rows.defined()) return head_operands_usable(q, k, v, mask, true);
  return rows.device().is_cpu() && rows.scalar_type() == at::kLong && rows.dim() == 2 &&
         rows.stride(1) == 1 && q.defined() && q.dim() == 4 && k.defined() && k.dim() == 4 &&
         rows.size(0) == q.size(0) && rows.size(1) >= k.size(2) && q.size(2) <= kFewQueries &&
         head_operands_usable(q, k, v, mask, false);
}

namespace {

at::Tensor head_attention_through(ForwardHead head, ForwardExample example, const at::Tensor& q,
                                  const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                  const at::Tensor& rows) {
  if (!head_attention_applies(q, k, v, mask, rows))
    throw std::invalid_argument(
        rows.defined()
            ? "head_attention: with rows, expected int64 CPU rows [B, >= S] with unit stride along "
              "S, float32 CPU q [B, H, T, Dh] with T at most 8, k and v [B0, H, S, Dh] with the "
              "same strides and unit stride in Dh, none requiring a gradient, S and Dh at most "
              "256, and a float32 mask broadcastable to [B, H, T, S]"
            : "head_attention: expected float32 CPU q [B, H, T, Dh], k and v [B, H, S, Dh] with "
              "the same strides and unit stride in Dh, none requiring a gradient, T, S and Dh at "
              "most 256, and a float32 mask broadcastable to [B, H, T, S]");
  if (rows.defined()) {
    // Every position read must name a row of k and v.
    const int64_t* r = rows.data_ptr<int64_t>();
    for (int64_t b = 0; b < rows.size(0); ++b)
      for (int64_t s = 0; s < k.size(2); ++s) {
        const int64_t row = r[b * rows.stride(0) + s];
        if (row < 0 || row >= k.size(0))
          throw std::invalid_argument("head_attention: rows[" + std::to_string(b) + "][" +
                                      std::to_string(s) + "] is " + std::to_string(row) +
                                      ", not a row of k and v (they have " +
                                      std::to_string(k.size(0)) + ")");
      }
  }
  Geometry g{};
  g.probs_unused = true;
  g.batch = q.size(0);
  g.heads = q.size(1);
  g.q_len = q.size(2);
  g.kv_len = k.size(2);
  g.head_size = q.size(3);
  g.hidden = g.heads * g.head_size;
  g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.head_size)));
  g.q = q.data_ptr<float>();
  g.q_batch = q.stride(0);
  g.q_head = q.stride(1);
  g.q_row = q.stride(2);
  g.k = k.data_ptr<float>();
  g.v = v.data_ptr<float>();
  g.kv_batch = k.stride(0);
  g.kv_head = k.stride(1);
  g.kv_row = k.stride(2);
  if (rows.defined()) {
    g.kv_rows = rows.data_ptr<int64_t>();
    g.kv_rows_stride = rows.stride(0);
  }
  const at::Tensor expanded =
      mask.defined() ? mask.expand({g.batch, g.heads, g.q_len, g.kv_len}) : at::Tensor();
  g.mask = expanded.defined() ? expanded.data_ptr<float>() : nullptr;
  for (int i = 0; i < 4; ++i) g.mask_stride[i] = expanded.defined() ? expanded.stride(i) : 0;
  at::Tensor out = at::empty({g.batch, g.q_len, g.hidden}, q.options());
  // A decoding step's head is a few thousand flops: heads (or examples) go
  // to threads in groups of about 64 K multiply-adds.
  const int64_t work = g.q_len * g.kv_len * g.head_size;
  float* result = out.data_ptr<float>();
  if (g.q_len <= kFewQueries) {
    const int64_t example_work = work * g.heads;
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, example_work));
    at::parallel_for(0, g.batch, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) example(g, b, result);
    });
    return out;
  }
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, work));
  at::parallel_for(0, g.batch * g.heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> pack(static_cast<size_t>(pack_floats(g)));
    std::vector<float> probs(static_cast<size_t>(g.q_len * g.kv_len));
    KeepScratch unused(0);
    for (int64_t i = begin; i < end; ++i)
      head(g, i / g.heads, i % g.heads, probs.data(), nullptr, unused, pack.data(), result);
  });
  return out;
}

}  // namespace

at::Tensor head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, const at::Tensor& rows) {
  static const ForwardHead head =
      widest_kernel<ForwardHead>(forward_head_avx512, forward_head_avx2, forward_head_portable);
  static const ForwardExample example = widest_kernel<ForwardExample>(
      forward_example_avx512, forward_example_avx2, forward_example_portable);
  return head_attention_through(head, example, q, k, v, mask, rows);
}

bool kernel_build_runs(KernelBuild build) {
  switch (build) {
    case KernelBuild::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    case KernelBuild::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case KernelBuild::kPortable:
      return true;
  }
  return false;
}

at::Tensor head_attention_with_build(KernelBuild build, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, const at::Tensor& mask,
                                     const at::Tensor& rows) {
  if (!kernel_build_runs(build))
    throw std::invalid_argument("head_attention_with_build: this CPU does not run that build");
  const ForwardHead head = build == KernelBuild::kAvx512 ? forward_head_avx512
                           : build == KernelBuild::kAvx2 ? forward_head_avx2
                                                         : forward_head_portable;
  const ForwardExample example = build == KernelBuild::kAvx512 ? forward_example_avx512
                                 : build == KernelBuild::kAvx2 ? forward_example_avx2
                                                               : forward_example_portable;
  return head_attention_through(head, example, q, k, v, mask, rows);
}

}  // namespace garden::nlp
