#include "garden/kernels/losses.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "garden/base/error.h"
#include "garden/kernels/widen.h"
#include "simd/vector_math.h"

namespace garden::kernels {

namespace {

// The per-token cross-entropy against the soft target (before the entropy
// constant), -sum_v target_v * log p_v, as one autograd node over [N, V]
// rows. The composite form (log_softmax, gather, sum, and autograd's dense
// scatter and add for their gradients) makes five passes over the logits in
// the backward alone. Here, per row, one pass finds the maximum m and the
// sum of the logits, and a second writes e_v = e^(x_v - m) and sums them (S),
// both vectorized (vector_math.h's exponentials); the row is still in cache
// for the second. Then log p_v = x_v - lse with lse = m + log S, and
// sum_v log p_v = sum_v x_v - V lse. The backward is one pass over the saved
// e: g * (e_v / S - target_v), since the soft target sums to 1. The [N, V]
// probabilities are never written normalized (LibTorch's softmax takes a
// third pass).
struct RowStats {
  double sum;      // of the logits
  double sum_exp;  // S
  int64_t argmax;  // the first id holding the maximum; 0 when none does (all NaN)
};

// The row's sum (16 partial sums in double, then the tail's, then the
// partials in lane order), its maximum and the first id holding it (0 when
// none does: all NaN).
template <typename T>
__attribute__((always_inline)) inline void row_top_loop(const T* __restrict row, int64_t vocab,
                                                        RowStats& stats) {
  // Sixteen partial sums and maxima: vectorizable, and no worse rounding
  // than one sum.
  constexpr int kLanes = 16;
  constexpr T kLowest = -std::numeric_limits<T>::infinity();
  double partial[kLanes] = {};
  T lane_top[kLanes];
  for (T& t : lane_top) t = kLowest;
  int64_t v = 0;
  for (; v + kLanes <= vocab; v += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      partial[k] += row[v + k];
      lane_top[k] = row[v + k] > lane_top[k] ? row[v + k] : lane_top[k];
    }
  T top = kLowest;
  for (; v < vocab; ++v) {
    stats.sum += row[v];
    top = row[v] > top ? row[v] : top;
  }
  for (double s : partial) stats.sum += s;
  for (T t : lane_top) top = t > top ? t : top;
  // The first id holding the maximum (std::max_element's), a block of 16 at
  // a time.
  for (int64_t b = 0; b < vocab; b += kLanes) {
    const int64_t e = std::min<int64_t>(vocab, b + kLanes);
    bool hit = false;
    for (int64_t j = b; j < e; ++j) hit |= row[j] == top;
    if (!hit) continue;
    for (stats.argmax = b; row[stats.argmax] != top;) ++stats.argmax;
    break;
  }
}

// e^(x - m), written and summed in double; a NaN or infinite logit makes
// S NaN, and with it the row's loss and gradient.
template <typename T>
__attribute__((always_inline)) inline void row_exp_loop(const T* __restrict row, T* __restrict exps,
                                                        int64_t vocab, RowStats& stats) {
  constexpr int kLanes = 16;
  const T shift = row[stats.argmax];
  double lane_sum[kLanes] = {};
  int64_t v = 0;
  for (; v + kLanes <= vocab; v += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const T e = exp_nonpositive(static_cast<T>(row[v + k] - shift));
      exps[v + k] = e;
      lane_sum[k] += e;
    }
  for (; v < vocab; ++v) {
    const T e = exp_nonpositive(static_cast<T>(row[v] - shift));
    exps[v] = e;
    stats.sum_exp += e;
  }
  for (double s : lane_sum) stats.sum_exp += s;
}

template <typename T>
__attribute__((always_inline)) inline RowStats row_stats_loop(const T* __restrict row,
                                                              T* __restrict exps, int64_t vocab) {
  RowStats stats{0.0, 0.0, 0};
  row_top_loop(row, vocab, stats);
  row_exp_loop(row, exps, vocab, stats);
  return stats;
}

// row_top_loop for float32 in AVX-512, to the bit: GCC built that loop from
// scalar loads, and the search for the maximum's first id compared element
// by element, several times what one read and one write of the logits
// cost. Here each of
// the 16 lanes keeps its maximum and the first id that reached it (an id
// replaces the lane's only on a strictly larger value); the first id of the
// row's maximum is the least of the ids of the lanes that hold it. A row
// with no finite maximum (all -inf or NaN) takes the scalar search.
__attribute__((target("avx512f,avx512dq"), noinline)) void row_top_avx512(
    const float* __restrict row, int64_t vocab, RowStats& stats) {
  constexpr int kLanes = 16;
  const float lowest = -std::numeric_limits<float>::infinity();
  __m512d sum_low = _mm512_setzero_pd(), sum_high = _mm512_setzero_pd();
  __m512 lane_top = _mm512_set1_ps(lowest);
  __m512i lane_id = _mm512_set1_epi32(-1);
  __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(kLanes);
  int64_t v = 0;
  for (; v + kLanes <= vocab; v += kLanes) {
    const __m512 x = _mm512_loadu_ps(row + v);
    const __m512d pairs = _mm512_castps_pd(x);
    const __m256 low = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, pairs, 0));
    const __m256 high = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, pairs, 1));
    sum_low = _mm512_add_pd(sum_low, _mm512_maskz_cvtps_pd(0xFF, low));
    sum_high = _mm512_add_pd(sum_high, _mm512_maskz_cvtps_pd(0xFF, high));
    const __mmask16 larger = _mm512_cmp_ps_mask(x, lane_top, _CMP_GT_OQ);
    lane_top = _mm512_mask_mov_ps(lane_top, larger, x);
    lane_id = _mm512_mask_mov_epi32(lane_id, larger, ids);
    ids = _mm512_add_epi32(ids, step);
  }
  alignas(64) double partial[kLanes];
  alignas(64) float tops[kLanes];
  alignas(64) int32_t first[kLanes];
  _mm512_store_pd(partial, sum_low);
  _mm512_store_pd(partial + 8, sum_high);
  _mm512_store_ps(tops, lane_top);
  _mm512_store_si512(first, lane_id);
  float top = lowest;
  int64_t argmax = -1;
  for (int64_t t = v; t < vocab; ++t) {
    stats.sum += row[t];
    if (row[t] > top) {
      top = row[t];
      argmax = t;
    }
  }
  for (double s : partial) stats.sum += s;
  for (int k = 0; k < kLanes; ++k) {
    if (tops[k] > top || (tops[k] == top && first[k] >= 0 && first[k] < argmax)) {
      top = tops[k];
      argmax = first[k];
    }
  }
  if (!(top > lowest)) {
    RowStats scalar{0.0, 0.0, 0};
    row_top_loop(row, vocab, scalar);
    stats.argmax = scalar.argmax;
    return;
  }
  stats.argmax = argmax;
}

