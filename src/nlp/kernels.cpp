// The Transformer's CPU kernels; see include/garden/nlp/kernels.h.
#include "garden/nlp/kernels.h"

#include "bias_sums.h"
#include "dropout_bits.h"
#include "small_gemm.h"
#include "vector_math.h"
#include "widen.h"

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

namespace garden::nlp {

uint64_t draw_dropout_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

namespace {

// ---- dropout ---------------------------------------------------------------------
// LibTorch's CPU dropout draws every mask bit through bernoulli_ with a
// mt19937 draw per element; without MKL that was the largest non-matmul cost
// of a translation training step (bench/translation_bench --profile). This one
// is the same inverted dropout (each element is zeroed with probability p, the
// rest scaled by 1 / (1 - p)) with the bits from a counter-based generator:
// element pair j of a call gets splitmix64(seed + j * golden_gamma), 32 bits
// each, so the mask does not depend on the thread count. The seed is drawn
// from LibTorch's default CPU generator, so torch::manual_seed and a saved
// generator state reproduce it.

constexpr int64_t kDropoutGrain = 32768;  // element pairs per parallel task

// float32 elements [2 begin, min(2 end, n)): each chunk's random words
// first, one splitmix64 per pair in a loop that vectorizes (64-bit
// multiplies: AVX-512 DQ has them), then its elements in another. The same
// bits and products as the loop of dropout_forward_kernel below, so the same
// mask and values to the bit; that scalar loop took 6.5 % of a translation
// tiny step (perf, `translation_bench --threads 2`).
template <bool Relu>
__attribute__((always_inline)) inline void dropout_pairs_loop(
    const float* __restrict x, float* __restrict y, uint8_t* __restrict keep, int64_t n,
    int64_t begin, int64_t end, uint64_t seed, uint32_t threshold, float scale) {
  constexpr int64_t kChunk = 512;  // pairs
  alignas(64) uint32_t bits[2 * kChunk];
  for (int64_t c = begin; c < end; c += kChunk) {
    const int64_t pairs = std::min(kChunk, end - c);
    draw_pair_bits(seed + static_cast<uint64_t>(c) * kGoldenGamma, pairs, bits);
    const int64_t first = 2 * c, count = std::min(2 * pairs, n - first);
    const float* __restrict in = x + first;
    float* __restrict out = y + first;
    uint8_t* __restrict kept = keep + first;
    // Two loops, because GCC vectorizes neither half of the one loop that
    // would store bytes and floats together: the values (k ? scale : 0 is
    // k * scale, k 0 or 1), then the mask's bytes from the same bits.
#pragma GCC ivdep
    for (int64_t i = 0; i < count; ++i) {
      const float v = in[i];
      const bool k = (bits[i] >= threshold) & (!Relu || v > 0.0f);
      out[i] = v * (k ? scale : 0.0f);
    }
#pragma GCC ivdep
    for (int64_t i = 0; i < count; ++i)
      kept[i] = (bits[i] >= threshold) & (!Relu || in[i] > 0.0f);
  }
}

using DropoutPairs = void (*)(const float*, float*, uint8_t*, int64_t, int64_t, int64_t, uint64_t,
                              uint32_t, float);

template <bool Relu>
__attribute__((target("avx512f,avx512dq"))) void dropout_pairs_avx512(
    const float* x, float* y, uint8_t* keep, int64_t n, int64_t begin, int64_t end, uint64_t seed,
    uint32_t threshold, float scale) {
  dropout_pairs_loop<Relu>(x, y, keep, n, begin, end, seed, threshold, scale);
}

template <bool Relu>
__attribute__((target("avx2,fma"))) void dropout_pairs_avx2(const float* x, float* y, uint8_t* keep,
                                                            int64_t n, int64_t begin, int64_t end,
                                                            uint64_t seed, uint32_t threshold,
                                                            float scale) {
  dropout_pairs_loop<Relu>(x, y, keep, n, begin, end, seed, threshold, scale);
}

template <bool Relu>
void dropout_pairs_portable(const float* x, float* y, uint8_t* keep, int64_t n, int64_t begin,
                            int64_t end, uint64_t seed, uint32_t threshold, float scale) {
  dropout_pairs_loop<Relu>(x, y, keep, n, begin, end, seed, threshold, scale);
}

// keep[i] = bits(i) >= threshold; y[i] = x[i] * keep[i] * scale (branch-free).
// With Relu, also keep[i] = 0 where x[i] <= 0: relu then dropout in one pass.
// bfloat16 elements are computed in float (at::opmath_type) and rounded once,
// to nearest even, as a float result converted with .to(kBFloat16) would be.
template <typename T, bool Relu>
void dropout_forward_kernel(const T* x, T* y, uint8_t* keep, int64_t n, uint64_t seed,
                            uint32_t threshold, at::opmath_type<T> scale) {
  using Acc = at::opmath_type<T>;
  if constexpr (std::is_same_v<T, float>) {
    static const DropoutPairs pairs = widest_kernel<DropoutPairs>(
        dropout_pairs_avx512<Relu>, dropout_pairs_avx2<Relu>, dropout_pairs_portable<Relu>);
    at::parallel_for(int64_t{0}, (n + 1) / 2, kDropoutGrain, [&](int64_t begin, int64_t end) {
      pairs(x, y, keep, n, begin, end, seed, threshold, scale);
    });
    return;
  }
  at::parallel_for(0, (n + 1) / 2, kDropoutGrain, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const uint64_t bits = splitmix64(seed + static_cast<uint64_t>(j) * kGoldenGamma);
      const uint32_t r[2] = {static_cast<uint32_t>(bits), static_cast<uint32_t>(bits >> 32)};
      for (int64_t h = 0, i = 2 * j; h < 2 && i < n; ++h, ++i) {
        const Acc v = static_cast<Acc>(x[i]);
        const uint8_t k = (r[h] >= threshold) & (!Relu || v > Acc(0));
        keep[i] = k;
        y[i] = static_cast<T>(v * (static_cast<Acc>(k) * scale));
      }
    }
  });
}

