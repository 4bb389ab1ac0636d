// kernels::bias_dropout_add: a Transformer sublayer's output bias, dropout and
// residual in one pass, and kernels::bias_relu_dropout: a feed-forward layer's
// bias, ReLU and dropout in one; see include/garden/kernels/bias_dropout_add.h.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "garden/kernels/bias_dropout_add.h"

#include "garden/kernels/dropout.h"
#include "simd/bias_sums.h"
#include "simd/dropout_bits.h"
#include "simd/vector_math.h"

namespace garden::kernels {

namespace {

constexpr int64_t kGrain = 65536;  // elements per parallel task

// ---- bias, dropout and the residual ---------------------------------------------
// A Transformer sublayer ends in r + dropout(y + b): its output projection's
// bias, dropout and the residual. Unfused that is the bias broadcast-copied
// into the product's output, a dropout pass, an add, and in backward a
// dropout pass and a sum for the bias gradient. Here the product runs
// without its bias, one pass forward computes r + keep * (y + b) * scale
// (the mask's bits those FastDropout would draw for y + b, the same
// products, so the same bits as the unfused ops), and one pass backward
// writes keep * scale * g and sums it into the bias gradient (in double,
// blocks of kBiasBlock rows added in block order: the same bits with any
// number of threads). The residual's gradient is g itself. This file is
// built without floating-point contraction (CMakeLists.txt): r + v * s as one
// multiply-add would round differently from the separate product and sum.

// Rows [row, row + rows) of width `width`: bits for the element pairs that
// cover them, then the elements.
template <bool Drop>
__attribute__((always_inline)) inline void bias_dropout_add_rows(
    const float* __restrict y, const float* __restrict bias, const float* __restrict r,
    float* __restrict out, uint8_t* __restrict keep, uint32_t* __restrict bits, int64_t row,
    int64_t rows, int64_t width, uint64_t seed, uint32_t threshold, float scale) {
  for (int64_t i = row; i < row + rows; ++i) {
    const int64_t first = i * width;
    const float* __restrict yi = y + first;
    const float* __restrict ri = r + first;
    float* __restrict oi = out + first;
    if constexpr (Drop) {
      const int64_t pair = first / 2, pairs = (first + width + 1) / 2 - pair;
      draw_pair_bits(seed + static_cast<uint64_t>(pair) * kGoldenGamma, pairs, bits);
      const uint32_t* __restrict b = bits + (first - 2 * pair);
      uint8_t* __restrict ki = keep + first;
      // Two loops: GCC vectorizes neither half of one that stores bytes and
      // floats together (k ? scale : 0 is k * scale for k 0 or 1).
#pragma GCC ivdep
      for (int64_t c = 0; c < width; ++c)
        oi[c] = ri[c] + (yi[c] + bias[c]) * (b[c] >= threshold ? scale : 0.0f);
#pragma GCC ivdep
      for (int64_t c = 0; c < width; ++c) ki[c] = b[c] >= threshold;
    } else {
#pragma GCC ivdep
      for (int64_t c = 0; c < width; ++c) oi[c] = ri[c] + (yi[c] + bias[c]);
    }
  }
}

// relu(y + b) then dropout, rows [row, row + rows): the mask FastDropout
// draws for relu_dropout(y + b) (dropped where the bits fall below the
// threshold or y + b <= 0), and its products v * scale.
__attribute__((always_inline)) inline void bias_relu_dropout_rows(
    const float* __restrict y, const float* __restrict bias, float* __restrict out,
    uint8_t* __restrict keep, uint32_t* __restrict bits, int64_t row, int64_t rows, int64_t width,
    uint64_t seed, uint32_t threshold, float scale) {
  for (int64_t i = row; i < row + rows; ++i) {
    const int64_t first = i * width;
    const float* __restrict yi = y + first;
    float* __restrict oi = out + first;
    uint8_t* __restrict ki = keep + first;
    const int64_t pair = first / 2, pairs = (first + width + 1) / 2 - pair;
    draw_pair_bits(seed + static_cast<uint64_t>(pair) * kGoldenGamma, pairs, bits);
    const uint32_t* __restrict b = bits + (first - 2 * pair);
#pragma GCC ivdep
    for (int64_t c = 0; c < width; ++c) {
      const float v = yi[c] + bias[c];
      oi[c] = v * (((b[c] >= threshold) & (v > 0.0f)) ? scale : 0.0f);
    }
#pragma GCC ivdep
    for (int64_t c = 0; c < width; ++c) ki[c] = (b[c] >= threshold) & (yi[c] + bias[c] > 0.0f);
  }
}

using BiasReluDropoutRows = void (*)(const float*, const float*, float*, uint8_t*, uint32_t*,
                                     int64_t, int64_t, int64_t, uint64_t, uint32_t, float);

__attribute__((target("avx512f,avx512dq"))) void bias_relu_dropout_avx512(
    const float* y, const float* bias, float* out, uint8_t* keep, uint32_t* bits, int64_t row,
    int64_t rows, int64_t width, uint64_t seed, uint32_t threshold, float scale) {
  bias_relu_dropout_rows(y, bias, out, keep, bits, row, rows, width, seed, threshold, scale);
}
__attribute__((target("avx2,fma"))) void bias_relu_dropout_avx2(
    const float* y, const float* bias, float* out, uint8_t* keep, uint32_t* bits, int64_t row,
    int64_t rows, int64_t width, uint64_t seed, uint32_t threshold, float scale) {
  bias_relu_dropout_rows(y, bias, out, keep, bits, row, rows, width, seed, threshold, scale);
}
void bias_relu_dropout_portable(const float* y, const float* bias, float* out, uint8_t* keep,
                                uint32_t* bits, int64_t row, int64_t rows, int64_t width,
                                uint64_t seed, uint32_t threshold, float scale) {
  bias_relu_dropout_rows(y, bias, out, keep, bits, row, rows, width, seed, threshold, scale);
}

using BiasDropoutAddRows = void (*)(const float*, const float*, const float*, float*, uint8_t*,
                                    uint32_t*, int64_t, int64_t, int64_t, uint64_t, uint32_t,
                                    float);

template <bool Drop>
__attribute__((target("avx512f,avx512dq"))) void bias_dropout_add_avx512(
    const float* y, const float* bias, const float* r, float* out, uint8_t* keep, uint32_t* bits,
    int64_t row, int64_t rows, int64_t width, uint64_t seed, uint32_t threshold, float scale) {
  bias_dropout_add_rows<Drop>(y, bias, r, out, keep, bits, row, rows, width, seed, threshold,
                              scale);
}
template <bool Drop>
__attribute__((target("avx2,fma"))) void bias_dropout_add_avx2(
    const float* y, const float* bias, const float* r, float* out, uint8_t* keep, uint32_t* bits,
    int64_t row, int64_t rows, int64_t width, uint64_t seed, uint32_t threshold, float scale) {
  bias_dropout_add_rows<Drop>(y, bias, r, out, keep, bits, row, rows, width, seed, threshold,
                              scale);
}
template <bool Drop>
void bias_dropout_add_portable(const float* y, const float* bias, const float* r, float* out,
                               uint8_t* keep, uint32_t* bits, int64_t row, int64_t rows,
                               int64_t width, uint64_t seed, uint32_t threshold, float scale) {
  bias_dropout_add_rows<Drop>(y, bias, r, out, keep, bits, row, rows, width, seed, threshold,
                              scale);
}

// Backward over rows: grad_y = g * keep * scale (g itself without dropout,
// then grad_y is not written) and the bias gradient's sums in double.
template <bool Drop>
__attribute__((always_inline)) inline void bias_dropout_add_backward_rows(
    const float* __restrict g, const uint8_t* __restrict keep, float* __restrict grad_y,
    double* __restrict sums, int64_t rows, int64_t width, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict gi = g + i * width;
    if constexpr (Drop) {
      const uint8_t* __restrict ki = keep + i * width;
      float* __restrict oi = grad_y + i * width;
#pragma GCC ivdep
      for (int64_t c = 0; c < width; ++c) {
        const float d = gi[c] * (ki[c] ? scale : 0.0f);
        oi[c] = d;
        sums[c] += static_cast<double>(d);
      }
    } else {
#pragma GCC ivdep
      for (int64_t c = 0; c < width; ++c) sums[c] += static_cast<double>(gi[c]);
    }
  }
}

using BiasDropoutAddBackwardRows = void (*)(const float*, const uint8_t*, float*, double*, int64_t,
                                            int64_t, float);

template <bool Drop>
__attribute__((target("avx512f,avx512dq"))) void bias_dropout_add_backward_avx512(
    const float* g, const uint8_t* keep, float* grad_y, double* sums, int64_t rows, int64_t width,
    float scale) {
  bias_dropout_add_backward_rows<Drop>(g, keep, grad_y, sums, rows, width, scale);
}
template <bool Drop>
__attribute__((target("avx2,fma"))) void bias_dropout_add_backward_avx2(const float* g,
                                                                        const uint8_t* keep,
                                                                        float* grad_y, double* sums,
                                                                        int64_t rows, int64_t width,
                                                                        float scale) {
  bias_dropout_add_backward_rows<Drop>(g, keep, grad_y, sums, rows, width, scale);
}
template <bool Drop>
void bias_dropout_add_backward_portable(const float* g, const uint8_t* keep, float* grad_y,
                                        double* sums, int64_t rows, int64_t width, float scale) {
  bias_dropout_add_backward_rows<Drop>(g, keep, grad_y, sums, rows, width, scale);
}

// y, r [rows, width] contiguous, bias [width]; p == 0 is the sum without a mask.
std::pair<at::Tensor, at::Tensor> bias_dropout_add_forward(const at::Tensor& y,
                                                           const at::Tensor& bias,
                                                           const at::Tensor& r, double p) {
  const bool drop = p > 0;
  static const BiasDropoutAddRows kernels[2] = {
      widest_kernel<BiasDropoutAddRows>(bias_dropout_add_avx512<false>,
                                        bias_dropout_add_avx2<false>,
                                        bias_dropout_add_portable<false>),
      widest_kernel<BiasDropoutAddRows>(bias_dropout_add_avx512<true>, bias_dropout_add_avx2<true>,
                                        bias_dropout_add_portable<true>)};
  const int64_t width = y.size(-1), rows = y.numel() / std::max<int64_t>(width, 1);
  at::Tensor out = at::empty_like(y);
  at::Tensor keep = drop ? at::empty(y.sizes(), y.options().dtype(at::kByte)) : at::Tensor();
  const uint32_t threshold = drop ? dropout_threshold(p) : 0;
  const float scale = drop ? static_cast<float>(1.0 / (1.0 - p)) : 1.0f;
  const uint64_t seed = drop ? draw_dropout_seed() : 0;
  const float* py = y.data_ptr<float>();
  const float* pb = bias.data_ptr<float>();
  const float* pr = r.data_ptr<float>();
  float* po = out.data_ptr<float>();
  uint8_t* pk = drop ? keep.data_ptr<uint8_t>() : nullptr;
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)),
                   [&](int64_t begin, int64_t end) {
                     std::vector<uint32_t> bits(drop ? static_cast<std::size_t>(width + 2) : 0);
                     kernels[drop](py, pb, pr, po, pk, bits.data(), begin, end - begin, width, seed,
                                   threshold, scale);
                   });
  return {out, keep};
}

