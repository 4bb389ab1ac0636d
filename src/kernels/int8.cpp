#include "garden/kernels/int8.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "garden/base/cpu_isa.h"
#include "garden/base/error.h"

// GCC 12 warns that the AVX-512 intrinsics' own placeholder (the __Y of
// _mm512_undefined_ps, for lanes the full mask never keeps) may be used
// uninitialized; it is a false positive in the compiler's headers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace garden::kernels {

namespace {

constexpr int64_t kBlock = 16;  // outputs per 512-bit register of int32 sums
constexpr int kRows = 4;        // rows of x a tile computes
constexpr int kBlocks = 4;      // output blocks a tile computes (4 x 16 = 64 outputs)

bool cpu_has_vnni() { return cpu_isa().avx512_vnni; }

// AMX with int8, and Linux's permission for this process to use the tiles'
// register state (base/cpu_isa.h). The results are turned into float32 with
// AVX-512.
bool cpu_has_amx_int8() { return request_amx_tile_data(); }

// The kernels a layer can run; the best the CPU has unless a test asks.
enum class Kernel { kPortable, kVnni, kAmx };

Kernel best_kernel() {
  return cpu_has_amx_int8() ? Kernel::kAmx : cpu_has_vnni() ? Kernel::kVnni : Kernel::kPortable;
}

// The first min(left, 16) of 16 lanes.
inline __mmask16 lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

// x [rows, in] float -> uint8 [rows, k_groups * 4] (zeros past `in`), with
// each row's scale and zero point. The values have rows of zeros up to a
// multiple of 16, which AMX's tiles of 16 rows read. One per thread, kept
// between calls (a decoding step quantizes a dozen small inputs): reset
// sizes it without clearing what the next quantization overwrites.
constexpr int64_t kTileRows = 16;

struct QuantizedRows {
  std::vector<uint8_t> values;
  std::vector<float> scales;
  std::vector<int32_t> zero_points;

  // For `rows` rows of `padded` values: the rows past `rows`, up to a
  // multiple of 16, zeroed; the quantizers write every value of the others.
  void reset(int64_t rows, int64_t padded) {
    const int64_t whole = (rows + kTileRows - 1) / kTileRows * kTileRows;
    values.resize(static_cast<std::size_t>(whole * padded));
    std::memset(values.data() + rows * padded, 0, static_cast<std::size_t>((whole - rows) * padded));
    scales.resize(static_cast<std::size_t>(rows));
    zero_points.resize(static_cast<std::size_t>(rows));
  }
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
// The row's minimum and maximum in four running vectors each (one would
// wait on its own min at every vector: 4 cycles). Then 64 values at a time
// are packed to bytes by two saturating packs, which clamp to [0, 255] as
// std::clamp does, and one permutation (the packs work within 128-bit
// lanes).
__attribute__((target("avx512f,avx512bw"))) void quantize_rows_avx512(const float* x, int64_t rows,
                                                                     int64_t in, int64_t padded,
                                                                     QuantizedRows& q) {
  q.reset(rows, padded);
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * in;
    __m512 lo[4], hi[4];
    for (int u = 0; u < 4; ++u) lo[u] = hi[u] = _mm512_setzero_ps();
    __mmask16 unordered = 0;
    int64_t k = 0;
    for (; k + 64 <= in; k += 64)
      for (int u = 0; u < 4; ++u) {
        const __m512 v = _mm512_loadu_ps(row + k + 16 * u);
        unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        lo[u] = _mm512_min_ps(lo[u], v);
        hi[u] = _mm512_max_ps(hi[u], v);
      }
    for (; k < in; k += 16) {
      const __mmask16 mask = lanes(in - k);
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + k);
      unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      lo[0] = _mm512_min_ps(lo[0], v);
      hi[0] = _mm512_max_ps(hi[0], v);
    }
    const __m512 low = _mm512_min_ps(_mm512_min_ps(lo[0], lo[1]), _mm512_min_ps(lo[2], lo[3]));
    const __m512 high = _mm512_max_ps(_mm512_max_ps(hi[0], hi[1]), _mm512_max_ps(hi[2], hi[3]));
    float scale, inverse;
    int32_t zero_point;
    row_range(unordered ? NAN : _mm512_reduce_min_ps(low), _mm512_reduce_max_ps(high), scale,
              inverse, zero_point);
    const __m512 inv = _mm512_set1_ps(inverse);
    const __m512i zp = _mm512_set1_epi32(zero_point);
    uint8_t* out = q.values.data() + m * padded;
    k = 0;
    for (; k + 64 <= in; k += 64) {
      __m512i i[4];
      for (int u = 0; u < 4; ++u)
        i[u] = _mm512_add_epi32(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + k + 16 * u), inv)), zp);
      const __m512i bytes =
          _mm512_packus_epi16(_mm512_packs_epi32(i[0], i[1]), _mm512_packs_epi32(i[2], i[3]));
      _mm512_storeu_si512(out + k, _mm512_permutexvar_epi32(order, bytes));
    }
    const __m512i zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(255);
    for (; k < in; k += 16) {
      const __mmask16 mask = lanes(in - k);
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + k);
      __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, inv)), zp);
      i = _mm512_min_epi32(_mm512_max_epi32(i, zero), top);
      _mm512_mask_cvtepi32_storeu_epi8(out + k, mask, i);
    }
    std::memset(out + in, 0, static_cast<std::size_t>(padded - in));
    q.scales[static_cast<std::size_t>(m)] = scale;
    q.zero_points[static_cast<std::size_t>(m)] = zero_point;
  }
}

