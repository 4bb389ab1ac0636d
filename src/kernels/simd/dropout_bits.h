// The dropout mask's random bits, shared by the dropout kernel (kernels.cpp)
// and attention's fused dropout (fused_attention.cpp), so that both draw the
// same mask for the same seed: element i of a call keeps its value when
// bits(i) >= p * 2^32, where element pair j = i / 2 takes the two halves of
// splitmix64(seed + j * golden_gamma) (low half first). The seed is one draw
// from LibTorch's default CPU generator.
#pragma once

#include <cstdint>
#include <cstring>

namespace garden::kernels {

// One draw from LibTorch's default CPU generator (under its mutex).
uint64_t draw_dropout_seed();

inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// bits[2 j], bits[2 j + 1] = the low and high halves of
// splitmix64(start + j * golden_gamma), j < pairs: the words of `pairs`
// element pairs from the one whose word is splitmix64(start), in a loop that
// vectorizes in the builds that inline it (64-bit multiplies: AVX-512 DQ).
__attribute__((always_inline)) inline void draw_pair_bits(uint64_t start, int64_t pairs,
                                                          uint32_t* __restrict bits) {
  for (int64_t j = 0; j < pairs; ++j) {
    const uint64_t r = splitmix64(start + static_cast<uint64_t>(j) * kGoldenGamma);
    std::memcpy(bits + 2 * j, &r, sizeof(r));  // low half first
  }
}

// The threshold below which an element is dropped with probability p.
inline uint32_t dropout_threshold(double p) {
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 4294967295u : static_cast<uint32_t>(t + 0.5);
}

}  // namespace garden::kernels