// out[i] = grad[i] * keep[i] * scale over [begin, end), float32.
__attribute__((always_inline)) inline void dropout_backward_loop(const float* __restrict grad,
                                                                 const uint8_t* __restrict keep,
                                                                 float* __restrict out,
                                                                 int64_t begin, int64_t end,
                                                                 float scale) {
#pragma GCC ivdep
  for (int64_t i = begin; i < end; ++i) out[i] = grad[i] * (keep[i] ? scale : 0.0f);
}

using DropoutBackward = void (*)(const float*, const uint8_t*, float*, int64_t, int64_t, float);

__attribute__((target("avx512f,avx512dq"))) void dropout_backward_avx512(
    const float* grad, const uint8_t* keep, float* out, int64_t begin, int64_t end, float scale) {
  dropout_backward_loop(grad, keep, out, begin, end, scale);
}
__attribute__((target("avx2,fma"))) void dropout_backward_avx2(const float* grad,
                                                              const uint8_t* keep, float* out,
                                                              int64_t begin, int64_t end,
                                                              float scale) {
  dropout_backward_loop(grad, keep, out, begin, end, scale);
}
void dropout_backward_portable(const float* grad, const uint8_t* keep, float* out, int64_t begin,
                               int64_t end, float scale) {
  dropout_backward_loop(grad, keep, out, begin, end, scale);
}

template <typename T>
void dropout_backward_kernel(const T* grad, const uint8_t* keep, T* out, int64_t n,
                             at::opmath_type<T> scale) {
  using Acc = at::opmath_type<T>;
  if constexpr (std::is_same_v<T, float>) {
    static const DropoutBackward loop = widest_kernel<DropoutBackward>(
        dropout_backward_avx512, dropout_backward_avx2, dropout_backward_portable);
    at::parallel_for(int64_t{0}, n, 2 * kDropoutGrain,
                     [&](int64_t begin, int64_t end) { loop(grad, keep, out, begin, end, scale); });
    return;
  }
  at::parallel_for(0, n, 2 * kDropoutGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = static_cast<T>(static_cast<Acc>(grad[i]) * (static_cast<Acc>(keep[i]) * scale));
  });
}