void quantize_rows(const float* x, int64_t rows, int64_t in, int64_t padded, QuantizedRows& q) {
  q.reset(rows, padded);
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
    std::memset(out + in, 0, static_cast<std::size_t>(padded - in));
    q.scales[static_cast<std::size_t>(m)] = scale;
    q.zero_points[static_cast<std::size_t>(m)] = zero_point;
  }
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
  bool relu;        // y = max(y, 0), NaN kept (as at::relu)
};

// The dequantization both kernels share, for one output: the float
// operations in this order and fused, so the two agree to the bit.
inline float dequantize(int32_t sum, int32_t zero_point, int32_t w_sum, float x_scale,
                        float w_scale, float bias) {
  const int32_t centered = sum - zero_point * w_sum;
  return std::fma(static_cast<float>(centered), x_scale * w_scale, bias);
}

// ReLU as at::relu gives it: 0 below 0; -0 and NaN stay as they are.
inline float relu_of(float y) { return y < 0.0f ? 0.0f : y; }

// The same for 16 outputs: vmaxps returns its second operand when either
// is NaN and when both are zeros.
__attribute__((target("avx512f"), always_inline)) inline __m512 relu16(__m512 y) {
  return _mm512_max_ps(_mm512_setzero_ps(), y);
}

// dequantize for 16 outputs at once: the vector form, which both vector
// kernels use.
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512 dequantize16(
    __m512i sums, __m512i zero_point, __m512i w_sums, __m512 x_scale, __m512 w_scales,
    __m512 bias) {
  const __m512i centered = _mm512_sub_epi32(sums, _mm512_mullo_epi32(zero_point, w_sums));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(centered), _mm512_mul_ps(x_scale, w_scales), bias);
}

// The weight sums, scales, bias and store masks of a tile's first output
// blocks (at most N, none past t.outputs), loaded once for all its rows.
template <int N>
struct BlockConstants {
  __m512i w_sums[N];
  __m512 w_scales[N], bias[N];
  __mmask16 keep[N];
  int valid;
};

