#include "garden/kernels/sampling.h"

#include "garden/kernels/widen.h"
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

// ---- Sampling from a softmax ------------------------------------------------------
// ELECTRA's generator draws one id per masked position from the softmax of
// its [rows, V] logits. Model Garden's Gumbel-argmax draws V uniforms and
// takes two logs of each, passes over [rows, V] in LibTorch. The same
// distribution by its
// inverse CDF needs one uniform a row: the weights e^(x_v - max) are summed
// in blocks of 16 (the exp above, in double, vectorized), the block holding
// u * total is found by walking the block sums, and the id inside it by
// walking its 16 weights again.
constexpr int64_t kSampleBlock = 16;

// The sums of e^(x_v - shift) over each block of 16 ids (the last may be
// shorter) into sums[ceil(n / 16)].
__attribute__((always_inline)) inline void block_sums_exp_loop(const float* __restrict x, int64_t n,
                                                               double shift,
                                                               double* __restrict sums) {
  int64_t v = 0, block = 0;
  for (; v + kSampleBlock <= n; v += kSampleBlock, ++block) {
    double e[kSampleBlock];
    for (int j = 0; j < kSampleBlock; ++j)
      e[j] = exp_nonpositive(static_cast<double>(x[v + j]) - shift);
    double sum = 0;
    for (int j = 0; j < kSampleBlock; ++j) sum += e[j];
    sums[block] = sum;
  }
  if (v < n) {
    double sum = 0;
    for (; v < n; ++v) sum += exp_nonpositive(static_cast<double>(x[v]) - shift);
    sums[block] = sum;
  }
}

__attribute__((target("avx512f,avx512dq"))) void block_sums_exp_avx512(const float* x, int64_t n,
                                                                       double shift, double* sums) {
  block_sums_exp_loop(x, n, shift, sums);
}
__attribute__((target("avx2,fma"))) void block_sums_exp_avx2(const float* x, int64_t n,
                                                             double shift, double* sums) {
  block_sums_exp_loop(x, n, shift, sums);
}
void block_sums_exp_portable(const float* x, int64_t n, double shift, double* sums) {
  block_sums_exp_loop(x, n, shift, sums);
}

// The id drawn from row x [n] (largest element `top`, finite) with weights
// e^(x_v - top), id `disallow` (or -1) weighted e^(x_v - 1000 - top), for the
// uniform u in [0, 1); -1 when every weight is 0 in double.
int64_t sample_row(const float* x, int64_t n, float top, int64_t disallow, double u,
                   std::vector<double>& sums) {
  static const auto kernel =
      widest_kernel(block_sums_exp_avx512, block_sums_exp_avx2, block_sums_exp_portable);
  const int64_t blocks = (n + kSampleBlock - 1) / kSampleBlock;
  sums.resize(static_cast<std::size_t>(blocks));
  kernel(x, n, top, sums.data());
  const auto weight = [&](int64_t v) {
    const double logit = static_cast<double>(x[v]) - (v == disallow ? 1000.0 : 0.0);
    return exp_nonpositive(logit - top);
  };
  if (disallow >= 0) {  // that block again, its id weighted as Model Garden weights it
    const int64_t first = disallow / kSampleBlock * kSampleBlock;
    double sum = 0;
    for (int64_t v = first; v < std::min(n, first + kSampleBlock); ++v) sum += weight(v);
    sums[static_cast<std::size_t>(disallow / kSampleBlock)] = sum;
  }
  double total = 0;
  for (const double s : sums) total += s;
  if (!(total > 0)) return -1;
  // The first block whose cumulative sum passes u * total, else (rounding)
  // the last with any weight; in it, the same walk over its ids.
  const double target = u * total;
  double before = 0;
  int64_t block = -1;
  for (int64_t b = 0; b < blocks; ++b) {
    if (sums[static_cast<std::size_t>(b)] <= 0) continue;
    block = b;
    if (target < before + sums[static_cast<std::size_t>(b)]) break;
    before += sums[static_cast<std::size_t>(b)];
  }
  double rest = target - before;
  int64_t chosen = -1;
  for (int64_t v = block * kSampleBlock; v < std::min(n, (block + 1) * kSampleBlock); ++v) {
    const double w = weight(v);
    if (w <= 0) continue;
    chosen = v;
    if (rest < w) break;
    rest -= w;
  }
  return chosen;
}

}  // namespace

