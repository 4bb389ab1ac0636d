// One attention head's float32 product in Garden's own register-blocked
// loops (see small_gemm.cpp); attention_matmul's path for training's heads.
#pragma once

#include <cstdint>

namespace garden::kernels {

// c[i * c_row_stride + j] = alpha * sum_l a[i, l] * b[l, j] for i < m, j < n,
// where a[i, l] = a[i * a_row_stride + l * a_col_stride] and b likewise: the
// operands may be transposed or strided views; c's rows are contiguous.
struct SmallProduct {
  const float* a;
  int64_t a_row_stride, a_col_stride;
  const float* b;
  int64_t b_row_stride, b_col_stride;
  int64_t m, k, n;
  float alpha;
  float* c;
  int64_t c_row_stride;
  // b's rows (b_col_stride 1) may be read up to n rounded up to 32 columns
  // (b itself on a multiple of 32 columns of the row it starts in): what
  // lies past n is read and its products dropped, so b is not copied to pad
  // it.
  bool b_padded = false;
};

// Whether small_product takes products of these sizes: n and k of a head
// (up to kSmallProductMaxDim), any m. With b read in place (rows
// contiguous and n a multiple of 32, or b_padded) there is no scratch, and
// any n and k.
constexpr int64_t kSmallProductMaxDim = 256;
bool small_product_applies(int64_t k, int64_t n);

// One product. `scratch` holds at least small_product_scratch(k, n) floats
// (b repacked when its rows are not contiguous), reused across calls.
int64_t small_product_scratch(int64_t k, int64_t n);
void small_product(const SmallProduct& p, float* scratch);
// The same with a chosen build: 16 lanes (AVX-512), 8 (AVX2 with FMA) or 4
// (SSE), for tests; false when this CPU lacks it.
bool small_product_with_lanes(int lanes, const SmallProduct& p, float* scratch);

}  // namespace garden::kernels