// The gradients of y (undefined without dropout: it is g) and of the bias
// (undefined unless `bias_grad`; with dropout its sums are formed anyway).
std::pair<at::Tensor, at::Tensor> bias_dropout_add_backward(const at::Tensor& g,
                                                            const at::Tensor& keep, double scale,
                                                            bool bias_grad) {
  const bool drop = keep.defined();
  static const BiasDropoutAddBackwardRows kernels[2] = {
      widest_kernel<BiasDropoutAddBackwardRows>(bias_dropout_add_backward_avx512<false>,
                                                bias_dropout_add_backward_avx2<false>,
                                                bias_dropout_add_backward_portable<false>),
      widest_kernel<BiasDropoutAddBackwardRows>(bias_dropout_add_backward_avx512<true>,
                                                bias_dropout_add_backward_avx2<true>,
                                                bias_dropout_add_backward_portable<true>)};
  const int64_t width = g.size(-1), rows = g.numel() / std::max<int64_t>(width, 1);
  if (!drop && !bias_grad) return {};
  at::Tensor grad_y = drop ? at::empty_like(g) : at::Tensor();
  const float* pg = g.data_ptr<float>();
  const uint8_t* pk = drop ? keep.data_ptr<uint8_t>() : nullptr;
  float* py = drop ? grad_y.data_ptr<float>() : nullptr;
  const int64_t blocks = (rows + kBiasBlock - 1) / kBiasBlock;
  at::Tensor partial =
      at::zeros({std::max<int64_t>(blocks, 1), width}, g.options().dtype(at::kDouble));
  double* pp = partial.data_ptr<double>();
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = b * kBiasBlock, count = std::min(kBiasBlock, rows - first);
      kernels[drop](pg + first * width, drop ? pk + first * width : nullptr,
                    drop ? py + first * width : nullptr, pp + b * width, count, width,
                    static_cast<float>(scale));
    }
  });
  return {grad_y, bias_grad ? bias_sums_in_block_order(partial, g.options()) : at::Tensor()};
}