template <int N>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void load_blocks(
    const Tile& t, int blocks, BlockConstants<N>& c) {
  c.valid = 0;
#pragma GCC unroll 4
  for (int j = 0; j < N; ++j) {
    if (j >= blocks || j * kBlock >= t.outputs) break;
    c.w_sums[j] = _mm512_loadu_si512(t.w_sums + j * kBlock);
    c.w_scales[j] = _mm512_loadu_ps(t.w_scales + j * kBlock);
    c.bias[j] = _mm512_loadu_ps(t.bias + j * kBlock);
    c.keep[j] = lanes(t.outputs - j * kBlock);
    c.valid = j + 1;
  }
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
  // The blocks' weight sums, scales, bias and store masks loaded once for
  // all the rows, and everything the stores read held in locals: y's floats
  // may alias the scales and bias, so read through t they were loaded again
  // after every store (about a third of the tile's time at 128 inputs).
  BlockConstants<Blocks> c;
  load_blocks(t, Blocks, c);
  float* const y = t.y;
  const int64_t y_stride = t.y_stride;
  const bool relu = t.relu;
  __m512i zero_points[Rows];
  __m512 x_scales[Rows];
#pragma GCC unroll 4
  for (int i = 0; i < Rows; ++i) {
    zero_points[i] = _mm512_set1_epi32(t.x_zero_points[i]);
    x_scales[i] = _mm512_set1_ps(t.x_scales[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < Blocks; ++j) {
      if (j >= c.valid) break;
      __m512 out = dequantize16(sums[i][j], zero_points[i], c.w_sums[j], x_scales[i],
                                c.w_scales[j], c.bias[j]);
      if (relu) out = relu16(out);
      _mm512_mask_storeu_ps(y + i * y_stride + j * kBlock, c.keep[j], out);
    }
}

// ---- AMX ---------------------------------------------------------------------
// The tile registers as Garden configures them (palette 1): all eight hold
// 16 rows of 64 bytes. tmm0-3 are int32 sums [16 rows][16 outputs]; tmm4-5
// are 16 rows of x, 64 uint8 inputs each; tmm6-7 are one output block's
// weights for 64 inputs: 16 groups of [16 outputs][4 inputs], exactly 16
// consecutive 64-byte groups of the packed layout. tdpbusd multiplies
// unsigned x by signed w into the int32 sums, as vpdpbusd does, so the sums
// are the VNNI kernel's to the bit.
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// A constant in memory: GCC 12's _tile_loadconfig tells the compiler it
// reads only the configuration's first 8 bytes, so the stores of a local
// one were dropped as dead (and ldtilecfg faulted on what was left).
alignas(64) constexpr TileConfig kTileConfig = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

__attribute__((target("amx-tile"))) void amx_begin() { _tile_loadconfig(&kTileConfig); }

__attribute__((target("amx-tile"))) void amx_end() { _tile_release(); }

// Sums for 16 * MR rows of x (from `x`, rows `x_stride` bytes apart) and NR
// output blocks (from `w`, blocks `w_stride` bytes apart), over k_blocks
// blocks of 64 inputs, into sums [32][32] int32.
template <int MR, int NR>
__attribute__((target("amx-tile,amx-int8"))) void amx_sums(const uint8_t* x, int64_t x_stride,
                                                           const int8_t* w, int64_t w_stride,
                                                           int64_t k_blocks, int32_t* sums) {
  _tile_zero(0);
  if constexpr (NR > 1) _tile_zero(1);
  if constexpr (MR > 1) _tile_zero(2);
  if constexpr (MR > 1 && NR > 1) _tile_zero(3);
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    _tile_loadd(4, x + kb * 64, x_stride);
    if constexpr (MR > 1) _tile_loadd(5, x + kTileRows * x_stride + kb * 64, x_stride);
    _tile_loadd(6, w + kb * 1024, 64);
    if constexpr (NR > 1) _tile_loadd(7, w + w_stride + kb * 1024, 64);
    _tile_dpbusd(0, 4, 6);
    if constexpr (NR > 1) _tile_dpbusd(1, 4, 7);
    if constexpr (MR > 1) _tile_dpbusd(2, 5, 6);
    if constexpr (MR > 1 && NR > 1) _tile_dpbusd(3, 5, 7);
  }
  constexpr int64_t kStride = 32 * sizeof(int32_t);
  _tile_stored(0, sums, kStride);
  if constexpr (NR > 1) _tile_stored(1, sums + 16, kStride);
  if constexpr (MR > 1) _tile_stored(2, sums + 16 * 32, kStride);
  if constexpr (MR > 1 && NR > 1) _tile_stored(3, sums + 16 * 32 + 16, kStride);
}

using SumsFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, int32_t*);
constexpr SumsFn kAmxSums[2][2] = {{amx_sums<1, 1>, amx_sums<1, 2>},
                                   {amx_sums<2, 1>, amx_sums<2, 2>}};

// y for `rows` rows and `blocks` output blocks of a tile from its int32
// sums [32][32]: dequantize16, with each block's weight sums, scales and
// bias loaded once for all the rows.
__attribute__((target("avx512f,avx512bw"))) void dequantize_sums(const Tile& t, const int32_t* sums,
                                                                 int rows, int blocks) {
  BlockConstants<2> c;
  load_blocks(t, blocks, c);
  float* const y = t.y;
  const int64_t y_stride = t.y_stride;
  for (int i = 0; i < rows; ++i) {
    const __m512i zero_point = _mm512_set1_epi32(t.x_zero_points[i]);
    const __m512 x_scale = _mm512_set1_ps(t.x_scales[i]);
    for (int j = 0; j < c.valid; ++j) {
      __m512 out = dequantize16(_mm512_loadu_si512(sums + i * 32 + j * kBlock), zero_point,
                                c.w_sums[j], x_scale, c.w_scales[j], c.bias[j]);
      if (t.relu) out = relu16(out);
      _mm512_mask_storeu_ps(y + i * y_stride + j * kBlock, c.keep[j], out);
    }
  }
}

// A layer's products on AMX. Pairs of output blocks outside, 32 rows inside
// (two tiles each), in the VNNI kernel's order: the pair's weights stay in
// cache while the rows pass.
struct PackedWeights {
  const int8_t* packed;
  const float* scales;
  const int32_t* sums;
  const float* bias;
  int64_t k_groups, n_blocks, out;
  bool relu;
};

