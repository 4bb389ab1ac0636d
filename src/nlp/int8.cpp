#include "garden/nlp/int8.h"

#include <immintrin.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "garden/base/error.h"

// GCC 12 warns that the AVX-512 intrinsics' own placeholder (the __Y of
// _mm512_undefined_ps, for lanes the full mask never keeps) may be used
// uninitialized; it is a false positive in the compiler's headers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace garden::nlp {

namespace {

constexpr int64_t kBlock = 16;  // outputs per 512-bit register of int32 sums
constexpr int kRows = 4;        // rows of x a tile computes
constexpr int kBlocks = 4;      // output blocks a tile computes (4 x 16 = 64 outputs)

bool cpu_has_vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

// The first min(left, 16) of 16 lanes.
inline __mmask16 lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

// x [rows, in] float -> uint8 [rows, k_groups * 4] (zeros past `in`), with
// each row's scale and zero point.
struct QuantizedRows {
  std::vector<uint8_t> values;
  std::vector<float> scales;
  std::vector<int32_t> zero_points;

  QuantizedRows(int64_t rows, int64_t padded)
      : values(static_cast<std::size_t>(rows * padded), 0),
        scales(static_cast<std::size_t>(rows)),
        zero_points(static_cast<std::size_t>(rows)) {}
};

// The row's scale and zero point from its min and max (both widened to 0).
void row_range(float lo, float hi, float& scale, float& inverse, int32_t& zero_point) {
  if (!std::isfinite(lo) || !std::isfinite(hi))
    throw Error("int8 dense layer: its input holds an infinity or NaN");
  scale = (hi - lo) / 255.0f;
  if (!(scale > 0.0f)) scale = 1.0f;  // a row of zeros
  inverse = 1.0f / scale;
  zero_point = std::clamp(static_cast<int32_t>(std::nearbyint(-lo * inverse)), 0, 255);
}

// The same bytes as quantize_rows below, 16 values an instruction:
// _mm512_cvtps_epi32 rounds to nearest even, as std::nearbyint does.
__attribute__((target("avx512f,avx512bw"))) QuantizedRows quantize_rows_avx512(const float* x,
                                                                               int64_t rows,
                                                                               int64_t in,
                                                                               int64_t padded) {
  QuantizedRows q(rows, padded);
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * in;
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    __mmask16 unordered = 0;
    for (int64_t k = 0; k < in; k += 16) {
      const __mmask16 mask = lanes(in - k);
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + k);
      unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      lo = _mm512_min_ps(lo, v);
      hi = _mm512_max_ps(hi, v);
    }
    float scale, inverse;
    int32_t zero_point;
    row_range(unordered ? NAN : _mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi), scale, inverse,
              zero_point);
    const __m512 inv = _mm512_set1_ps(inverse);
    const __m512i zp = _mm512_set1_epi32(zero_point);
    const __m512i low = _mm512_setzero_si512(), high = _mm512_set1_epi32(255);
    uint8_t* out = q.values.data() + m * padded;
    for (int64_t k = 0; k < in; k += 16) {
      const __mmask16 mask = lanes(in - k);
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + k);
      __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, inv)), zp);
      i = _mm512_min_epi32(_mm512_max_epi32(i, low), high);
      _mm512_mask_cvtepi32_storeu_epi8(out + k, mask, i);
    }
    q.scales[static_cast<std::size_t>(m)] = scale;
    q.zero_points[static_cast<std::size_t>(m)] = zero_point;
  }
  return q;
}

QuantizedRows quantize_rows(const float* x, int64_t rows, int64_t in, int64_t padded) {
  QuantizedRows q(rows, padded);
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * in;
    float lo = 0.0f, hi = 0.0f;
    bool nan = false;
    for (int64_t k = 0; k < in; ++k) {
      lo = std::min(lo, row[k]);
      hi = std::max(hi, row[k]);
      nan |= std::isnan(row[k]);
    }
    float scale, inverse;
    int32_t zero_point;
    row_range(nan ? NAN : lo, hi, scale, inverse, zero_point);
    uint8_t* out = q.values.data() + m * padded;
    for (int64_t k = 0; k < in; ++k) {
      const int32_t v = static_cast<int32_t>(std::nearbyint(row[k] * inverse)) + zero_point;
      out[k] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
    q.scales[static_cast<std::size_t>(m)] = scale;
    q.zero_points[static_cast<std::size_t>(m)] = zero_point;
  }
  return q;
}

// What a tile needs: `rows` rows of x from row m0, output blocks nb0.. of
// the weight, and where y goes.
struct Tile {
  const uint8_t* x;  // the first row's quantized values
  int64_t x_stride;  // k_groups * 4
  const int8_t* w;   // block nb0's packed weights
  int64_t w_stride;  // bytes from one block to the next: k_groups * 64
  int64_t k_groups;
  const float* x_scales;
  const int32_t* x_zero_points;
  const float* w_scales;  // from output nb0 * 16
  const int32_t* w_sums;
  const float* bias;
  float* y;  // row m0, output nb0 * 16
  int64_t y_stride;
  int64_t outputs;  // valid outputs from nb0 * 16 (may end inside the last block)
};

