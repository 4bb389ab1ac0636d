// Layer normalization over the last dimension, forward and backward in
// Garden's loops (see include/garden/kernels/layer_norm.h): per row, these
// read the row from memory once and make their other passes over it in L1,
// where LibTorch 1.13's CPU kernels read it several times.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "garden/kernels/layer_norm.h"
#include "garden/kernels/widen.h"
#include "simd/vector_math.h"

namespace garden::kernels {

namespace {

constexpr int kLanes = 16;

// The 16 lanes' sum, halves added pairwise: four dependent additions, not
// sixteen, at the end of each of a row's two reductions.
__attribute__((always_inline)) inline double lane_tree_sum(double (&lane)[kLanes]) {
  for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  for (int l = 0; l < 2; ++l) lane[l] += lane[l + 2];
  return lane[0] + lane[1];
}

// Rows [0, rows) of width c: y = (x - mean) * rstd * w + b, with the mean and
// 1 / sqrt(var + eps) of each row written to mean[] and rstd[] (the variance
// is the biased one, as LibTorch's; both sums in double).
template <typename T>
__attribute__((always_inline)) inline void forward_loop(const T* __restrict x,
                                                        const T* __restrict w,
                                                        const T* __restrict b, T* __restrict y,
                                                        T* __restrict mean, T* __restrict rstd,
                                                        int64_t rows, int64_t c, double eps) {
  // Products by 1 / c, not two dependent divisions by c a row (the same bits
  // where c is a power of 2).
  const double inverse_c = 1.0 / static_cast<double>(c);
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict in = x + r * c;
    T* __restrict out = y + r * c;
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= c; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += in[i + l];
    double sum = 0;
    for (; i < c; ++i) sum += in[i];
    sum += lane_tree_sum(lane);
    const double mu = sum * inverse_c;
    double square[kLanes] = {};
    i = 0;
    for (; i + kLanes <= c; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const double d = static_cast<double>(in[i + l]) - mu;
        square[l] += d * d;
      }
    double squares = 0;
    for (; i < c; ++i) {
      const double d = static_cast<double>(in[i]) - mu;
      squares += d * d;
    }
    squares += lane_tree_sum(square);
    const double inverse = 1.0 / std::sqrt(squares * inverse_c + eps);
    const T m = static_cast<T>(mu), s = static_cast<T>(inverse);
    mean[r] = m;
    rstd[r] = s;
    for (int64_t j = 0; j < c; ++j) out[j] = (in[j] - m) * s * w[j] + b[j];
  }
}

// For rows [0, rows): dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
// g = dy * w and xhat = (x - mean) * rstd; and dw += dy * xhat, db += dy
// (dw, db: this task's sums over its rows, in T; the tasks' sums are then
// added in double). Two gradients for one input (LayerNormPair below): with
// kShared, dy is dy + dy2 (the output's two uses), added here where autograd
// made a pass and a tensor of its own for the sum; with kSkip, skip (the
// gradient of the input's other use) is added to dx as it is written. Each
// sum is the one autograd made (a float addition), so to the same bits.
template <typename T, bool kShared, bool kSkip>
__attribute__((always_inline)) inline void backward_loop(
    const T* __restrict dy_in, const T* __restrict dy2, const T* __restrict x,
    const T* __restrict w, const T* __restrict mean, const T* __restrict rstd,
    const T* __restrict skip, T* __restrict dx, T* __restrict dw, T* __restrict db,
    T* __restrict row_sum, int64_t rows, int64_t c) {
  const double inverse_c = 1.0 / static_cast<double>(c);
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict grad = dy_in + r * c;
    if constexpr (kShared) {
      // The row's dy + dy2 in scratch (c values, in L1 for the passes below).
      const T* __restrict second = dy2 + r * c;
      for (int64_t j = 0; j < c; ++j) row_sum[j] = grad[j] + second[j];
      grad = row_sum;
    }
    const T* __restrict in = x + r * c;
    const T m = mean[r], s = rstd[r];
    T lane_g[kLanes] = {}, lane_gx[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= c; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const T xhat = (in[i + l] - m) * s;
        const T g = grad[i + l] * w[i + l];
        lane_g[l] += g;
        lane_gx[l] += g * xhat;
        dw[i + l] += grad[i + l] * xhat;
        db[i + l] += grad[i + l];
      }
    double sum_g = 0, sum_gx = 0;
    for (; i < c; ++i) {
      const T xhat = (in[i] - m) * s;
      const T g = grad[i] * w[i];
      sum_g += g;
      sum_gx += g * xhat;
      dw[i] += grad[i] * xhat;
      db[i] += grad[i];
    }
    for (int l = 0; l < kLanes; ++l) {
      sum_g += static_cast<double>(lane_g[l]);
      sum_gx += static_cast<double>(lane_gx[l]);
    }
    const T mean_g = static_cast<T>(sum_g * inverse_c),
            mean_gx = static_cast<T>(sum_gx * inverse_c);
    T* __restrict out = dx + r * c;
    if constexpr (kSkip) {
      const T* __restrict other = skip + r * c;
      for (int64_t j = 0; j < c; ++j) {
        const T xhat = (in[j] - m) * s;
        out[j] = s * (grad[j] * w[j] - mean_g - xhat * mean_gx) + other[j];
      }
    } else {
      for (int64_t j = 0; j < c; ++j) {
        const T xhat = (in[j] - m) * s;
        out[j] = s * (grad[j] * w[j] - mean_g - xhat * mean_gx);
      }
    }
  }
}