void amx_layer(const QuantizedRows& q, int64_t rows, const PackedWeights& w, float* y) {
  alignas(64) int32_t sums[32 * 32];
  const int64_t x_stride = w.k_groups * 4, w_stride = w.k_groups * kBlock * 4;
  amx_begin();
  for (int64_t nb = 0; nb < w.n_blocks; nb += 2) {
    const int blocks = static_cast<int>(std::min<int64_t>(2, w.n_blocks - nb));
    for (int64_t m = 0; m < rows; m += 2 * kTileRows) {
      const int tile_rows = static_cast<int>(std::min<int64_t>(2 * kTileRows, rows - m));
      kAmxSums[tile_rows > kTileRows][blocks - 1](q.values.data() + m * x_stride, x_stride,
                                                  w.packed + nb * w_stride, w_stride,
                                                  w.k_groups / 16, sums);
      const Tile tile{nullptr,
                      0,
                      nullptr,
                      0,
                      0,
                      q.scales.data() + m,
                      q.zero_points.data() + m,
                      w.scales + nb * kBlock,
                      w.sums + nb * kBlock,
                      w.bias + nb * kBlock,
                      y + m * w.out + nb * kBlock,
                      w.out,
                      w.out - nb * kBlock,
                      w.relu};
      dequantize_sums(tile, sums, tile_rows, blocks);
    }
  }
  amx_end();
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
      const float y =
          dequantize(sum, t.x_zero_points[i], t.w_sums[n], t.x_scales[i], t.w_scales[n], t.bias[n]);
      t.y[i * t.y_stride + n] = t.relu ? relu_of(y) : y;
    }
  }
}

}  // namespace

std::string int8_kernel() {
  switch (best_kernel()) {
    case Kernel::kAmx:
      return "amx_int8";
    case Kernel::kVnni:
      return "avx512_vnni";
    default:
      return "portable";
  }
}

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
  // Whole blocks of 64 inputs (16 groups of 4, one AMX tile row), zeros
  // past `in`: they add nothing to any sum.
  k_groups_ = (in_ + 63) / 64 * 16;
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

at::Tensor Int8Linear::forward(const at::Tensor& x, bool relu) const {
  return run(x, static_cast<int>(best_kernel()), relu);
}

at::Tensor Int8Linear::forward_portable(const at::Tensor& x, bool relu) const {
  return run(x, static_cast<int>(Kernel::kPortable), relu);
}

at::Tensor Int8Linear::forward_vnni(const at::Tensor& x, bool relu) const {
  if (!cpu_has_vnni()) throw Error("int8 dense layer: this CPU has no AVX512-VNNI");
  return run(x, static_cast<int>(Kernel::kVnni), relu);
}

at::Tensor Int8Linear::run(const at::Tensor& x, int kernel_index, bool relu) const {
  const auto kernel = static_cast<Kernel>(kernel_index);
  const bool vnni = kernel != Kernel::kPortable;
  if (!defined()) throw Error("int8 dense layer: no weight");
  if (x.dim() < 1 || x.size(-1) != in_)
    throw Error("int8 dense layer: the input has " + std::to_string(x.dim() ? x.size(-1) : 0) +
                " features, the layer " + std::to_string(in_));
  if (!x.device().is_cpu())
    throw Error("int8 dense layer: the input is on " + x.device().str() + ", not the CPU");
  // Read in place when x is contiguous float32 (a decoding step's inputs
  // are): each LibTorch call saved is a dispatch, a dozen of them a step.
  const at::Tensor flat = x.scalar_type() == at::kFloat && x.is_contiguous()
                              ? x
                              : x.detach().to(at::kFloat).contiguous();
  const int64_t rows = flat.numel() / in_;
  auto sizes = x.sizes().vec();
  sizes.back() = out_;
  at::Tensor y = at::empty(sizes, at::TensorOptions().dtype(at::kFloat));
  if (rows == 0) return y;
  thread_local QuantizedRows q;
  if (vnni)
    quantize_rows_avx512(flat.data_ptr<float>(), rows, in_, k_groups_ * 4, q);
  else
    quantize_rows(flat.data_ptr<float>(), rows, in_, k_groups_ * 4, q);
  float* out = y.data_ptr<float>();
  if (kernel == Kernel::kAmx) {
    amx_layer(
        q, rows,
        {packed_.data(), scales_.data(), sums_.data(), bias_.data(), k_groups_, n_blocks_, out_,
         relu},
        out);
    return y;
  }
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
                      out_ - nb * kBlock,
                      relu};
      if (vnni)
        kTiles[tile_rows - 1][blocks - 1](tile);
      else
        portable_tile(tile, tile_rows, blocks);
    }
  }
  return y;
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

}  // namespace garden::kernels

#pragma GCC diagnostic pop
