#include "garden/kernels/batch_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "garden/kernels/autocast.h"
#include "simd/vector_math.h"

namespace garden::kernels {

// Named, not anonymous: the kernels build in batches of several files.
namespace batch_norm_detail {

// The row blocks the sums are taken in: fixed, so that the sums (and the
// results) do not depend on the thread count.
constexpr int64_t kBlocks = 32;

int64_t block_count(int64_t rows) { return std::min(rows, kBlocks); }
int64_t block_begin(int64_t block, int64_t blocks, int64_t rows) { return rows * block / blocks; }

// The pointers a pass reads and writes, each at the first row of its range
// (null where the pass has none); c values a row.
struct Rows {
  const float* x = nullptr;         // the batch
  const float* residual = nullptr;  // added before the ReLU
  const float* dy = nullptr;        // the output's gradient
  const float* g = nullptr;         // the gradient through the ReLU, written by the sums pass
  float* out = nullptr;             // y (forward), dx (backward)
  float* g_out = nullptr;           // where the sums pass writes g
  int64_t rows = 0, c = 0;
};

// Per column: scale and offset of the normalization (float), the batch's
// mean and the shift of the statistics (double), and dx's coefficients.
struct Columns {
  const float* scale = nullptr;
  const float* offset = nullptr;
  const double* shift = nullptr;  // the statistics pass: x's first row
  const double* mean = nullptr;
  const float* k = nullptr;
  const float* a = nullptr;
  const float* b = nullptr;
};

// How the output was made from the batch norm: as it is, + the residual,
// then a ReLU, or + the residual then a ReLU.
enum class Act { kNone, kResidual, kRelu, kResidualRelu };

constexpr bool adds_residual(Act act) { return act == Act::kResidual || act == Act::kResidualRelu; }
constexpr bool has_relu(Act act) { return act == Act::kRelu || act == Act::kResidualRelu; }

// The value before the ReLU, by the same float operations in every pass
// (the backward pass computes it again for the ReLU's mask).
template <Act kAct>
__attribute__((always_inline)) inline float pre_activation(const Rows& r, const Columns& k,
                                                           int64_t i, int64_t j) {
  float v = r.x[i] * k.scale[j] + k.offset[j];
  if constexpr (adds_residual(kAct)) v += r.residual[i];
  return v;
}

// grad (dy or g) at i, through the ReLU's mask where the output had one.
template <Act kAct>
__attribute__((always_inline)) inline float masked(const Rows& r, const Columns& k,
                                                   const float* grad, int64_t i, int64_t j) {
  // Read whatever the mask says, so that the loops have no branch.
  const float v = grad[i];
  if constexpr (has_relu(kAct)) return pre_activation<kAct>(r, k, i, j) > 0.0f ? v : 0.0f;
  return v;
}

// The sums of x - shift and of its square per column, added to sum[] and
// square[].
__attribute__((always_inline)) inline void stats_loop(const Rows& r, const Columns& k,
                                                      double* __restrict sum,
                                                      double* __restrict square) {
  const float* __restrict x = r.x;
  const double* __restrict shift = k.shift;
  for (int64_t row = 0; row < r.rows; ++row)
    for (int64_t j = 0; j < r.c; ++j) {
      const double d = static_cast<double>(x[row * r.c + j]) - shift[j];
      sum[j] += d;
      square[j] += d * d;
    }
}

// y = the batch normalized (+ the residual), then its ReLU.
template <Act kAct>
__attribute__((always_inline)) inline void normalize_loop(const Rows& r, const Columns& k) {
  float* __restrict y = r.out;
  for (int64_t i = 0; i < r.rows * r.c; i += r.c)
    for (int64_t j = 0; j < r.c; ++j) {
      const float v = pre_activation<kAct>(r, k, i + j, j);
      y[i + j] = has_relu(kAct) ? (v > 0.0f ? v : 0.0f) : v;
    }
}

// g: dy through the ReLU's mask (dy itself without a ReLU). Its sums and
// those of g * (x - mean) per column, added to sum_g[] and sum_gx[]; g
// written to g_out after a residual (its gradient too).
template <Act kAct>
__attribute__((always_inline)) inline void gradient_sums_loop(const Rows& r, const Columns& k,
                                                              double* __restrict sum_g,
                                                              double* __restrict sum_gx) {
  const float* __restrict dy = r.dy;
  const float* __restrict x = r.x;
  const double* __restrict mean = k.mean;
  float* __restrict g_out = r.g_out;
  for (int64_t i = 0; i < r.rows * r.c; i += r.c)
    for (int64_t j = 0; j < r.c; ++j) {
      const float v = masked<kAct>(r, k, dy, i + j, j);
      if constexpr (kAct == Act::kResidualRelu) g_out[i + j] = v;
      sum_g[j] += v;
      sum_gx[j] += static_cast<double>(v) * (static_cast<double>(x[i + j]) - mean[j]);
    }
}

// dx = g * k + x * a + b per column, g read from r.g, or (after a ReLU
// without a residual) dy through the mask again.
template <Act kAct>
__attribute__((always_inline)) inline void input_gradient_loop(const Rows& r, const Columns& k) {
  const float* __restrict x = r.x;
  // dy where the mask is made again, else g.
  const float* __restrict grad = kAct == Act::kRelu ? r.dy : r.g;
  const float* __restrict kk = k.k;
  const float* __restrict a = k.a;
  const float* __restrict b = k.b;
  float* __restrict dx = r.out;
  for (int64_t i = 0; i < r.rows * r.c; i += r.c)
    for (int64_t j = 0; j < r.c; ++j) {
      const float g = kAct == Act::kRelu ? masked<kAct>(r, k, grad, i + j, j) : grad[i + j];
      dx[i + j] = g * kk[j] + x[i + j] * a[j] + b[j];
    }
}

// Each pass in three builds; the widest this CPU runs is taken.
using Pass = void (*)(const Rows&, const Columns&, double*, double*);

#define GARDEN_BN_PASS(name, call)                                                               \
  template <Act kAct>                                                                            \
  __attribute__((target("avx512f,avx512dq"))) void name##_avx512(                                \
      const Rows& r, const Columns& k, [[maybe_unused]] double* s, [[maybe_unused]] double* q) { \
    call;                                                                                        \
  }                                                                                              \
  template <Act kAct>                                                                            \
  __attribute__((target("avx2,fma"))) void name##_avx2(                                          \
      const Rows& r, const Columns& k, [[maybe_unused]] double* s, [[maybe_unused]] double* q) { \
    call;                                                                                        \
  }                                                                                              \
  template <Act kAct>                                                                            \
  void name##_portable(const Rows& r, const Columns& k, [[maybe_unused]] double* s,              \
                       [[maybe_unused]] double* q) {                                             \
    call;                                                                                        \
  }                                                                                              \
  template <Act kAct>                                                                            \
  Pass name##_pass() {                                                                           \
    return widest_kernel<Pass>(name##_avx512<kAct>, name##_avx2<kAct>, name##_portable<kAct>);   \
  }

