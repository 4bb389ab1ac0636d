// One attention head's product, C = alpha A B, for training's short
// sequences: [32, 64] x [64, 32] and the like, 512 of them in each product
// of a base translation layer. Called once per head, OpenBLAS packs both
// operands each time, which costs as much as the product at these sizes;
// here b is read in place where it can be. Built for AVX-512, AVX2 and SSE
// (GCC contracts the multiply-adds into FMAs in C++ by default).
//
// The scheme: b is read as rows of n floats, in place when its rows are
// contiguous and n is a multiple of the block width, otherwise repacked once
// per call into scratch (zero-padded to that width). Then each block of R
// rows of c and two vectors of columns is accumulated in registers over the
// k products: per l, two loads of b, R broadcasts of a, 2R multiply-adds
// (with AVX-512, four loads of b and 4R multiply-adds where 64 columns
// remain).
#include "simd/small_gemm.h"

#include "garden/base/cpu_isa.h"

#include "simd/transpose16.h"
#include "simd/vector_math.h"

#include <algorithm>
#include <cstring>

namespace garden::kernels {

namespace {

constexpr int64_t kMaxBlockWidth = 32;  // two 16-lane vectors

template <int Lanes>
struct Vector {
  typedef float type __attribute__((vector_size(Lanes * sizeof(float))));
};

// c[r, 0 .. cols) for r < R, from columns [0, V * Lanes) of the packed b.
template <int Lanes, int R, int V>
__attribute__((always_inline)) inline void block(const SmallProduct& p, const float* a,
                                                 const float* b, int64_t ldb, float* c,
                                                 int64_t cols) {
  using Vec = typename Vector<Lanes>::type;
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = Vec{};
  for (int64_t l = 0; l < p.k; ++l) {
    Vec bv[V];
    for (int v = 0; v < V; ++v) std::memcpy(&bv[v], b + l * ldb + v * Lanes, sizeof(Vec));
    for (int r = 0; r < R; ++r) {
      const float s = a[r * p.a_row_stride + l * p.a_col_stride];
      for (int v = 0; v < V; ++v) acc[r][v] += s * bv[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] *= p.alpha;
    float* row = c + r * p.c_row_stride;
    if (cols == V * Lanes) {
      for (int v = 0; v < V; ++v) std::memcpy(row + v * Lanes, &acc[r][v], sizeof(Vec));
    } else {
      float tail[V * Lanes];
      for (int v = 0; v < V; ++v) std::memcpy(tail + v * Lanes, &acc[r][v], sizeof(Vec));
      std::memcpy(row, tail, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

// Rows [0, m) of c's columns [0, cols), cols <= V * Lanes: kRows at a time,
// then the rest in one block.
template <int Lanes, int V>
__attribute__((always_inline)) inline void column_block(const SmallProduct& p, const float* b,
                                                        int64_t ldb, int64_t j, int64_t cols) {
  constexpr int kRows = 6;
  int64_t i = 0;
  for (; i + kRows <= p.m; i += kRows)
    block<Lanes, kRows, V>(p, p.a + i * p.a_row_stride, b + j, ldb, p.c + i * p.c_row_stride + j,
                           cols);
  const float* a = p.a + i * p.a_row_stride;
  float* c = p.c + i * p.c_row_stride + j;
  switch (p.m - i) {
    case 5:
      block<Lanes, 5, V>(p, a, b + j, ldb, c, cols);
      break;
    case 4:
      block<Lanes, 4, V>(p, a, b + j, ldb, c, cols);
      break;
    case 3:
      block<Lanes, 3, V>(p, a, b + j, ldb, c, cols);
      break;
    case 2:
      block<Lanes, 2, V>(p, a, b + j, ldb, c, cols);
      break;
    case 1:
      block<Lanes, 1, V>(p, a, b + j, ldb, c, cols);
      break;
    default:
      break;
  }
}

// Columns [0, n16) of b, n16 = n rounded down to 16, transposed into
// scratch's rows (ldb apart) where b's columns are contiguous (b_row_stride
// 1: keys for the scores, values for their gradient), 16 by 16 in
// registers; returns n16. Element by element, that copy took about a third
// of the products' time on a base translation layer's heads ([32, 64] x
// [64, 32]: 2,048 scalar stores, ldb apart, for 65,536 multiply-adds).
__attribute__((target("avx512f,avx512dq"))) int64_t transpose_columns_avx512(const SmallProduct& p,
                                                                             float* scratch,
                                                                             int64_t ldb) {
  const int64_t n16 = p.n / 16 * 16, k16 = p.k / 16 * 16;
  for (int64_t j = 0; j < n16; j += 16) {
    const float* column = p.b + j * p.b_col_stride;
    for (int64_t l = 0; l < k16; l += 16)
      transpose16_avx512(column + l, p.b_col_stride, scratch + l * ldb + j, ldb);
    for (int64_t x = 0; x < 16; ++x)
      for (int64_t l = k16; l < p.k; ++l) scratch[l * ldb + j + x] = column[x * p.b_col_stride + l];
  }
  return n16;
}

template <int Lanes>
__attribute__((always_inline)) inline void product(const SmallProduct& p, float* scratch) {
  constexpr int64_t kWidth = 2 * Lanes;
  const float* b = p.b;
  int64_t ldb = p.b_row_stride;
  if (p.b_col_stride != 1 || (p.n % kWidth != 0 && !p.b_padded)) {
    ldb = (p.n + kWidth - 1) / kWidth * kWidth;
    if (p.b_row_stride == 1) {
      // b's columns are contiguous (keys for the scores): read them in order.
      int64_t first = 0;
      if constexpr (Lanes == 16) first = transpose_columns_avx512(p, scratch, ldb);
      for (int64_t j = first; j < p.n; ++j) {
        const float* column = p.b + j * p.b_col_stride;
        for (int64_t l = 0; l < p.k; ++l) scratch[l * ldb + j] = column[l];
      }
      for (int64_t l = 0; l < p.k; ++l)
        for (int64_t j = p.n; j < ldb; ++j) scratch[l * ldb + j] = 0.0f;
    } else {
      for (int64_t l = 0; l < p.k; ++l) {
        float* row = scratch + l * ldb;
        const float* source = p.b + l * p.b_row_stride;
        for (int64_t j = 0; j < p.n; ++j) row[j] = source[j * p.b_col_stride];
        for (int64_t j = p.n; j < ldb; ++j) row[j] = 0.0f;
      }
    }
    b = scratch;
  }
  int64_t j = 0;
  // With 32 vector registers (AVX-512), four vectors of columns at a time
  // where a whole 4-vector block fits: 24 sums, each row's broadcast serving
  // four multiply-adds rather than two (bench/linear_bench and the step
  // benchmarks time it). Each element's sum is the same chain of
  // multiply-adds either way, so to the same bits.
  if constexpr (Lanes == 16)
    for (; j + 4 * Lanes <= p.n; j += 4 * Lanes) column_block<Lanes, 4>(p, b, ldb, j, 4 * Lanes);
  for (; j < p.n; j += kWidth) column_block<Lanes, 2>(p, b, ldb, j, std::min(kWidth, p.n - j));
}

__attribute__((target("avx512f,avx512dq"))) void product_avx512(const SmallProduct& p,
                                                                float* scratch) {
  product<16>(p, scratch);
}
__attribute__((target("avx2,fma"))) void product_avx2(const SmallProduct& p, float* scratch) {
  product<8>(p, scratch);
}
void product_sse(const SmallProduct& p, float* scratch) { product<4>(p, scratch); }

}  // namespace

bool small_product_applies(int64_t k, int64_t n) {
  return k >= 1 && n >= 1 && k <= kSmallProductMaxDim && n <= kSmallProductMaxDim;
}

int64_t small_product_scratch(int64_t k, int64_t n) {
  return k * ((n + kMaxBlockWidth - 1) / kMaxBlockWidth * kMaxBlockWidth);
}

void small_product(const SmallProduct& p, float* scratch) {
  static const auto kernel = widest_kernel(product_avx512, product_avx2, product_sse);
  kernel(p, scratch);
}

bool small_product_with_lanes(int lanes, const SmallProduct& p, float* scratch) {
  if (lanes == 16 && cpu_isa().avx512) {
    product_avx512(p, scratch);
  } else if (lanes == 8 && cpu_isa().avx2_fma) {
    product_avx2(p, scratch);
  } else if (lanes == 4) {
    product_sse(p, scratch);
  } else {
    return false;
  }
  return true;
}

}  // namespace garden::kernels
