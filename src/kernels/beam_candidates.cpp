#include "garden/kernels/beam_candidates.h"

#include "simd/vector_math.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace garden::kernels {

namespace {

// ---- Beam search's candidates ------------------------------------------------------
// LibTorch's way turns the logits [rows, V] into double, takes their
// log-softmax, adds each beam's score and runs topk over [n, beams * V],
// writing every intermediate. Here, per row, one pass finds the maximum, one
// sums e^(x - max), and one selects; the [rows, V] log-probabilities are
// never written. The exponentials are float32's (16 lanes, a degree-7
// polynomial), summed in double: the logits are float32 and carry more
// error than that, and exponentials in double would cost several times
// more.

// sum_v e^(x_v - top) of a float row whose largest element is top: each
// exponential in float (vector_math.h's, 16 lanes), summed in double.
__attribute__((always_inline)) inline double row_sum_exp_loop(const float* __restrict x, int64_t n,
                                                              float top) {
  constexpr int kLanes = 16;
  // Sixteen blocks of 16 summed in float lanes, each lane's 16 terms (each
  // at most 1) then added to its double sum: a float sum of 16 terms is off
  // by at most 16 units in its last place, far below the logits' error, and
  // the widening is once per 256 exponentials instead of once each.
  constexpr int64_t kChunk = 16 * kLanes;
  double lane_sum[kLanes] = {};
  int64_t v = 0;
  for (; v + kChunk <= n; v += kChunk) {
    float chunk[kLanes] = {};
    for (int64_t c = 0; c < kChunk; c += kLanes)
      for (int j = 0; j < kLanes; ++j) chunk[j] += exp_nonpositive(x[v + c + j] - top);
    for (int j = 0; j < kLanes; ++j) lane_sum[j] += static_cast<double>(chunk[j]);
  }
  for (; v + kLanes <= n; v += kLanes)
    for (int j = 0; j < kLanes; ++j)
      lane_sum[j] += static_cast<double>(exp_nonpositive(x[v + j] - top));
  double sum = 0;
  for (; v < n; ++v) sum += static_cast<double>(exp_nonpositive(x[v] - top));
  for (const double s : lane_sum) sum += s;
  return sum;
}

__attribute__((target("avx512f,avx512dq"))) double row_sum_exp_avx512(const float* x, int64_t n,
                                                                      float top) {
  return row_sum_exp_loop(x, n, top);
}

__attribute__((target("avx2,fma"))) double row_sum_exp_avx2(const float* x, int64_t n, float top) {
  return row_sum_exp_loop(x, n, top);
}

double row_sum_exp_portable(const float* x, int64_t n, float top) {
  return row_sum_exp_loop(x, n, top);
}

using Lanes16 = float __attribute__((vector_size(16 * sizeof(float))));

// The largest of 16 lanes: halves against halves, four times (vector
// maxima, built per instruction set). By reference: a 64-byte vector by
// value would change the portable build's ABI.
__attribute__((always_inline)) inline float largest_of_lanes(const Lanes16& lanes) {
  Lanes16 m = lanes;
  Lanes16 h =
      __builtin_shufflevector(m, m, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
  m = m > h ? m : h;
  h = __builtin_shufflevector(m, m, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
  m = m > h ? m : h;
  h = __builtin_shufflevector(m, m, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  m = m > h ? m : h;
  return m[0] > m[1] ? m[0] : m[1];
}

// The largest element of a float row, in four running vectors of 16
// (a single one would wait on its own maximum at every vector). NaNs are
// passed over: the sum of exponentials after it turns a NaN into NaN.
// Replaces one LibTorch amax over all the rows (one more pass).
__attribute__((always_inline)) inline float row_max_loop(const float* __restrict x, int64_t n) {
  constexpr float kLow = -std::numeric_limits<float>::infinity();
  Lanes16 m[4];
  for (auto& lanes : m)
    for (int j = 0; j < 16; ++j) lanes[j] = kLow;
  int64_t v = 0;
  for (; v + 64 <= n; v += 64)
    for (int u = 0; u < 4; ++u) {
      Lanes16 a;
      std::memcpy(&a, x + v + 16 * u, sizeof(a));
      m[u] = a > m[u] ? a : m[u];
    }
  for (; v + 16 <= n; v += 16) {
    Lanes16 a;
    std::memcpy(&a, x + v, sizeof(a));
    m[0] = a > m[0] ? a : m[0];
  }
  m[0] = m[1] > m[0] ? m[1] : m[0];
  m[2] = m[3] > m[2] ? m[3] : m[2];
  m[0] = m[2] > m[0] ? m[2] : m[0];
  float top = largest_of_lanes(m[0]);
  for (; v < n; ++v) top = x[v] > top ? x[v] : top;
  return top;
}

__attribute__((target("avx512f,avx512dq"))) float row_max_avx512(const float* x, int64_t n) {
  return row_max_loop(x, n);
}

__attribute__((target("avx2,fma"))) float row_max_avx2(const float* x, int64_t n) {
  return row_max_loop(x, n);
}

float row_max_portable(const float* x, int64_t n) { return row_max_loop(x, n); }

float row_max(const float* x, int64_t n) {
  static const auto kernel = widest_kernel(row_max_avx512, row_max_avx2, row_max_portable);
  return kernel(x, n);
}

// log sum_v e^(x_v) of a float row whose largest element is `top`, in
// double; NaN when that is NaN or infinite, or the sum is not finite.
double row_log_sum_exp(const float* x, int64_t n, float top) {
  static const auto kernel =
      widest_kernel(row_sum_exp_avx512, row_sum_exp_avx2, row_sum_exp_portable);
  if (!std::isfinite(top)) return std::numeric_limits<double>::quiet_NaN();
  const double sum = kernel(x, n, top);
  return std::isfinite(sum) ? top + std::log(sum) : std::numeric_limits<double>::quiet_NaN();
}

// The best k of x[b][v] + offset[b] over (b, v) into scores / indices
// (b * V + v), best first, ties to the lower index. Blocks of 16 whose
// every element falls short of the k-th best so far are skipped in one test.
__attribute__((always_inline)) inline void select_best_loop(const float* x, const double* offset,
                                                            int64_t beams, int64_t vocab, int64_t k,
                                                            double* scores, int64_t* indices) {
  constexpr int kBlock = 16;
  int64_t count = 0;
  auto offer = [&](double score, int64_t index) {
    if (count == k && !(score > scores[k - 1])) return;
    int64_t at = count < k ? count++ : k - 1;
    for (; at > 0 && scores[at - 1] < score; --at) {
      scores[at] = scores[at - 1];
      indices[at] = indices[at - 1];
    }
    scores[at] = score;
    indices[at] = index;
  };
  for (int64_t b = 0; b < beams; ++b) {
    const float* row = x + b * vocab;
    const double shift = offset[b];
    int64_t v = 0;
    // A block is skipped when its largest float is at or below `low`, two
    // float steps under scores[k - 1] - shift: then each of its scores,
    // x + shift in double, is at most scores[k - 1] (the rounding of the
    // double sums is far below a float step). One maximum in float per
    // block (vector maxima, built per instruction set) instead of sixteen
    // conversions, additions and compares. (A NaN among the logits sends
    // the whole call to LibTorch.)
    double bar_for = std::numeric_limits<double>::quiet_NaN();
    float low = 0;
    for (; v + kBlock <= vocab; v += kBlock) {
      if (count == k) {
        if (!(scores[k - 1] == bar_for)) {
          bar_for = scores[k - 1];
          low = static_cast<float>(bar_for - shift);
          for (int step = 0; step < 2; ++step)
            low = std::nextafter(low, -std::numeric_limits<float>::infinity());
        }
        static_assert(kBlock == 16, "a block is one Lanes16");
        Lanes16 block;
        std::memcpy(&block, row + v, sizeof(block));
        if (!(largest_of_lanes(block) > low)) continue;
      }
      for (int j = 0; j < kBlock; ++j)
        offer(static_cast<double>(row[v + j]) + shift, b * vocab + v + j);
    }
    for (; v < vocab; ++v) offer(static_cast<double>(row[v]) + shift, b * vocab + v);
  }
}

using SelectBest = void (*)(const float*, const double*, int64_t, int64_t, int64_t, double*,
                            int64_t*);

__attribute__((target("avx512f,avx512dq"))) void select_best_avx512(const float* x,
                                                                    const double* offset,
                                                                    int64_t beams, int64_t vocab,
                                                                    int64_t k, double* scores,
                                                                    int64_t* indices) {
  select_best_loop(x, offset, beams, vocab, k, scores, indices);
}

__attribute__((target("avx2,fma"))) void select_best_avx2(const float* x, const double* offset,
                                                          int64_t beams, int64_t vocab, int64_t k,
                                                          double* scores, int64_t* indices) {
  select_best_loop(x, offset, beams, vocab, k, scores, indices);
}

void select_best_portable(const float* x, const double* offset, int64_t beams, int64_t vocab,
                          int64_t k, double* scores, int64_t* indices) {
  select_best_loop(x, offset, beams, vocab, k, scores, indices);
}

void select_best(const float* x, const double* offset, int64_t beams, int64_t vocab, int64_t k,
                 double* scores, int64_t* indices) {
  static const auto kernel =
      widest_kernel<SelectBest>(select_best_avx512, select_best_avx2, select_best_portable);
  kernel(x, offset, beams, vocab, k, scores, indices);
}

}  // namespace

std::pair<at::Tensor, at::Tensor> top_log_prob_extensions(const at::Tensor& logits,
                                                          const at::Tensor& alive, int64_t k) {
  if (logits.dim() != 2 || alive.dim() != 2 || logits.size(0) != alive.size(0) * alive.size(1) ||
      k < 1 || k > alive.size(1) * logits.size(1))
    throw std::invalid_argument(
        "top_log_prob_extensions: expected logits [n * beams, V], alive [n, beams] and 1 <= k <= "
        "beams * V");
  const int64_t n = alive.size(0), beams = alive.size(1), vocab = logits.size(1);
  const auto libtorch = [&] {
    const at::Tensor log_probs =
        at::log_softmax(logits.to(at::kDouble), -1).view({n, beams, vocab}) +
        alive.to(logits.device(), at::kDouble).unsqueeze(2);
    auto [scores, indices] = log_probs.view({n, beams * vocab}).topk(k, 1);
    return std::make_pair(scores, indices);
  };
  if (!logits.device().is_cpu() || logits.scalar_type() != at::kFloat || n == 0) return libtorch();
  const at::Tensor x = logits.contiguous();
  const at::Tensor shifts = alive.to(at::kDouble).contiguous().clone();
  at::Tensor scores = at::empty({n, k}, shifts.options());
  at::Tensor indices = at::empty({n, k}, shifts.options().dtype(at::kLong));
  const float* px = x.data_ptr<float>();
  double* pshift = shifts.data_ptr<double>();
  double* pscores = scores.data_ptr<double>();
  int64_t* pindices = indices.data_ptr<int64_t>();
  std::atomic<bool> finite{true};
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      for (int64_t b = 0; b < beams; ++b) {
        const int64_t row = e * beams + b;
        const float* values = px + row * vocab;
        const double lse = row_log_sum_exp(values, vocab, row_max(values, vocab));
        if (std::isnan(lse)) finite = false;
        pshift[row] -= lse;
      }
      select_best(px + e * beams * vocab, pshift + e * beams, beams, vocab, k, pscores + e * k,
                  pindices + e * k);
    }
  });
  if (!finite) return libtorch();  // a NaN or an infinity among the logits
  return {scores, indices};
}

}  // namespace garden::kernels