// dropout(x), or dropout(relu(x)) when `relu`.
class FastDropout : public torch::autograd::Function<FastDropout> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double p,
                            bool relu) {
    RECORD_FUNCTION("garden::dropout", std::vector<c10::IValue>());
    const at::Tensor input = x.contiguous();
    at::Tensor output = at::empty_like(input);
    at::Tensor keep = at::empty(input.sizes(), input.options().dtype(at::kByte));
    // Drop when the 32 random bits are below p * 2^32.
    const uint32_t threshold = dropout_threshold(p);
    const double scale = 1.0 / (1.0 - p);
    const uint64_t seed = draw_dropout_seed();
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, input.scalar_type(), "garden_dropout", [&] {
      auto* kernel =
          relu ? dropout_forward_kernel<scalar_t, true> : dropout_forward_kernel<scalar_t, false>;
      kernel(input.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), keep.data_ptr<uint8_t>(),
             input.numel(), seed, threshold, static_cast<at::opmath_type<scalar_t>>(scale));
    });
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = scale;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor keep = ctx->get_saved_variables()[0];
    const double scale = ctx->saved_data["scale"].toDouble();
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_input = at::empty_like(grad);
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, grad.scalar_type(), "garden_dropout_backward", [&] {
          dropout_backward_kernel<scalar_t>(grad.data_ptr<scalar_t>(), keep.data_ptr<uint8_t>(),
                                            grad_input.data_ptr<scalar_t>(), grad.numel(),
                                            static_cast<at::opmath_type<scalar_t>>(scale));
        });
    return {grad_input, at::Tensor(), at::Tensor()};
  }
};

// ---- GELU ------------------------------------------------------------------------
// LibTorch 1.13's CPU gelu_backward (the erf form) took 11 ms a call in an
// ELECTRA-small step, ten times its forward and 17 % of the step
// (electra_bench --profile). Its derivative, d/dx [x Phi(x)] = Phi(x) +
// x phi(x), is computed here in one pass with no libm calls, so the loop
// vectorizes:
//   e = exp(-x^2 / 2) by range reduction to 2^n 2^f and a degree-6
//       polynomial of e^(f ln 2), |f| <= 1/2 (relative error about 1e-7);
//   phi(x) = e / sqrt(2 pi);
//   Phi(x) from erf(|x| / sqrt 2) = 1 - t (a1 + t (a2 + ... + t a5)) e,
//       t = 1 / (1 + p |x| / sqrt 2) (Abramowitz and Stegun 7.1.26,
//       absolute error at most 1.5e-7), mirrored for x < 0.
// Phi(x) and e = exp(-x^2 / 2) as above, for the derivative and the fused
// forward below.
inline void gelu_parts(float x, float& cdf, float& e) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f;
  constexpr float kInvSqrt2 = 0.707106781186547524f;
  const float square = -0.5f * x * x;
  const float u = square < -87.0f ? -87.0f : square;  // e^-87 is 1.6e-38: phi, 1 - Phi are 0
  const float n = std::floor(u * kLog2e + 0.5f);
  const float g = (u * kLog2e - n) * kLn2;  // |g| <= ln 2 / 2
  const float poly =
      1.0f + g * (1.0f + g * (0.5f + g * (1.0f / 6 +
                                          g * (1.0f / 24 + g * (1.0f / 120 + g * (1.0f / 720))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  e = poly * scale;
  const float t = 1.0f / (1.0f + 0.3275911f * std::fabs(x) * kInvSqrt2);
  const float tail =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float half_tail = 0.5f * tail * e;  // 1 - Phi(|x|)
  cdf = x >= 0.0f ? 1.0f - half_tail : half_tail;
}

inline float gelu_derivative(float x) {
  constexpr float kInvSqrt2Pi = 0.398942280401432678f;
  float cdf, e;
  gelu_parts(x, cdf, e);
  return cdf + x * e * kInvSqrt2Pi;
}

inline void gelu_backward_loop(const float* __restrict x, const float* __restrict grad,
                               float* __restrict out, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] = grad[i] * gelu_derivative(x[i]);
}

__attribute__((target("avx512f,avx512dq"))) void gelu_backward_avx512(const float* x,
                                                                      const float* grad, float* out,
                                                                      int64_t n) {
  gelu_backward_loop(x, grad, out, n);
}

__attribute__((target("avx2,fma"))) void gelu_backward_avx2(const float* x, const float* grad,
                                                            float* out, int64_t n) {
  gelu_backward_loop(x, grad, out, n);
}

void gelu_backward_kernel(const float* x, const float* grad, float* out, int64_t n) {
  static const auto kernel =
      widest_kernel(gelu_backward_avx512, gelu_backward_avx2, gelu_backward_loop);
  at::parallel_for(0, n, 2 * kDropoutGrain, [&](int64_t begin, int64_t end) {
    kernel(x + begin, grad + begin, out + begin, end - begin);
  });
}

// ---- bias + GELU -----------------------------------------------------------------
// The feed-forward layer's gelu(x W^T + b). addmm broadcast-copies the bias
// into its output before the product and its backward sums the gradient
// over the rows in a pass of its own; here the product runs without the
// bias, and one pass adds it and applies GELU (the forward, x Phi(x), with
// the Phi above), one pass the backward and the bias gradient. Rows go in
// blocks of kBiasBlock, each block's bias-gradient sums in double into its
// own row of `partial`, added in block order afterwards: the same bits with
// any number of threads.

inline void bias_gelu_forward_loop(const float* __restrict x, const float* __restrict bias,
                                   float* __restrict y, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict in = x + r * width;
    float* __restrict out = y + r * width;
#pragma GCC ivdep
    for (int64_t c = 0; c < width; ++c) {
      const float p = in[c] + bias[c];
      float cdf, e;
      gelu_parts(p, cdf, e);
      out[c] = p * cdf;
    }
  }
}

inline void bias_gelu_backward_loop(const float* __restrict x, const float* __restrict bias,
                                    const float* __restrict grad, float* __restrict grad_x,
                                    double* __restrict bias_sums, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict in = x + r * width;
    const float* __restrict g = grad + r * width;
    float* __restrict out = grad_x + r * width;
#pragma GCC ivdep
    for (int64_t c = 0; c < width; ++c) {
      const float d = g[c] * gelu_derivative(in[c] + bias[c]);
      out[c] = d;
      bias_sums[c] += static_cast<double>(d);
    }
  }
}