// r + dropout(y + bias, p).
struct BiasDropoutAdd : public torch::autograd::Function<BiasDropoutAdd> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y,
                            const at::Tensor& bias, const at::Tensor& r, double p) {
    RECORD_FUNCTION("garden::bias_dropout_add", std::vector<c10::IValue>());
    auto [out, keep] =
        bias_dropout_add_forward(y.contiguous(), bias.contiguous(), r.contiguous(), p);
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = p > 0 ? 1.0 / (1.0 - p) : 1.0;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor keep = ctx->get_saved_variables()[0];
    const at::Tensor g = grads[0].contiguous();
    const bool bias_grad = ctx->needs_input_grad(1);
    auto [grad_y, grad_bias] =
        bias_dropout_add_backward(g, keep, ctx->saved_data["scale"].toDouble(), bias_grad);
    return {keep.defined() ? grad_y : g, grad_bias, g, at::Tensor()};
  }
};

// y [rows, width] contiguous, bias [width], 0 < p < 1: relu(y + bias)
// dropped out, and the mask.
std::pair<at::Tensor, at::Tensor> bias_relu_dropout_forward(const at::Tensor& y,
                                                            const at::Tensor& bias, double p) {
  static const BiasReluDropoutRows kernel = widest_kernel<BiasReluDropoutRows>(
      bias_relu_dropout_avx512, bias_relu_dropout_avx2, bias_relu_dropout_portable);
  const int64_t width = y.size(-1), rows = y.numel() / std::max<int64_t>(width, 1);
  at::Tensor out = at::empty_like(y);
  at::Tensor keep = at::empty(y.sizes(), y.options().dtype(at::kByte));
  const uint32_t threshold = dropout_threshold(p);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const uint64_t seed = draw_dropout_seed();
  const float* py = y.data_ptr<float>();
  const float* pb = bias.data_ptr<float>();
  float* po = out.data_ptr<float>();
  uint8_t* pk = keep.data_ptr<uint8_t>();
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)),
                   [&](int64_t begin, int64_t end) {
                     std::vector<uint32_t> bits(static_cast<std::size_t>(width + 2));
                     kernel(py, pb, po, pk, bits.data(), begin, end - begin, width, seed, threshold,
                            scale);
                   });
  return {out, keep};
}