at::Tensor sample_from_softmax(const at::Tensor& logits, const at::Tensor& disallow_ids) {
  torch::NoGradGuard no_grad;
  // bfloat16 logits on the CPU (ELECTRA's generator under autocast) are drawn
  // from by the float32 kernel, on their values widened.
  if (is_cpu_bfloat16(logits)) return sample_from_softmax(widened_on_cpu(logits), disallow_ids);
  const int64_t vocab = logits.dim() > 0 ? logits.size(-1) : 0;
  std::vector<int64_t> shape(logits.sizes().begin(), logits.sizes().end());
  if (!shape.empty()) shape.pop_back();
  if (logits.dim() == 0 || vocab == 0)
    throw std::invalid_argument("sample_from_softmax: expected logits [..., V] with V >= 1");
  if (disallow_ids.defined() && disallow_ids.sizes() != at::IntArrayRef(shape))
    throw std::invalid_argument(
        "sample_from_softmax: disallow_ids must have the logits' shape "
        "without the last dimension");
  // Model Garden's formula, as LibTorch computes it: any device or type, and
  // rows holding a NaN or an infinity.
  const auto gumbel = [&] {
    at::Tensor scores = at::rand_like(logits, logits.options(), at::MemoryFormat::Contiguous);
    scores.add_(1e-9).log_().neg_().add_(1e-9).log_().neg_().add_(logits.detach());
    if (disallow_ids.defined()) {
      at::Tensor index = disallow_ids.to(scores.device(), at::kLong).unsqueeze(-1);
      scores.scatter_add_(-1, index, at::full(index.sizes(), -1000.0, scores.options()));
    }
    return scores.argmax(-1);
  };
  if (!logits.device().is_cpu() || logits.scalar_type() != at::kFloat) return gumbel();
  const at::Tensor x = logits.detach().contiguous().view({-1, vocab});
  const int64_t rows = x.size(0);
  const at::Tensor row_max = x.amax(1);  // NaN where a row holds one
  const float* ptop = row_max.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    if (!std::isfinite(ptop[r])) return gumbel();
  at::Tensor disallow;
  if (disallow_ids.defined()) {
    disallow = disallow_ids.to(at::kLong).contiguous().view({-1});
    if (rows > 0 && (disallow.min().item<int64_t>() < 0 || disallow.max().item<int64_t>() >= vocab))
      throw std::invalid_argument("sample_from_softmax: a disallowed id is outside [0, " +
                                  std::to_string(vocab) + ")");
  }
  const at::Tensor uniforms = at::rand({rows}, x.options().dtype(at::kDouble));
  at::Tensor ids = at::empty({rows}, x.options().dtype(at::kLong));
  const float* px = x.data_ptr<float>();
  const double* pu = uniforms.data_ptr<double>();
  const int64_t* pd = disallow.defined() ? disallow.data_ptr<int64_t>() : nullptr;
  int64_t* pids = ids.data_ptr<int64_t>();
  std::atomic<bool> drawn{true};
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> sums;
    for (int64_t r = begin; r < end; ++r) {
      pids[r] = sample_row(px + r * vocab, vocab, ptop[r], pd ? pd[r] : -1, pu[r], sums);
      if (pids[r] < 0) drawn = false;
    }
  });
  if (!drawn) return gumbel();  // a row whose only weight is its disallowed id's e^-1000
  return ids.view(shape);
}

}  // namespace garden::kernels