__attribute__((target("avx512f,avx512dq"))) void bias_gelu_forward_avx512(const float* x,
                                                                          const float* bias,
                                                                          float* y, int64_t rows,
                                                                          int64_t width) {
  bias_gelu_forward_loop(x, bias, y, rows, width);
}
__attribute__((target("avx2,fma"))) void bias_gelu_forward_avx2(const float* x, const float* bias,
                                                                float* y, int64_t rows,
                                                                int64_t width) {
  bias_gelu_forward_loop(x, bias, y, rows, width);
}
__attribute__((target("avx512f,avx512dq"))) void bias_gelu_backward_avx512(
    const float* x, const float* bias, const float* grad, float* grad_x, double* bias_sums,
    int64_t rows, int64_t width) {
  bias_gelu_backward_loop(x, bias, grad, grad_x, bias_sums, rows, width);
}
__attribute__((target("avx2,fma"))) void bias_gelu_backward_avx2(const float* x, const float* bias,
                                                                 const float* grad, float* grad_x,
                                                                 double* bias_sums, int64_t rows,
                                                                 int64_t width) {
  bias_gelu_backward_loop(x, bias, grad, grad_x, bias_sums, rows, width);
}

// x [rows, width] and bias [width], contiguous float32 on the CPU.
at::Tensor bias_gelu_forward(const at::Tensor& x, const at::Tensor& bias) {
  static const auto kernel =
      widest_kernel(bias_gelu_forward_avx512, bias_gelu_forward_avx2, bias_gelu_forward_loop);
  const int64_t width = x.size(-1), rows = x.numel() / std::max<int64_t>(width, 1);
  at::Tensor y = at::empty_like(x);
  const float* px = x.data_ptr<float>();
  const float* pb = bias.data_ptr<float>();
  float* py = y.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, kDropoutGrain / std::max<int64_t>(width, 1)),
                   [&](int64_t begin, int64_t end) {
                     kernel(px + begin * width, pb, py + begin * width, end - begin, width);
                   });
  return y;
}

// The gradients of x and of the bias (in the bias's dtype) from grad [rows, width].
std::pair<at::Tensor, at::Tensor> bias_gelu_backward(const at::Tensor& x, const at::Tensor& bias,
                                                     const at::Tensor& grad) {
  static const auto kernel =
      widest_kernel(bias_gelu_backward_avx512, bias_gelu_backward_avx2, bias_gelu_backward_loop);
  const int64_t width = x.size(-1), rows = x.numel() / std::max<int64_t>(width, 1);
  const int64_t blocks = (rows + kBiasBlock - 1) / kBiasBlock;
  at::Tensor grad_x = at::empty_like(x);
  at::Tensor partial =
      at::zeros({std::max<int64_t>(blocks, 1), width}, x.options().dtype(at::kDouble));
  const float* px = x.data_ptr<float>();
  const float* pb = bias.data_ptr<float>();
  const float* pg = grad.data_ptr<float>();
  float* pgx = grad_x.data_ptr<float>();
  double* pp = partial.data_ptr<double>();
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = b * kBiasBlock, count = std::min(kBiasBlock, rows - first);
      kernel(px + first * width, pb, pg + first * width, pgx + first * width, pp + b * width, count,
             width);
    }
  });
  return {grad_x, bias_sums_in_block_order(partial, bias.options())};
}