template <typename T>
__attribute__((target("avx512f,avx512dq"))) void forward_avx512(const T* x, const T* w, const T* b,
                                                                T* y, T* mean, T* rstd,
                                                                int64_t rows, int64_t c,
                                                                double eps) {
  forward_loop(x, w, b, y, mean, rstd, rows, c, eps);
}
template <typename T>
__attribute__((target("avx2,fma"))) void forward_avx2(const T* x, const T* w, const T* b, T* y,
                                                      T* mean, T* rstd, int64_t rows, int64_t c,
                                                      double eps) {
  forward_loop(x, w, b, y, mean, rstd, rows, c, eps);
}
template <typename T>
void forward_portable(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows,
                      int64_t c, double eps) {
  forward_loop(x, w, b, y, mean, rstd, rows, c, eps);
}

template <typename T, bool kShared, bool kSkip>
__attribute__((target("avx512f,avx512dq"))) void backward_avx512(
    const T* dy, const T* dy2, const T* x, const T* w, const T* mean, const T* rstd, const T* skip,
    T* dx, T* dw, T* db, T* row_sum, int64_t rows, int64_t c) {
  backward_loop<T, kShared, kSkip>(dy, dy2, x, w, mean, rstd, skip, dx, dw, db, row_sum, rows, c);
}
template <typename T, bool kShared, bool kSkip>
__attribute__((target("avx2,fma"))) void backward_avx2(const T* dy, const T* dy2, const T* x,
                                                       const T* w, const T* mean, const T* rstd,
                                                       const T* skip, T* dx, T* dw, T* db,
                                                       T* row_sum, int64_t rows, int64_t c) {
  backward_loop<T, kShared, kSkip>(dy, dy2, x, w, mean, rstd, skip, dx, dw, db, row_sum, rows, c);
}
template <typename T, bool kShared, bool kSkip>
void backward_portable(const T* dy, const T* dy2, const T* x, const T* w, const T* mean,
                       const T* rstd, const T* skip, T* dx, T* dw, T* db, T* row_sum, int64_t rows,
                       int64_t c) {
  backward_loop<T, kShared, kSkip>(dy, dy2, x, w, mean, rstd, skip, dx, dw, db, row_sum, rows, c);
}

template <typename T>
using BackwardKernel = void (*)(const T*, const T*, const T*, const T*, const T*, const T*,
                                const T*, T*, T*, T*, T*, int64_t, int64_t);

template <typename T, bool kShared, bool kSkip>
BackwardKernel<T> widest_backward() {
  return widest_kernel<BackwardKernel<T>>(backward_avx512<T, kShared, kSkip>,
                                          backward_avx2<T, kShared, kSkip>,
                                          backward_portable<T, kShared, kSkip>);
}

// Rows a parallel task takes: enough that dispatch and the per-task
// weight-gradient buffers cost little.
constexpr int64_t kRowGrain = 64;

// The rows of contiguous x [..., c] normalized, scaled by w and shifted by b;
// each row's mean and 1 / standard deviation into mean and rstd ([rows] of
// x's type).
at::Tensor normalize_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps,
                          void* mean, void* rstd) {
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  at::Tensor y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "garden_layer_norm", [&] {
    static const auto kernel =
        widest_kernel(forward_avx512<scalar_t>, forward_avx2<scalar_t>, forward_portable<scalar_t>);
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* py = y.data_ptr<scalar_t>();
    scalar_t* pm = static_cast<scalar_t*>(mean);
    scalar_t* ps = static_cast<scalar_t*>(rstd);
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      kernel(px + begin * c, w.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), py + begin * c,
             pm + begin, ps + begin, end - begin, c, eps);
    });
  });
  return y;
}

