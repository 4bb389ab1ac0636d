// A 16 x 16 block of floats transposed in AVX-512 registers: the keys'
// and values' repacking of the heads' products (small_gemm.cpp) and the
// weights transposed for a layer's products (linear.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace garden::kernels {

// out[y * out_stride + x] = in[x * in_stride + y] for x, y < 16, for
// callers built for AVX-512 (F). GCC 12 warns, falsely, that the
// intrinsics' own placeholders (_mm512_undefined_ps's __Y) are used
// uninitialized; silenced here, for this function only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline void transpose16_avx512(
    const float* in, int64_t in_stride, float* out, int64_t out_stride) {
  __m512 r[16], t[16];
  for (int x = 0; x < 16; ++x) r[x] = _mm512_loadu_ps(in + x * in_stride);
  // Pairs of rows interleaved, then groups of four: r[4 g + c] holds, in
  // 128-bit lane q, column 4 q + c of rows 4 g .. 4 g + 3.
  for (int x = 0; x < 8; ++x) {
    t[2 * x] = _mm512_unpacklo_ps(r[2 * x], r[2 * x + 1]);
    t[2 * x + 1] = _mm512_unpackhi_ps(r[2 * x], r[2 * x + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  // Lanes gathered across the groups: t[c] (c < 4) holds columns c and
  // c + 8, t[c + 4] columns c + 4 and c + 12, of rows 0-7; t[8 + ...] the
  // same of rows 8-15.
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[c + 4] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
  }
  for (int y = 0; y < 8; ++y) {
    _mm512_storeu_ps(out + y * out_stride, _mm512_shuffle_f32x4(t[y], t[8 + y], 0x88));
    _mm512_storeu_ps(out + (y + 8) * out_stride, _mm512_shuffle_f32x4(t[y], t[8 + y], 0xDD));
  }
}
#pragma GCC diagnostic pop

}  // namespace garden::kernels