template <typename T>
__attribute__((target("avx512f,avx512dq"))) RowStats row_stats_avx512(const T* row, T* exps,
                                                                      int64_t vocab) {
  if constexpr (std::is_same_v<T, float>) {
    RowStats stats{0.0, 0.0, 0};
    row_top_avx512(row, vocab, stats);
    row_exp_loop(row, exps, vocab, stats);
    return stats;
  }
  return row_stats_loop(row, exps, vocab);
}
template <typename T>
__attribute__((target("avx2,fma"))) RowStats row_stats_avx2(const T* row, T* exps, int64_t vocab) {
  return row_stats_loop(row, exps, vocab);
}
template <typename T>
RowStats row_stats_portable(const T* row, T* exps, int64_t vocab) {
  return row_stats_loop(row, exps, vocab);
}

template <typename T>
RowStats row_stats(const T* row, T* exps, int64_t vocab) {
  static const auto kernel =
      widest_kernel(row_stats_avx512<T>, row_stats_avx2<T>, row_stats_portable<T>);
  return kernel(row, exps, vocab);
}

class SmoothedCrossEntropy : public torch::autograd::Function<SmoothedCrossEntropy> {
 public:
  // logits [N, V] CPU float/double, labels [N] int64 in [0, V) -> [N].
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits_in,
                            const at::Tensor& labels, double confidence, double low_confidence) {
    RECORD_FUNCTION("garden::smoothed_cross_entropy", std::vector<c10::IValue>());
    const at::Tensor logits = logits_in.contiguous();
    const at::Tensor ids = labels.contiguous();
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    at::Tensor exps = at::empty_like(logits);
    at::Tensor inverse_sums = at::empty({rows}, logits.options().dtype(at::kDouble));
    at::Tensor xentropy = at::empty({rows}, logits.options());
    const int64_t* id = ids.data_ptr<int64_t>();
    double* inverse = inverse_sums.data_ptr<double>();
    AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "garden_smoothed_xent", [&] {
      const scalar_t* x = logits.data_ptr<scalar_t>();
      scalar_t* e = exps.data_ptr<scalar_t>();
      scalar_t* out = xentropy.data_ptr<scalar_t>();
      at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
          const scalar_t* row = x + n * vocab;
          const RowStats stats = row_stats(row, e + n * vocab, vocab);
          inverse[n] = 1.0 / stats.sum_exp;
          const double lse = static_cast<double>(row[stats.argmax]) + std::log(stats.sum_exp);
          const double label_log_prob = static_cast<double>(row[id[n]]) - lse;
          // Without smoothing the sum is left out, as the composite form
          // does: 0 * sum would turn a -inf log-probability into NaN.
          const double smoothed =
              low_confidence > 0.0 ? low_confidence * (stats.sum - static_cast<double>(vocab) * lse)
                                   : 0.0;
          out[n] =
              static_cast<scalar_t>(-(confidence - low_confidence) * label_log_prob - smoothed);
        }
      });
    });
    ctx->save_for_backward({exps, inverse_sums, ids});
    ctx->saved_data["confidence"] = confidence;
    ctx->saved_data["low_confidence"] = low_confidence;
    return xentropy;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& exps = saved[0];
    const double* inverse = saved[1].data_ptr<double>();
    const at::Tensor& ids = saved[2];
    const double confidence = ctx->saved_data["confidence"].toDouble();
    const double low = ctx->saved_data["low_confidence"].toDouble();
    const at::Tensor grad = grads[0].contiguous();
    // The gradient overwrites the saved exponentials, which nothing else
    // holds: one [N, V] buffer fewer at the step's peak, and one pass that
    // reads and writes the same memory. A second backward through this graph
    // (retain_graph) then fails in LibTorch's check of the saved variable's
    // version, as for any saved tensor modified in place.
    at::Tensor grad_logits = exps;
    const int64_t rows = exps.size(0), vocab = exps.size(1);
    const int64_t* id = ids.data_ptr<int64_t>();
    AT_DISPATCH_FLOATING_TYPES(exps.scalar_type(), "garden_smoothed_xent_backward", [&] {
      const scalar_t* g = grad.data_ptr<scalar_t>();
      scalar_t* out = grad_logits.data_ptr<scalar_t>();
      at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
          scalar_t* row = out + n * vocab;
          const scalar_t scale = g[n], shift = static_cast<scalar_t>(low);
          const scalar_t normalize = static_cast<scalar_t>(inverse[n]);
          for (int64_t v = 0; v < vocab; ++v) row[v] = scale * (row[v] * normalize - shift);
          row[id[n]] -= scale * static_cast<scalar_t>(confidence - low);
        }
      });
    });
    // Written through its pointer, so the version LibTorch checks is raised here.
    grad_logits.unsafeGetTensorImpl()->bump_version();
    return {grad_logits, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The same node from LibTorch's operations, for what the kernel above does
// not take (CUDA tensors, bfloat16 and half). Forward: one log_softmax (under
// autocast in float32, as before), a gather and a row sum. Backward: three
// passes over the saved log-probabilities, in place: exp, subtract the low
// target, multiply by the rows' gradients, then the labels' columns. The
// composite form's backward (autograd's dense scatter of the gather, the add
// of the two gradients, log_softmax's backward) made about eight passes and
// two more [N, V] buffers.
struct LibrarySmoothedCrossEntropy : public torch::autograd::Function<LibrarySmoothedCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& ids, double confidence, double low_confidence) {
    const at::Tensor log_probs = torch::log_softmax(logits, -1);
    const at::Tensor id_column = ids.unsqueeze(1);
    at::Tensor xentropy =
        log_probs.gather(1, id_column).squeeze(1) * -(confidence - low_confidence);
    if (low_confidence > 0.0) xentropy.sub_(log_probs.sum(-1), low_confidence);
    ctx->save_for_backward({log_probs, id_column});
    ctx->saved_data["confidence"] = confidence;
    ctx->saved_data["low_confidence"] = low_confidence;
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return xentropy;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double confidence = ctx->saved_data["confidence"].toDouble();
    const double low = ctx->saved_data["low_confidence"].toDouble();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    // The saved log-probabilities become the gradient (nothing else holds
    // them; a second backward fails LibTorch's version check of them).
    at::Tensor grad_logits = saved[0];
    const at::Tensor g = grads[0].to(grad_logits.scalar_type()).unsqueeze(1);
    grad_logits.exp_();
    if (low > 0.0) grad_logits.sub_(low);
    grad_logits.mul_(g);
    grad_logits.scatter_add_(1, saved[1], g * -(confidence - low));
    return {grad_logits.to(dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The fused kernel indexes rows by the ids unchecked: one Error, "WHAT must
// lie in [0, V)", for any outside.
void check_ids(const at::Tensor& ids, int64_t vocab, const std::string& what) {
  if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= vocab))
    throw Error(what + " must lie in [0, " + std::to_string(vocab) + ")");
}

bool has_fused_kernel(const at::Tensor& logits) {
  return logits.device().is_cpu() &&
         (logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kDouble);
}

}  // namespace