// The backward of the rows normalized from x (saved with w, mean and rstd)
// for the output's gradient dy, plus dy2 where defined (a second use of the
// same output) and with skip added to dx where defined (a second use of the
// input): {dx, dw, db}.
std::array<at::Tensor, 3> normalize_backward(const at::Tensor& x, const at::Tensor& w,
                                             const at::Tensor& mean_in, const at::Tensor& rstd_in,
                                             const at::Tensor& dy, const at::Tensor& dy2,
                                             const at::Tensor& skip) {
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  at::Tensor dx = at::empty_like(x);
  // Each task's weight and bias gradients [2, c], added in task order in
  // double into the returned gradients.
  const int64_t tasks = std::max<int64_t>(1, (rows + kRowGrain - 1) / kRowGrain);
  at::Tensor partial = at::zeros({tasks, 2, c}, x.options());
  at::Tensor grad_weight = at::empty({c}, x.options()), grad_bias = at::empty({c}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "garden_layer_norm_backward", [&] {
    using T = scalar_t;
    static const BackwardKernel<T> kernels[2][2] = {
        {widest_backward<T, false, false>(), widest_backward<T, false, true>()},
        {widest_backward<T, true, false>(), widest_backward<T, true, true>()}};
    const BackwardKernel<T> kernel = kernels[dy2.defined()][skip.defined()];
    const T* pdy = dy.data_ptr<T>();
    const T* pdy2 = dy2.defined() ? dy2.data_ptr<T>() : nullptr;
    const T* pskip = skip.defined() ? skip.data_ptr<T>() : nullptr;
    const T* px = x.data_ptr<T>();
    const T* pm = mean_in.data_ptr<T>();
    const T* ps = rstd_in.data_ptr<T>();
    T* pdx = dx.data_ptr<T>();
    T* pp = partial.data_ptr<T>();
    // Tasks of kRowGrain rows each, whatever the thread count, so the sums
    // do not depend on it.
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> row_sum(static_cast<std::size_t>(pdy2 ? c : 0));
      for (int64_t t = begin; t < end; ++t) {
        const int64_t first = t * kRowGrain, last = std::min(rows, first + kRowGrain);
        T* dw = pp + 2 * t * c;
        kernel(pdy + first * c, pdy2 ? pdy2 + first * c : nullptr, px + first * c, w.data_ptr<T>(),
               pm + first, ps + first, pskip ? pskip + first * c : nullptr, pdx + first * c, dw,
               dw + c, row_sum.data(), last - first, c);
      }
    });
    T* gw = grad_weight.data_ptr<T>();
    T* gb = grad_bias.data_ptr<T>();
    for (int64_t j = 0; j < c; ++j) {
      double sum_w = 0, sum_b = 0;
      for (int64_t t = 0; t < tasks; ++t) {
        sum_w += static_cast<double>(pp[2 * t * c + j]);
        sum_b += static_cast<double>(pp[2 * t * c + c + j]);
      }
      gw[j] = static_cast<T>(sum_w);
      gb[j] = static_cast<T>(sum_b);
    }
  });
  return {dx, grad_weight, grad_bias};
}

// The forward of both nodes below: the rows normalized, with x, w and each
// row's mean and 1 / standard deviation saved for the backward.
at::Tensor normalize_and_save(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,
                              const at::Tensor& weight, const at::Tensor& bias, double eps) {
  RECORD_FUNCTION("garden::layer_norm", std::vector<c10::IValue>());
  const at::Tensor x = x_in.contiguous();
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  at::Tensor mean = at::empty({rows}, x.options());
  at::Tensor rstd = at::empty({rows}, x.options());
  const at::Tensor w = weight.contiguous();
  at::Tensor y = normalize_rows(x, w, bias.contiguous(), eps, mean.data_ptr(), rstd.data_ptr());
  ctx->save_for_backward({x, w, mean, rstd});
  return y;
}

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,
                            const at::Tensor& weight, const at::Tensor& bias, double eps) {
    return normalize_and_save(ctx, x_in, weight, bias, eps);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, grad_weight, grad_bias] =
        normalize_backward(saved[0], saved[1], saved[2], saved[3], grads[0].contiguous(), {}, {});
    return {dx, grad_weight, grad_bias, at::Tensor()};
  }
};