struct BiasGelu : public torch::autograd::Function<BiasGelu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& bias) {
    RECORD_FUNCTION("garden::bias_gelu", std::vector<c10::IValue>());
    const at::Tensor input = x.contiguous();
    const at::Tensor b = bias.contiguous();
    ctx->save_for_backward({input, b});
    return bias_gelu_forward(input, b);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_x, grad_bias] = bias_gelu_backward(saved[0], saved[1], grads[0].contiguous());
    return {grad_x, grad_bias};
  }
};

// ---- Beam search's candidates ------------------------------------------------------
// Each decoding step used to turn the logits [rows, V] into double, take
// their log-softmax (LibTorch's double exp), add each beam's score, and run
// topk over [n, beams * V]: 3.4 to 6 ms of a 32-sentence beam-4 step over
// V 8000, against 1.4 ms here. Here, per row, one pass
// finds the maximum, one sums e^(x - max), and one selects; the [rows, V]
// log-probabilities are never written. The exponentials are float32's (16
// lanes, a degree-7 polynomial), summed in double: the logits are float32
// and carry more error than that, and exponentials in double made this
// pass about 10 % of an int8 beam-4 decoding (docs/PERFORMANCE.md).

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
__attribute__((always_inline)) inline float largest_lane(const Lanes16& lanes) {
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
// Replaces one LibTorch amax over all the rows: about 2 % of an int8
// beam-4 decoding's samples went to that reduction (docs/PERFORMANCE.md).
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
  float top = largest_lane(m[0]);
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
        if (!(largest_lane(block) > low)) continue;
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

// ---- Sampling from a softmax ------------------------------------------------------
// ELECTRA's generator draws one id per masked position from the softmax of
// its [rows, V] logits. Model Garden's Gumbel-argmax draws V uniforms and
// takes two logs of each: 80 ms of LibTorch's uniform_, log_ and argmax in
// an ELECTRA-small step (V 30522, 304 rows). The same distribution by its
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

// gelu(x) = x Phi(x) (the exact, erf form) with LibTorch's forward and the
// backward above.
struct FastGelu : public torch::autograd::Function<FastGelu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    RECORD_FUNCTION("garden::gelu", std::vector<c10::IValue>());
    const at::Tensor input = x.contiguous();
    ctx->save_for_backward({input});
    return at::gelu(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_input = at::empty_like(x);
    gelu_backward_kernel(x.data_ptr<float>(), grad.data_ptr<float>(), grad_input.data_ptr<float>(),
                         x.numel());
    return {grad_input};
  }
};

bool has_fast_dropout(const at::Tensor& x, double p) {
  return x.device().is_cpu() && p < 1 &&
         (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble ||
          x.scalar_type() == at::kBFloat16);
}

}  // namespace

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  // Costs nothing when it would be the identity.
  if (!training || p <= 0) return x;
  return has_fast_dropout(x, p) ? FastDropout::apply(x, p, /*relu=*/false)
                                : at::dropout(x, p, /*train=*/true);
}

at::Tensor gelu(const at::Tensor& x) {
  if (!x.device().is_cpu() || !x.requires_grad() || !at::GradMode::is_enabled()) return at::gelu(x);
  if (x.scalar_type() == at::kFloat) return FastGelu::apply(x);
  // bfloat16 (CPU autocast): computed in float32, returned in bfloat16.
  if (is_cpu_bfloat16(x)) return FastGelu::apply(widened_on_cpu(x)).to(at::kBFloat16);
  return at::gelu(x);
}

bool bias_gelu_applies(const at::Tensor& x, const at::Tensor& bias) {
  return x.defined() && bias.defined() && x.device().is_cpu() && bias.device().is_cpu() &&
         x.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat && bias.dim() == 1 &&
         x.dim() >= 1 && x.size(-1) == bias.size(0) && x.numel() > 0;
}