// The dequantization both kernels share, for one output: the float
// operations in this order and fused, so the two agree to the bit.
inline float dequantize(int32_t sum, int32_t zero_point, int32_t w_sum, float x_scale,
                        float w_scale, float bias) {
  const int32_t centered = sum - zero_point * w_sum;
  return std::fma(static_cast<float>(centered), x_scale * w_scale, bias);
}

template <int Rows, int Blocks>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vnni_tile(const Tile& t) {
  __m512i sums[Rows][Blocks];
#pragma GCC unroll 4
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < Blocks; ++j) sums[i][j] = _mm512_setzero_si512();
  for (int64_t g = 0; g < t.k_groups; ++g) {
    __m512i w[Blocks];
#pragma GCC unroll 4
    for (int j = 0; j < Blocks; ++j) w[j] = _mm512_loadu_si512(t.w + j * t.w_stride + g * 64);
#pragma GCC unroll 4
    for (int i = 0; i < Rows; ++i) {
      int32_t four;
      std::memcpy(&four, t.x + i * t.x_stride + g * 4, sizeof(four));
      const __m512i x = _mm512_set1_epi32(four);
#pragma GCC unroll 4
      for (int j = 0; j < Blocks; ++j) sums[i][j] = _mm512_dpbusd_epi32(sums[i][j], x, w[j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < Rows; ++i) {
    const __m512i zero_point = _mm512_set1_epi32(t.x_zero_points[i]);
    const __m512 x_scale = _mm512_set1_ps(t.x_scales[i]);
#pragma GCC unroll 4
    for (int j = 0; j < Blocks; ++j) {
      const int64_t left = t.outputs - j * kBlock;
      if (left <= 0) break;
      const __mmask16 mask = lanes(left);
      const __m512i centered = _mm512_sub_epi32(
          sums[i][j], _mm512_mullo_epi32(zero_point, _mm512_loadu_si512(t.w_sums + j * kBlock)));
      const __m512 scale = _mm512_mul_ps(x_scale, _mm512_loadu_ps(t.w_scales + j * kBlock));
      const __m512 y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(centered), scale,
                                       _mm512_loadu_ps(t.bias + j * kBlock));
      _mm512_mask_storeu_ps(t.y + i * t.y_stride + j * kBlock, mask, y);
    }
  }
}

using TileFn = void (*)(const Tile&);
constexpr TileFn kTiles[kRows][kBlocks] = {
    {vnni_tile<1, 1>, vnni_tile<1, 2>, vnni_tile<1, 3>, vnni_tile<1, 4>},
    {vnni_tile<2, 1>, vnni_tile<2, 2>, vnni_tile<2, 3>, vnni_tile<2, 4>},
    {vnni_tile<3, 1>, vnni_tile<3, 2>, vnni_tile<3, 3>, vnni_tile<3, 4>},
    {vnni_tile<4, 1>, vnni_tile<4, 2>, vnni_tile<4, 3>, vnni_tile<4, 4>},
};

// The same integers and float operations, one output at a time.
void portable_tile(const Tile& t, int rows, int blocks) {
  for (int i = 0; i < rows; ++i) {
    for (int64_t n = 0; n < std::min<int64_t>(t.outputs, blocks * kBlock); ++n) {
      const int8_t* w = t.w + (n / kBlock) * t.w_stride + (n % kBlock) * 4;
      const uint8_t* x = t.x + i * t.x_stride;
      int32_t sum = 0;
      for (int64_t g = 0; g < t.k_groups; ++g)
        for (int64_t c = 0; c < 4; ++c)
          sum += static_cast<int32_t>(x[g * 4 + c]) * static_cast<int32_t>(w[g * 64 + c]);
      t.y[i * t.y_stride + n] =
          dequantize(sum, t.x_zero_points[i], t.w_sums[n], t.x_scales[i], t.w_scales[n], t.bias[n]);
    }
  }
}

}  // namespace

std::string int8_kernel() { return cpu_has_vnni() ? "avx512_vnni" : "portable"; }

void check_int8_available(const std::string& what, const c10::Device& device) {
  if (!device.is_cpu())
    throw Error(what + ": int8 inference runs on the CPU; the model is on " + device.str());
}

