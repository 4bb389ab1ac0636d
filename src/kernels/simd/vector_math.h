// Helpers of the CPU kernels: dispatch to the widest instruction set the CPU runs, and
// exponentials written without libm calls, so the loops that use them
// vectorize.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "garden/base/cpu_isa.h"

namespace garden::kernels {

// The widest of a kernel's builds this CPU runs: AVX-512 (F, DQ), AVX2 with
// FMA, or the portable one.
template <typename Kernel>
inline Kernel widest_kernel(Kernel avx512, Kernel avx2, Kernel portable) {
  if (cpu_isa().avx512) return avx512;
  if (cpu_isa().avx2_fma) return avx2;
  return portable;
}

// e^u for u <= 0, in double: 2^n e^g with |g| <= ln 2 / 2 and e^g by its
// Taylor polynomial of degree 13 (truncation below 1e-17 relative); no libm
// call, so a loop of it vectorizes. 0 below -708 (the sums it enters hold a
// 1 from the maximum). NaN stays NaN.
__attribute__((always_inline)) inline double exp_nonpositive(double u) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  const double v = u < -708.0 ? -708.0 : u;
  const double n = std::floor(v * kLog2e + 0.5);
  const double g = (v - n * kLn2Hi) - n * kLn2Lo;
  const double p =
      1.0 +
      g * (1.0 +
           g * (0.5 +
                g * (1.0 / 6 +
                     g * (1.0 / 24 +
                          g * (1.0 / 120 +
                               g * (1.0 / 720 +
                                    g * (1.0 / 5040 +
                                         g * (1.0 / 40320 +
                                              g * (1.0 / 362880 +
                                                   g * (1.0 / 3628800 +
                                                        g * (1.0 / 39916800 +
                                                             g * (1.0 / 479001600 +
                                                                  g * (1.0 /
                                                                       6227020800.0)))))))))))));
  // n >= -1021 for every number; NaN becomes -1023 here (a NaN's conversion
  // to an integer is undefined), and p carries the NaN to the result.
  const double whole = n > -1023.0 ? n : -1023.0;
  const int64_t bits = (static_cast<int64_t>(whole) + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return u < -708.0 ? 0.0 : p * scale;
}

// e^u for u <= 0, in float: 2^n e^g with |g| <= ln 2 / 2 and e^g by its
// Taylor polynomial of degree 7 (relative error about 1e-8 before the
// float rounding). 0 below -87.3 (e^-87.3 is 1.2e-38). NaN stays NaN.
// Every coefficient is a constant factor: the last was written as a
// division by 5040 would be one GCC must keep (1 / 5040 is not exact): a
// vdivps in every 16 exponentials. The double version likewise.
__attribute__((always_inline)) inline float exp_nonpositive(float u) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float v = u < -87.3f ? -87.3f : u;
  const float n = std::floor(v * kLog2e + 0.5f);
  const float g = (v - n * kLn2Hi) - n * kLn2Lo;
  const float p =
      1.0f +
      g * (1.0f + g * (0.5f + g * (1.0f / 6 +
                                   g * (1.0f / 24 +
                                        g * (1.0f / 120 + g * (1.0f / 720 + g * (1.0f / 5040)))))));
  // n >= -126 for every number; NaN becomes -127 here, as in the double
  // version.
  const float whole = n > -127.0f ? n : -127.0f;
  const int32_t bits = (static_cast<int32_t>(whole) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return u < -87.3f ? 0.0f : p * scale;
}

}  // namespace garden::kernels