at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias) {
  if (!bias_gelu_applies(x, bias)) return nlp::gelu(bias.defined() ? x + bias : x);
  if (at::GradMode::is_enabled() && (x.requires_grad() || bias.requires_grad()))
    return BiasGelu::apply(x, bias);
  return bias_gelu_forward(x.contiguous(), bias.contiguous());
}

at::Tensor relu_dropout(const at::Tensor& x, double p, bool training) {
  // Fused when the fast dropout applies.
  if (training && p > 0 && has_fast_dropout(x, p)) return FastDropout::apply(x, p, /*relu=*/true);
  return nlp::dropout(at::relu(x), p, training);
}

namespace {

// ---- attention matmuls -------------------------------------------------------------
// LibTorch 1.13's CPU bmm runs a [B, H, T, S] product as B*H separate
// select + addmm calls, and matmul first copies the permuted q/k/v views and
// the context into contiguous layouts. For the short sequences of
// translation that overhead costs more than the arithmetic. Here each head's
// product works on the views as they are: Garden's loops for training's
// float heads (small_gemm.cpp) and for a few query rows (below), one BLAS
// gemm call otherwise; the context is written straight into [B, T, H, Dh]
// order, so merging the heads is a view.
// The BLAS is the one LibTorch itself loaded (found with dlsym); without it,
// or off the CPU, the attention falls back to at::matmul.

using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);
using DgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const double*, const double*, const int*, const double*, const int*,
                         const double*, double*, const int*);

struct Blas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
};

const Blas& blas() {
  static const Blas functions{reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_")),
                              reinterpret_cast<DgemmFn>(dlsym(RTLD_DEFAULT, "dgemm_"))};
  return functions;
}

void gemm(char ta, char tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
  const float beta = 0;
  blas().sgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}
void gemm(char ta, char tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double* c, int ldc) {
  const double beta = 0;
  blas().dgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}

// A row-major [rows, cols] matrix with strides (row_stride, col_stride) as a
// column-major BLAS operand: 'N' with ld = row_stride, or 'T' with
// ld = col_stride. ld is 0 when neither stride is 1 (then copy first).
struct BlasOperand {
  char trans = 'N';
  int64_t ld = 0;
};

BlasOperand blas_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (rows == 1 || row_stride >= std::max<int64_t>(cols, 1)))
    return {'N', rows == 1 ? std::max<int64_t>(cols, 1) : row_stride};
  if (row_stride == 1 && (cols == 1 || col_stride >= std::max<int64_t>(rows, 1)))
    return {'T', cols == 1 ? std::max<int64_t>(rows, 1) : col_stride};
  return {};
}

BlasOperand blas_operand(const at::Tensor& x) {
  return blas_operand(x.size(2), x.size(3), x.stride(2), x.stride(3));
}

// ---- a few query rows (decoding) --------------------------------------------
// A decoding step attends with one query per head and beam: products of
// [m, k] x [k, n] with m 1 (self-attention) or the beam count
// (cross-attention, where an example's beams share the keys), which OpenBLAS
// packs as if they were large (16 % of an int8 beam-4 run on the tiny model,
// most of it packing). Written out, the scores are dot products with the keys
// (b's columns are contiguous) and the context is a weighted sum of the
// values (b's rows are contiguous); a head's keys and values stay in cache
// across the m rows.
constexpr int64_t kFewRows = 8;

struct FewRowsProduct {
  const void* a;  // [m, k], each row contiguous, a_row_stride apart
  int64_t a_row_stride;
  const void* b;         // [k, n]
  int64_t b_row_stride;  // 1: each column of b is contiguous
  int64_t b_col_stride;  // 1: each row of b is contiguous
  int64_t m, k, n;
  double alpha;
  void* c;  // [m, n], each row contiguous, c_row_stride apart
  int64_t c_row_stride;
};