Int8Linear::Int8Linear(const at::Tensor& weight, const at::Tensor& bias) {
  check_int8_available("int8 dense layer", weight.device());
  if (weight.dim() != 2 || weight.size(0) == 0 || weight.size(1) == 0)
    throw Error("int8 dense layer: the weight must be [out, in], not " + c10::str(weight.sizes()));
  in_ = weight.size(1);
  out_ = weight.size(0);
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != out_))
    throw Error("int8 dense layer: the bias must be [" + std::to_string(out_) + "]");
  k_groups_ = (in_ + 3) / 4;
  n_blocks_ = (out_ + kBlock - 1) / kBlock;
  const int64_t padded_out = n_blocks_ * kBlock;
  const at::Tensor w = weight.detach().to(at::kFloat).contiguous();
  const float* data = w.data_ptr<float>();
  packed_.assign(static_cast<std::size_t>(n_blocks_ * k_groups_ * kBlock * 4), 0);
  scales_.assign(static_cast<std::size_t>(padded_out), 0.0f);
  sums_.assign(static_cast<std::size_t>(padded_out), 0);
  bias_.assign(static_cast<std::size_t>(padded_out), 0.0f);
  for (int64_t n = 0; n < out_; ++n) {
    const float* row = data + n * in_;
    float largest = 0.0f;
    for (int64_t k = 0; k < in_; ++k) largest = std::max(largest, std::fabs(row[k]));
    if (!std::isfinite(largest))
      throw Error("int8 dense layer: output " + std::to_string(n) +
                  "'s weights hold an infinity or NaN");
    const float scale = largest > 0.0f ? largest / 127.0f : 1.0f;
    int32_t sum = 0;
    int8_t* block = packed_.data() + (n / kBlock) * k_groups_ * kBlock * 4 + (n % kBlock) * 4;
    for (int64_t k = 0; k < in_; ++k) {
      const auto q = static_cast<int8_t>(
          std::clamp(static_cast<int32_t>(std::nearbyint(row[k] / scale)), -127, 127));
      block[(k / 4) * kBlock * 4 + k % 4] = q;
      sum += q;
    }
    scales_[static_cast<std::size_t>(n)] = scale;
    sums_[static_cast<std::size_t>(n)] = sum;
  }
  if (bias.defined()) {
    const at::Tensor b = bias.detach().to(at::kFloat).contiguous();
    std::copy(b.data_ptr<float>(), b.data_ptr<float>() + out_, bias_.begin());
  }
}

at::Tensor Int8Linear::forward(const at::Tensor& x) const { return run(x, cpu_has_vnni()); }

at::Tensor Int8Linear::forward_portable(const at::Tensor& x) const { return run(x, false); }

at::Tensor Int8Linear::run(const at::Tensor& x, bool vnni) const {
  if (!defined()) throw Error("int8 dense layer: no weight");
  if (x.dim() < 1 || x.size(-1) != in_)
    throw Error("int8 dense layer: the input has " + std::to_string(x.dim() ? x.size(-1) : 0) +
                " features, the layer " + std::to_string(in_));
  if (!x.device().is_cpu())
    throw Error("int8 dense layer: the input is on " + x.device().str() + ", not the CPU");
  const at::Tensor flat = x.detach().to(at::kFloat).reshape({-1, in_}).contiguous();
  const int64_t rows = flat.size(0);
  auto sizes = x.sizes().vec();
  sizes.back() = out_;
  at::Tensor y = at::empty({rows, out_}, flat.options());
  if (rows == 0) return y.view(sizes);
  const QuantizedRows q =
      vnni ? quantize_rows_avx512(flat.data_ptr<float>(), rows, in_, k_groups_ * 4)
           : quantize_rows(flat.data_ptr<float>(), rows, in_, k_groups_ * 4);
  float* out = y.data_ptr<float>();
  // Output blocks outside, rows inside: a group of weight blocks stays in
  // cache while every row passes it.
  for (int64_t nb = 0; nb < n_blocks_; nb += kBlocks) {
    const int blocks = static_cast<int>(std::min<int64_t>(kBlocks, n_blocks_ - nb));
    for (int64_t m = 0; m < rows; m += kRows) {
      const int tile_rows = static_cast<int>(std::min<int64_t>(kRows, rows - m));
      const Tile tile{q.values.data() + m * k_groups_ * 4,
                      k_groups_ * 4,
                      packed_.data() + nb * k_groups_ * kBlock * 4,
                      k_groups_ * kBlock * 4,
                      k_groups_,
                      q.scales.data() + m,
                      q.zero_points.data() + m,
                      scales_.data() + nb * kBlock,
                      sums_.data() + nb * kBlock,
                      bias_.data() + nb * kBlock,
                      out + m * out_ + nb * kBlock,
                      out_,
                      out_ - nb * kBlock};
      if (vnni)
        kTiles[tile_rows - 1][blocks - 1](tile);
      else
        portable_tile(tile, tile_rows, blocks);
    }
  }
  return y.view(sizes);
}

at::Tensor Int8Linear::quantized_weight() const {
  at::Tensor w = at::empty({out_, in_}, at::kChar);
  int8_t* data = w.data_ptr<int8_t>();
  for (int64_t n = 0; n < out_; ++n)
    for (int64_t k = 0; k < in_; ++k)
      data[n * in_ + k] = packed_[static_cast<std::size_t>(
          (n / kBlock) * k_groups_ * kBlock * 4 + (k / 4) * kBlock * 4 + (n % kBlock) * 4 + k % 4)];
  return w;
}

at::Tensor Int8Linear::weight_scales() const {
  return at::from_blob(const_cast<float*>(scales_.data()), {out_}, at::kFloat).clone();
}

}  // namespace garden::nlp

#pragma GCC diagnostic pop
