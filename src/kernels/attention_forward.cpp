// The forward loops of multi-head attention (attention_loops.h): the
// products are small_gemm.cpp's; the exponential is vector_math.h's.
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

// Head (b, h) for a few queries (a decoding step's) without dropout, probs
// [T, S] and out as below. Per query: its dot products with four keys at a
// time, each in 16 lanes (GCC's vector type, so the sums stay in registers)
// summed pairwise at the end, the four keys' lanes folded together; the
// softmax; and the values' weighted sum, 32 outputs at a time in four
// running sums. The register-blocked products below are built for
// training's many rows, and a lone dot product waits on its own sum.
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

}  // namespace

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

}  // namespace garden::kernels::detail