GARDEN_BN_PASS(stats, stats_loop(r, k, s, q))
GARDEN_BN_PASS(normalize, normalize_loop<kAct>(r, k))
GARDEN_BN_PASS(gradient_sums, gradient_sums_loop<kAct>(r, k, s, q))
GARDEN_BN_PASS(input_gradient, input_gradient_loop<kAct>(r, k))
#undef GARDEN_BN_PASS

// `name`'s pass for `act`.
#define GARDEN_BN_PASS_FOR(name, act)                        \
  ((act) == Act::kNone       ? name##_pass<Act::kNone>()     \
   : (act) == Act::kResidual ? name##_pass<Act::kResidual>() \
   : (act) == Act::kRelu     ? name##_pass<Act::kRelu>()     \
                             : name##_pass<Act::kResidualRelu>())

// r advanced to row `row`.
Rows at_row(Rows r, int64_t row) {
  const int64_t offset = row * r.c;
  if (r.x) r.x += offset;
  if (r.residual) r.residual += offset;
  if (r.dy) r.dy += offset;
  if (r.g) r.g += offset;
  if (r.out) r.out += offset;
  if (r.g_out) r.g_out += offset;
  return r;
}

// Per column, the sums `pass` adds over every row of `r` into its two
// arrays, taken block by block (each block's into its own arrays) and then
// added up in block order.
void column_sums(Pass pass, const Rows& r, const Columns& k, std::vector<double>& first,
                 std::vector<double>& second) {
  const int64_t blocks = block_count(r.rows), c = r.c;
  std::vector<double> a(static_cast<std::size_t>(blocks * c), 0.0);
  std::vector<double> b(static_cast<std::size_t>(blocks * c), 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t r0 = block_begin(block, blocks, r.rows);
      Rows part = at_row(r, r0);
      part.rows = block_begin(block + 1, blocks, r.rows) - r0;
      pass(part, k, a.data() + block * c, b.data() + block * c);
    }
  });
  first.assign(static_cast<std::size_t>(c), 0.0);
  second.assign(static_cast<std::size_t>(c), 0.0);
  for (int64_t block = 0; block < blocks; ++block)
    for (int64_t j = 0; j < c; ++j) {
      first[j] += a[block * c + j];
      second[j] += b[block * c + j];
    }
}