at::Tensor PaddedCrossEntropy::mean() const { return loss_sum / weight_sum; }

at::Tensor smoothed_cross_entropy_rows(const at::Tensor& logits, const at::Tensor& ids,
                                       double confidence, double low_confidence) {
  return LibrarySmoothedCrossEntropy::apply(logits, ids, confidence, low_confidence);
}

at::Tensor sparse_cross_entropy_rows(const at::Tensor& given_logits, const at::Tensor& ids) {
  const at::Tensor logits = widened_on_cpu(given_logits);
  if (logits.dim() != 2 || ids.dim() != 1 || ids.size(0) != logits.size(0) ||
      !at::isIntegralType(ids.scalar_type(), /*includeBool=*/false))
    throw Error("sparse_cross_entropy_rows: expected logits [N, V] and integer ids [N]");
  const at::Tensor label_ids = ids.to(torch::kLong);
  // LibTorch's kernel checks its ids on the device, without a host read.
  if (!has_fused_kernel(logits))
    return at::cross_entropy_loss(logits, label_ids, {}, at::Reduction::None);
  check_ids(label_ids, logits.size(1), "sparse_cross_entropy_rows: ids");
  return SmoothedCrossEntropy::apply(logits, label_ids, 1.0, 0.0);
}

PaddedCrossEntropy padded_cross_entropy_loss(const at::Tensor& given_logits,
                                             const at::Tensor& labels, double smoothing,
                                             int64_t pad_id) {
  // bfloat16 logits on the CPU (autocast's output projection) take the fused
  // kernel widened to float32: one cast, against LibTorch 1.13's bfloat16
  // log_softmax and its passes. The gradient returns in bfloat16.
  const at::Tensor logits = widened_on_cpu(given_logits);
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) ||
      logits.size(1) != labels.size(1)) {
    throw Error(
        "padded_cross_entropy_loss: expected logits [batch, length, vocab] and labels "
        "[batch, length]");
  }
  const int64_t vocab = logits.size(2);
  if (vocab < 2 || smoothing < 0.0 || smoothing >= 1.0) {
    throw Error("padded_cross_entropy_loss: needs vocab >= 2 and 0 <= smoothing < 1");
  }
  const double confidence = 1.0 - smoothing;
  const double low_confidence = smoothing / static_cast<double>(vocab - 1);

  // -sum_v target_v * log p_v with target = low everywhere plus
  // (confidence - low) at the label, without building the one-hot targets.
  const at::Tensor label_ids = labels.to(torch::kLong);
  at::Tensor xentropy;
  if (has_fused_kernel(logits)) {
    const at::Tensor flat_ids = label_ids.reshape({-1});
    check_ids(flat_ids, vocab, "padded_cross_entropy_loss: labels");
    xentropy = SmoothedCrossEntropy::apply(logits.reshape({-1, vocab}), flat_ids, confidence,
                                           low_confidence)
                   .view(labels.sizes());
  } else {
    xentropy = smoothed_cross_entropy_rows(logits.reshape({-1, vocab}), label_ids.reshape({-1}),
                                           confidence, low_confidence)
                   .view(labels.sizes());
  }

  // The soft target's entropy, the best achievable cross-entropy; the 1e-20
  // keeps log finite when smoothing is 0 (then the term is 0 * log(1e-20)).
  const double normalizing_constant =
      -(confidence * std::log(confidence) +
        static_cast<double>(vocab - 1) * low_confidence * std::log(low_confidence + 1e-20));
  xentropy = xentropy - normalizing_constant;

  PaddedCrossEntropy result;
  result.weights = label_ids.ne(pad_id).to(logits.scalar_type());
  result.token_losses = xentropy * result.weights;
  result.loss_sum = result.token_losses.sum();
  result.weight_sum = result.weights.sum();
  return result;
}

}  // namespace garden::kernels
