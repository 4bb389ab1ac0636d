#include "garden/kernels/gelu.h"

#include "garden/kernels/widen.h"
#include "simd/bias_sums.h"
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

// Elements per parallel task (twice dropout's pairs).
constexpr int64_t kGrain = 32768;

// ---- GELU ------------------------------------------------------------------------
// LibTorch 1.13's CPU gelu_backward (the erf form) costs about ten times its
// forward. Its derivative, d/dx [x Phi(x)] = Phi(x) +
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
  at::parallel_for(0, n, 2 * kGrain, [&](int64_t begin, int64_t end) {
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
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)),
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

}  // namespace

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
  if (!bias_gelu_applies(x, bias)) return kernels::gelu(bias.defined() ? x + bias : x);
  if (at::GradMode::is_enabled() && (x.requires_grad() || bias.requires_grad()))
    return BiasGelu::apply(x, bias);
  return bias_gelu_forward(x.contiguous(), bias.contiguous());
}

}  // namespace garden::kernels