// layer_norm with a second handle on its input or its output
// (layer_norm_and_skip): one node whose backward takes both gradients.
class LayerNormPair : public torch::autograd::Function<LayerNormPair> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x_in, const at::Tensor& weight,
                                                const at::Tensor& bias, double eps,
                                                bool skip_is_input) {
    at::Tensor y = normalize_and_save(ctx, x_in, weight, bias, eps);
    ctx->saved_data["skip_is_input"] = skip_is_input;
    ctx->set_materialize_grads(false);
    // The input as it came (LibTorch returns it as a view carrying this
    // node), or a view of the output: the second handle, read only (an
    // in-place change of either is refused by LibTorch).
    if (skip_is_input) return {y, x_in};
    at::Tensor second = y.view_as(y);
    return {y, second};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const bool skip_is_input = ctx->saved_data["skip_is_input"].toBool();
    at::Tensor dy = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    at::Tensor second = grads[1].defined() ? grads[1].contiguous() : at::Tensor();
    if (!skip_is_input && !dy.defined()) std::swap(dy, second);  // the output's one used handle
    if (!dy.defined()) {
      // Only the input's handle was read (or nothing): no gradient for the
      // norm's parameters, as autograd would leave them.
      return {skip_is_input ? second : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
              at::Tensor()};
    }
    auto [dx, grad_weight, grad_bias] =
        skip_is_input ? normalize_backward(x, saved[1], saved[2], saved[3], dy, {}, second)
                      : normalize_backward(x, saved[1], saved[2], saved[3], dy, second, {});
    return {dx, grad_weight, grad_bias, at::Tensor(), at::Tensor()};
  }
};

// Whether Garden's loops take x [..., C] with this weight and bias [C]: on
// the CPU, float or double, all three of one type.
bool loops_apply(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return x.device().is_cpu() && x.dim() >= 1 && x.size(-1) > 0 &&
         (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) && weight.defined() &&
         bias.defined() && weight.dim() == 1 && bias.dim() == 1 && weight.size(0) == x.size(-1) &&
         bias.size(0) == x.size(-1) && weight.scalar_type() == x.scalar_type() &&
         bias.scalar_type() == x.scalar_type() && weight.device() == x.device();
}

}  // namespace

at::Tensor layer_norm(const at::Tensor& given, const at::Tensor& weight, const at::Tensor& bias,
                      double eps) {
  // A bfloat16 input with float32 parameters (CPU autocast: a product's
  // output; LibTorch 1.13's CPU layer norm refuses the mix) is normalized in
  // float32, as autocast runs layer norm on a GPU.
  const at::Tensor x =
      weight.defined() && weight.scalar_type() == at::kFloat ? widened_on_cpu(given) : given;
  const bool fused = loops_apply(x, weight, bias);
  if (!fused) {
    if (x.dim() == 0) throw std::invalid_argument("layer_norm: expected a tensor [..., C]");
    return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  }
  // Without a gradient to take (decoding, evaluation), no autograd node and
  // no saved statistics: a decoding step normalizes 128 rows of 128 seven
  // times, where the node's bookkeeping cost about as much as the rows.
  if (!torch::autograd::GradMode::is_enabled() ||
      !(x.requires_grad() || weight.requires_grad() || bias.requires_grad())) {
    const at::Tensor contiguous = x.contiguous();
    const int64_t rows = contiguous.numel() / contiguous.size(-1);
    std::vector<double> stats(static_cast<size_t>(2 * rows));  // room for float or double
    return normalize_rows(contiguous, weight.contiguous(), bias.contiguous(), eps, stats.data(),
                          stats.data() + rows);
  }
  return LayerNormFunction::apply(x, weight, bias, eps);
}

std::array<at::Tensor, 2> layer_norm_and_skip(const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& bias, double eps,
                                              LayerNormSkip skip) {
  const bool fused = loops_apply(x, weight, bias) && torch::autograd::GradMode::is_enabled() &&
                     (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  if (!fused) {
    at::Tensor y = layer_norm(x, weight, bias, eps);
    return {y, skip == LayerNormSkip::kInput ? x : y};
  }
  auto outputs = LayerNormPair::apply(x, weight, bias, eps, skip == LayerNormSkip::kInput);
  return {outputs[0], outputs[1]};
}

}  // namespace garden::kernels