template <typename T>
__attribute__((always_inline)) inline void few_rows_product_loop(const FewRowsProduct& p) {
  const T alpha = static_cast<T>(p.alpha);
  for (int64_t r = 0; r < p.m; ++r) {
    const T* __restrict a = static_cast<const T*>(p.a) + r * p.a_row_stride;
    const T* __restrict b = static_cast<const T*>(p.b);
    T* __restrict c = static_cast<T*>(p.c) + r * p.c_row_stride;
    if (p.b_row_stride == 1) {
      // c[j] = a . column j, in 16 lanes summed pairwise (vector adds of
      // halves, not 16 scalar adds: the head sizes are short).
      constexpr int kLanes = 16;  // the pairwise sum below is written for 16
      for (int64_t j = 0; j < p.n; ++j) {
        const T* __restrict column = b + j * p.b_col_stride;
        T lane[kLanes] = {};
        int64_t i = 0;
        for (; i + kLanes <= p.k; i += kLanes)
          for (int l = 0; l < kLanes; ++l) lane[l] += a[i + l] * column[i + l];
        T tail = 0;
        for (; i < p.k; ++i) tail += a[i] * column[i];
        for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
        for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
        for (int l = 0; l < 2; ++l) lane[l] += lane[l + 2];
        c[j] = alpha * ((lane[0] + lane[1]) + tail);
      }
    } else {
      // c = sum_i a[i] row i, 32 outputs at a time held in registers across
      // the rows (a running sum in c would wait on its own stores).
      constexpr int kChunk = 32;
      int64_t j = 0;
      for (; j + kChunk <= p.n; j += kChunk) {
        T sum[kChunk] = {};
        for (int64_t i = 0; i < p.k; ++i) {
          const T weight = a[i];
          const T* __restrict row = b + i * p.b_row_stride + j;
          for (int l = 0; l < kChunk; ++l) sum[l] += weight * row[l];
        }
        for (int l = 0; l < kChunk; ++l) c[j + l] = alpha * sum[l];
      }
      for (; j < p.n; ++j) {
        T sum = 0;
        for (int64_t i = 0; i < p.k; ++i) sum += a[i] * b[i * p.b_row_stride + j];
        c[j] = alpha * sum;
      }
    }
  }
}

__attribute__((target("avx512f,avx512dq"))) void few_rows_product_avx512(const FewRowsProduct& p) {
  few_rows_product_loop<float>(p);
}
__attribute__((target("avx2,fma"))) void few_rows_product_avx2(const FewRowsProduct& p) {
  few_rows_product_loop<float>(p);
}
void few_rows_product_portable(const FewRowsProduct& p) { few_rows_product_loop<float>(p); }

void few_rows_product(const FewRowsProduct& p, float /*type*/) {
  static const auto kernel =
      widest_kernel(few_rows_product_avx512, few_rows_product_avx2, few_rows_product_portable);
  kernel(p);
}
void few_rows_product(const FewRowsProduct& p, double /*type*/) {
  few_rows_product_loop<double>(p);
}

// out[i, j] = alpha * a[i, j] @ b[i, j] for a [N1, N2, m, k], b [N1, N2, k, n]
// and a preallocated out [N1, N2, m, n] with unit stride in its last dim.
template <typename T>
void batched_gemm(const at::Tensor& a_in, const at::Tensor& b_in, double alpha, at::Tensor& out) {
  if constexpr (std::is_same_v<T, float>) {
    if (a_in.size(2) > kFewRows && small_product_applies(a_in.size(3), b_in.size(3))) {
      // Training's heads: Garden's register-blocked loops (small_gemm.cpp),
      // on the views as they are.
      const int64_t n1 = a_in.size(0), n2 = a_in.size(1);
      const float* pa = a_in.data_ptr<float>();
      const float* pb = b_in.data_ptr<float>();
      float* pc = out.data_ptr<float>();
      at::parallel_for(0, n1 * n2, 8, [&](int64_t begin, int64_t end) {
        std::vector<float> scratch(
            static_cast<size_t>(small_product_scratch(a_in.size(3), b_in.size(3))));
        for (int64_t i = begin; i < end; ++i) {
          const int64_t i1 = i / n2, i2 = i % n2;
          small_product(
              {pa + i1 * a_in.stride(0) + i2 * a_in.stride(1), a_in.stride(2), a_in.stride(3),
               pb + i1 * b_in.stride(0) + i2 * b_in.stride(1), b_in.stride(2), b_in.stride(3),
               a_in.size(2), a_in.size(3), b_in.size(3), static_cast<float>(alpha),
               pc + i1 * out.stride(0) + i2 * out.stride(1), out.stride(2)},
              scratch.data());
        }
      });
      return;
    }
  }
  const at::Tensor a = blas_operand(a_in).ld ? a_in : a_in.contiguous();
  const at::Tensor b = blas_operand(b_in).ld ? b_in : b_in.contiguous();
  const BlasOperand oa = blas_operand(a), ob = blas_operand(b);
  const int64_t n1 = a.size(0), n2 = a.size(1);
  const int m = static_cast<int>(a.size(2)), k = static_cast<int>(a.size(3)),
            n = static_cast<int>(b.size(3)), ldc = static_cast<int>(out.stride(2));
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  if (m <= kFewRows && a.stride(3) == 1 && (b.stride(2) == 1 || b.stride(3) == 1)) {
    at::parallel_for(0, n1 * n2, 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t i1 = i / n2, i2 = i % n2;
        few_rows_product({pa + i1 * a.stride(0) + i2 * a.stride(1), a.stride(2),
                          pb + i1 * b.stride(0) + i2 * b.stride(1), b.stride(2), b.stride(3), m, k,
                          n, alpha, pc + i1 * out.stride(0) + i2 * out.stride(1), out.stride(2)},
                         T{});
      }
    });
    return;
  }
  at::parallel_for(0, n1 * n2, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t i1 = i / n2, i2 = i % n2;
      // Row-major C = A B is column-major C^T = B^T A^T.
      gemm(ob.trans, oa.trans, n, m, k, static_cast<T>(alpha),
           pb + i1 * b.stride(0) + i2 * b.stride(1), static_cast<int>(ob.ld),
           pa + i1 * a.stride(0) + i2 * a.stride(1), static_cast<int>(oa.ld),
           pc + i1 * out.stride(0) + i2 * out.stride(1), ldc);
    }
  });
}