// dropout(relu(y + bias), p); its backward is bias_dropout_add's with the
// mask (which holds relu's zeros too), without a residual.
struct BiasReluDropout : public torch::autograd::Function<BiasReluDropout> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y,
                            const at::Tensor& bias, double p) {
    RECORD_FUNCTION("garden::bias_relu_dropout", std::vector<c10::IValue>());
    auto [out, keep] = bias_relu_dropout_forward(y.contiguous(), bias.contiguous(), p);
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = 1.0 / (1.0 - p);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor keep = ctx->get_saved_variables()[0];
    auto [grad_y, grad_bias] = bias_dropout_add_backward(
        grads[0].contiguous(), keep, ctx->saved_data["scale"].toDouble(), ctx->needs_input_grad(1));
    return {grad_y, grad_bias, at::Tensor()};
  }
};

bool cpu_float(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         t.layout() == at::kStrided;
}

// What both fused kernels take: float32 CPU y, non-empty, and its bias [C].
bool fused_bias_applies(const at::Tensor& y, const at::Tensor& bias) {
  return cpu_float(y) && y.dim() >= 1 && y.numel() > 0 && cpu_float(bias) && bias.dim() == 1 &&
         bias.size(0) == y.size(-1);
}

}  // namespace

bool bias_dropout_add_applies(const at::Tensor& y, const at::Tensor& bias,
                              const at::Tensor& residual) {
  return fused_bias_applies(y, bias) && cpu_float(residual) && y.sizes() == residual.sizes();
}

at::Tensor bias_dropout_add(const at::Tensor& y, const at::Tensor& bias, const at::Tensor& residual,
                            double p, bool training) {
  const double rate = training ? p : 0.0;
  // Without a bias: dropout's own one-pass kernel and the add.
  if (!bias_dropout_add_applies(y, bias, residual) || !(rate < 1)) {
    const at::Tensor biased = bias.defined() ? y + bias : y;
    return residual + kernels::dropout(biased, p, training);
  }
  return BiasDropoutAdd::apply(y, bias, residual, rate);
}

at::Tensor bias_relu_dropout(const at::Tensor& y, const at::Tensor& bias, double p, bool training) {
  if (!(training && p > 0 && p < 1 && fused_bias_applies(y, bias)))
    return relu_dropout(bias.defined() ? y + bias : y, p, training);
  return BiasReluDropout::apply(y, bias, p);
}

}  // namespace garden::kernels