// Runs `pass` over all rows of `r`, in ranges on the intra-op threads.
void over_rows(Pass pass, const Rows& r, const Columns& k) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(r.c, 1));
  at::parallel_for(0, r.rows, grain, [&](int64_t begin, int64_t end) {
    Rows part = at_row(r, begin);
    part.rows = end - begin;
    pass(part, k, nullptr, nullptr);
  });
}

at::Tensor float_vector(const std::vector<double>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (std::size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  return t;
}

Act act_of(bool relu, bool residual) {
  if (relu) return residual ? Act::kResidualRelu : Act::kRelu;
  return residual ? Act::kResidual : Act::kNone;
}

struct BatchNormAct : public torch::autograd::Function<BatchNormAct> {
  // Without a residual, its argument is x, unread.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,
                            const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& residual_in, bool has_residual,
                            at::Tensor running_mean, at::Tensor running_var, double momentum,
                            double eps, bool relu) {
    RECORD_FUNCTION("garden::batch_norm_act", std::vector<c10::IValue>());
    const Act act = act_of(relu, has_residual);
    const at::Tensor x = x_in.contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor residual =
        has_residual ? residual_in.contiguous(at::MemoryFormat::ChannelsLast) : x;
    const int64_t c = x.size(1), rows = x.numel() / c;
    Rows r;
    r.x = x.data_ptr<float>();
    r.rows = rows;
    r.c = c;
    // The sums of x - x's first row (a shift that keeps the variance's
    // difference of sums from cancelling where the mean is large).
    const std::vector<double> shift(r.x, r.x + c);
    Columns k;
    k.shift = shift.data();
    std::vector<double> sum, square;
    column_sums(stats_pass<Act::kNone>(), r, k, sum, square);
    const double count = static_cast<double>(rows);
    // scale, offset (float) and then mean, invstd (double), kept for the
    // backward pass.
    at::Tensor columns = at::empty({2 * c * 3}, at::kFloat);
    float* scale = columns.data_ptr<float>();
    float* offset = scale + c;
    double* mean = reinterpret_cast<double*>(scale + 2 * c);
    double* invstd = mean + c;
    std::vector<double> var(c);
    const float* w = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    for (int64_t j = 0; j < c; ++j) {
      const double m = sum[j] / count;
      var[j] = std::max(0.0, square[j] / count - m * m);
      mean[j] = shift[j] + m;
      invstd[j] = 1.0 / std::sqrt(var[j] + eps);
      const double s = invstd[j] * w[j];
      scale[j] = static_cast<float>(s);
      offset[j] = static_cast<float>(b[j] - mean[j] * s);
    }
    {
      float* rm = running_mean.data_ptr<float>();
      float* rv = running_var.data_ptr<float>();
      for (int64_t j = 0; j < c; ++j) {
        rm[j] = static_cast<float>((1.0 - momentum) * rm[j] + momentum * mean[j]);
        rv[j] =
            static_cast<float>((1.0 - momentum) * rv[j] + momentum * var[j] * count / (count - 1));
      }
    }
    at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
    r.residual = has_residual ? residual.data_ptr<float>() : nullptr;
    r.out = y.data_ptr<float>();
    k.scale = scale;
    k.offset = offset;
    over_rows(GARDEN_BN_PASS_FOR(normalize, act), r, k);
    // The ReLU's mask is computed again from x (and the residual), not read
    // from y.
    ctx->save_for_backward({x, weight, residual});
    ctx->saved_data["columns"] = columns;
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["has_residual"] = has_residual;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("garden::batch_norm_act_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& residual = saved[2];
    const bool has_residual = ctx->saved_data["has_residual"].toBool();
    const Act act = act_of(ctx->saved_data["relu"].toBool(), has_residual);
    const at::Tensor columns = ctx->saved_data["columns"].toTensor();
    const int64_t c = x.size(1), rows = x.numel() / c;
    Columns k;
    k.scale = columns.data_ptr<float>();
    k.offset = k.scale + c;
    k.mean = reinterpret_cast<const double*>(k.scale + 2 * c);
    const double* invstd = k.mean + c;
    const at::Tensor dy = grads[0].contiguous(at::MemoryFormat::ChannelsLast);
    Rows r;
    r.x = x.data_ptr<float>();
    r.residual = has_residual ? residual.data_ptr<float>() : nullptr;
    r.dy = dy.data_ptr<float>();
    r.rows = rows;
    r.c = c;
    // g, the gradient through the ReLU: dy itself without one; written out
    // where it is also the residual's gradient; else made again from dy.
    at::Tensor g = dy;
    if (act == Act::kResidualRelu) {
      g = at::empty_like(dy, at::MemoryFormat::ChannelsLast);
      r.g_out = g.data_ptr<float>();
    }
    std::vector<double> sum_g, sum_gx;
    column_sums(GARDEN_BN_PASS_FOR(gradient_sums, act), r, k, sum_g, sum_gx);
    at::Tensor dx, dweight, dbias;
    if (ctx->needs_input_grad(0)) {
      // dx = w invstd (g - mean(g) - (x - mean) invstd^2 mean(g (x - mean))).
      const float* w = weight.data_ptr<float>();
      const double count = static_cast<double>(rows);
      std::vector<float> kk(c), a(c), b(c);
      for (int64_t j = 0; j < c; ++j) {
        const double scale = w[j] * invstd[j];
        const double slope = -scale * invstd[j] * invstd[j] * sum_gx[j] / count;
        kk[j] = static_cast<float>(scale);
        a[j] = static_cast<float>(slope);
        b[j] = static_cast<float>(-scale * sum_g[j] / count - slope * k.mean[j]);
      }
      k.k = kk.data();
      k.a = a.data();
      k.b = b.data();
      dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
      r.g = g.data_ptr<float>();
      r.g_out = nullptr;
      r.out = dx.data_ptr<float>();
      over_rows(GARDEN_BN_PASS_FOR(input_gradient, act), r, k);
    }
    if (ctx->needs_input_grad(1)) {
      std::vector<double> dw(c);
      for (int64_t j = 0; j < c; ++j) dw[j] = sum_gx[j] * invstd[j];
      dweight = float_vector(dw);
    }
    if (ctx->needs_input_grad(2)) dbias = float_vector(sum_g);
    at::Tensor dresidual = has_residual && ctx->needs_input_grad(3) ? g : at::Tensor();
    return {dx,           dweight,      dbias,        dresidual,    at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace batch_norm_detail

bool batch_norm_act_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& running_mean, const at::Tensor& running_var,
                            const at::Tensor& residual) {
  const auto is_vector = [&](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 1 &&
           t.is_contiguous() && x.dim() == 4 && t.size(0) == x.size(1);
  };
  return x.defined() && x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 4 &&
         x.size(1) > 0 && x.numel() / x.size(1) >= 2 &&
         x.is_contiguous(at::MemoryFormat::ChannelsLast) && !autocast_on(x.device()) &&
         is_vector(weight) && is_vector(bias) && is_vector(running_mean) &&
         is_vector(running_var) &&
         (!residual.defined() ||
          (residual.device().is_cpu() && residual.scalar_type() == at::kFloat &&
           residual.sizes() == x.sizes() &&
           residual.is_contiguous(at::MemoryFormat::ChannelsLast)));
}

at::Tensor batch_norm_act(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& running_mean, const at::Tensor& running_var,
                          double momentum, double eps, const at::Tensor& residual, bool relu) {
  if (!batch_norm_act_applies(x, weight, bias, running_mean, running_var, residual))
    throw std::invalid_argument(
        "batch_norm_act: needs a float32 CPU [N, C, H, W] batch in channels-last memory, float32 "
        "[C] weight, bias and running statistics, and a residual like the batch");
  // LibTorch's custom functions take no undefined tensor: without a
  // residual, x stands in its place, unread.
  return batch_norm_detail::BatchNormAct::apply(x, weight, bias, residual.defined() ? residual : x,
                                                residual.defined(), running_mean, running_var,
                                                momentum, eps, relu);
}

}  // namespace garden::kernels