void batched_gemm(const at::Tensor& a, const at::Tensor& b, double alpha, at::Tensor& out) {
  if (a.scalar_type() == at::kFloat)
    batched_gemm<float>(a, b, alpha, out);
  else
    batched_gemm<double>(a, b, alpha, out);
}

// alpha * a @ b for [N1, N2, m, k] x [N1, N2, k, n]; with heads_last the
// result [N1, N2, m, n] is a view of [N1, m, N2, n] storage.
class AttentionMatmul : public torch::autograd::Function<AttentionMatmul> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a,
                            const at::Tensor& b, double alpha, bool heads_last) {
    RECORD_FUNCTION("garden::attention_matmul", std::vector<c10::IValue>());
    at::Tensor out =
        heads_last
            ? at::empty({a.size(0), a.size(2), a.size(1), b.size(3)}, a.options()).transpose(1, 2)
            : at::empty({a.size(0), a.size(1), a.size(2), b.size(3)}, a.options());
    batched_gemm(a, b, alpha, out);
    ctx->save_for_backward({a, b});
    ctx->saved_data["alpha"] = alpha;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const at::Tensor& grad = grads[0];
    at::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) {
      grad_a = at::empty(a.sizes(), grad.options());
      batched_gemm(grad, b.transpose(2, 3), alpha, grad_a);
    }
    if (ctx->needs_input_grad(1)) {
      grad_b = at::empty(b.sizes(), grad.options());
      batched_gemm(a.transpose(2, 3), grad, alpha, grad_b);
    }
    return {grad_a, grad_b, at::Tensor(), at::Tensor()};
  }
};

bool blas_attention_applies(const at::Tensor& a, const at::Tensor& b) {
  if (!a.device().is_cpu() || a.scalar_type() != b.scalar_type() || a.dim() != 4 || b.dim() != 4 ||
      a.size(0) != b.size(0) || a.size(1) != b.size(1) || a.size(3) != b.size(2))
    return false;
  const Blas& f = blas();
  if (a.scalar_type() == at::kFloat ? !f.sgemm : a.scalar_type() != at::kDouble || !f.dgemm)
    return false;
  const int64_t limit = std::numeric_limits<int>::max();
  for (int64_t d : {a.size(2), a.size(3), b.size(3)})
    if (d == 0 || d > limit / 4) return false;
  return a.numel() > 0 && b.numel() > 0;
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

at::Tensor attention_matmul(const at::Tensor& a, const at::Tensor& b, double alpha,
                            bool heads_last) {
  if (blas_attention_applies(a, b)) return AttentionMatmul::apply(a, b, alpha, heads_last);
  return at::matmul(alpha == 1.0 ? a : a * alpha, b);
}

at::Tensor embedding_rows(const at::Tensor& weight, const at::Tensor& ids) {
  return at::embedding(weight, ids, /*padding_idx=*/-1, /*scale_grad_by_freq=*/false,
                       /*sparse=*/weight.device().is_cpu() && weight.requires_grad());
}

}  // namespace garden::nlp
