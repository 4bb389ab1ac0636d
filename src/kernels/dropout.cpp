#include "garden/kernels/dropout.h"

#include "garden/kernels/widen.h"
#include "simd/dropout_bits.h"
#include "simd/vector_math.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace garden::kernels {

namespace {

// ---- dropout ---------------------------------------------------------------------
// LibTorch's CPU dropout draws every mask bit through bernoulli_ with a
// mt19937 draw per element; without MKL that is the largest non-matmul cost
// of a translation training step. This one
// is the same inverted dropout (each element is zeroed with probability p, the
// rest scaled by 1 / (1 - p)) with the bits from a counter-based generator:
// element pair j of a call gets splitmix64(seed + j * golden_gamma), 32 bits
// each, so the mask does not depend on the thread count. The seed is drawn
// from LibTorch's default CPU generator, so torch::manual_seed and a saved
// generator state reproduce it.

constexpr int64_t kDropoutGrain = 32768;  // element pairs per parallel task

// float32 elements [2 begin, min(2 end, n)): each chunk's random words
// first, one splitmix64 per pair in a loop that vectorizes (64-bit
// multiplies: AVX-512 DQ has them), then its elements in another. The same
// bits and products as the loop of dropout_forward_kernel below, so the same
// mask and values to the bit; GCC leaves that loop scalar.
template <bool Relu>
__attribute__((always_inline)) inline void dropout_pairs_loop(
    const float* __restrict x, float* __restrict y, uint8_t* __restrict keep, int64_t n,
    int64_t begin, int64_t end, uint64_t seed, uint32_t threshold, float scale) {
  constexpr int64_t kChunk = 512;  // pairs
  alignas(64) uint32_t bits[2 * kChunk];
  for (int64_t c = begin; c < end; c += kChunk) {
    const int64_t pairs = std::min(kChunk, end - c);
    draw_pair_bits(seed + static_cast<uint64_t>(c) * kGoldenGamma, pairs, bits);
    const int64_t first = 2 * c, count = std::min(2 * pairs, n - first);
    const float* __restrict in = x + first;
    float* __restrict out = y + first;
    uint8_t* __restrict kept = keep + first;
    // Two loops, because GCC vectorizes neither half of the one loop that
    // would store bytes and floats together: the values (k ? scale : 0 is
    // k * scale, k 0 or 1), then the mask's bytes from the same bits.
#pragma GCC ivdep
    for (int64_t i = 0; i < count; ++i) {
      const float v = in[i];
      const bool k = (bits[i] >= threshold) & (!Relu || v > 0.0f);
      out[i] = v * (k ? scale : 0.0f);
    }
#pragma GCC ivdep
    for (int64_t i = 0; i < count; ++i) kept[i] = (bits[i] >= threshold) & (!Relu || in[i] > 0.0f);
  }
}

using DropoutPairs = void (*)(const float*, float*, uint8_t*, int64_t, int64_t, int64_t, uint64_t,
                              uint32_t, float);

template <bool Relu>
__attribute__((target("avx512f,avx512dq"))) void dropout_pairs_avx512(
    const float* x, float* y, uint8_t* keep, int64_t n, int64_t begin, int64_t end, uint64_t seed,
    uint32_t threshold, float scale) {
  dropout_pairs_loop<Relu>(x, y, keep, n, begin, end, seed, threshold, scale);
}

template <bool Relu>
__attribute__((target("avx2,fma"))) void dropout_pairs_avx2(const float* x, float* y, uint8_t* keep,
                                                            int64_t n, int64_t begin, int64_t end,
                                                            uint64_t seed, uint32_t threshold,
                                                            float scale) {
  dropout_pairs_loop<Relu>(x, y, keep, n, begin, end, seed, threshold, scale);
}

template <bool Relu>
void dropout_pairs_portable(const float* x, float* y, uint8_t* keep, int64_t n, int64_t begin,
                            int64_t end, uint64_t seed, uint32_t threshold, float scale) {
  dropout_pairs_loop<Relu>(x, y, keep, n, begin, end, seed, threshold, scale);
}

// keep[i] = bits(i) >= threshold; y[i] = x[i] * keep[i] * scale (branch-free).
// With Relu, also keep[i] = 0 where x[i] <= 0: relu then dropout in one pass.
// bfloat16 elements are computed in float (at::opmath_type) and rounded once,
// to nearest even, as a float result converted with .to(kBFloat16) would be.
template <typename T, bool Relu>
void dropout_forward_kernel(const T* x, T* y, uint8_t* keep, int64_t n, uint64_t seed,
                            uint32_t threshold, at::opmath_type<T> scale) {
  using Acc = at::opmath_type<T>;
  if constexpr (std::is_same_v<T, float>) {
    static const DropoutPairs pairs = widest_kernel<DropoutPairs>(
        dropout_pairs_avx512<Relu>, dropout_pairs_avx2<Relu>, dropout_pairs_portable<Relu>);
    at::parallel_for(int64_t{0}, (n + 1) / 2, kDropoutGrain, [&](int64_t begin, int64_t end) {
      pairs(x, y, keep, n, begin, end, seed, threshold, scale);
    });
    return;
  }
  at::parallel_for(0, (n + 1) / 2, kDropoutGrain, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const uint64_t bits = splitmix64(seed + static_cast<uint64_t>(j) * kGoldenGamma);
      const uint32_t r[2] = {static_cast<uint32_t>(bits), static_cast<uint32_t>(bits >> 32)};
      for (int64_t h = 0, i = 2 * j; h < 2 && i < n; ++h, ++i) {
        const Acc v = static_cast<Acc>(x[i]);
        const uint8_t k = (r[h] >= threshold) & (!Relu || v > Acc(0));
        keep[i] = k;
        y[i] = static_cast<T>(v * (static_cast<Acc>(k) * scale));
      }
    }
  });
}

// out[i] = grad[i] * keep[i] * scale over [begin, end), float32.
__attribute__((always_inline)) inline void dropout_backward_loop(const float* __restrict grad,
                                                                 const uint8_t* __restrict keep,
                                                                 float* __restrict out,
                                                                 int64_t begin, int64_t end,
                                                                 float scale) {
#pragma GCC ivdep
  for (int64_t i = begin; i < end; ++i) out[i] = grad[i] * (keep[i] ? scale : 0.0f);
}

using DropoutBackward = void (*)(const float*, const uint8_t*, float*, int64_t, int64_t, float);

__attribute__((target("avx512f,avx512dq"))) void dropout_backward_avx512(const float* grad,
                                                                         const uint8_t* keep,
                                                                         float* out, int64_t begin,
                                                                         int64_t end, float scale) {
  dropout_backward_loop(grad, keep, out, begin, end, scale);
}
__attribute__((target("avx2,fma"))) void dropout_backward_avx2(const float* grad,
                                                               const uint8_t* keep, float* out,
                                                               int64_t begin, int64_t end,
                                                               float scale) {
  dropout_backward_loop(grad, keep, out, begin, end, scale);
}
void dropout_backward_portable(const float* grad, const uint8_t* keep, float* out, int64_t begin,
                               int64_t end, float scale) {
  dropout_backward_loop(grad, keep, out, begin, end, scale);
}

template <typename T>
void dropout_backward_kernel(const T* grad, const uint8_t* keep, T* out, int64_t n,
                             at::opmath_type<T> scale) {
  using Acc = at::opmath_type<T>;
  if constexpr (std::is_same_v<T, float>) {
    static const DropoutBackward loop = widest_kernel<DropoutBackward>(
        dropout_backward_avx512, dropout_backward_avx2, dropout_backward_portable);
    at::parallel_for(int64_t{0}, n, 2 * kDropoutGrain,
                     [&](int64_t begin, int64_t end) { loop(grad, keep, out, begin, end, scale); });
    return;
  }
  at::parallel_for(0, n, 2 * kDropoutGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = static_cast<T>(static_cast<Acc>(grad[i]) * (static_cast<Acc>(keep[i]) * scale));
  });
}

// dropout(x), or dropout(relu(x)) when `relu`.
class FastDropout : public torch::autograd::Function<FastDropout> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double p,
                            bool relu) {
    RECORD_FUNCTION("garden::dropout", std::vector<c10::IValue>());
    const at::Tensor input = x.contiguous();
    at::Tensor output = at::empty_like(input);
    at::Tensor keep = at::empty(input.sizes(), input.options().dtype(at::kByte));
    // Drop when the 32 random bits are below p * 2^32.
    const uint32_t threshold = dropout_threshold(p);
    const double scale = 1.0 / (1.0 - p);
    const uint64_t seed = draw_dropout_seed();
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, input.scalar_type(), "garden_dropout", [&] {
      auto* kernel =
          relu ? dropout_forward_kernel<scalar_t, true> : dropout_forward_kernel<scalar_t, false>;
      kernel(input.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), keep.data_ptr<uint8_t>(),
             input.numel(), seed, threshold, static_cast<at::opmath_type<scalar_t>>(scale));
    });
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = scale;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor keep = ctx->get_saved_variables()[0];
    const double scale = ctx->saved_data["scale"].toDouble();
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_input = at::empty_like(grad);
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, grad.scalar_type(), "garden_dropout_backward", [&] {
          dropout_backward_kernel<scalar_t>(grad.data_ptr<scalar_t>(), keep.data_ptr<uint8_t>(),
                                            grad_input.data_ptr<scalar_t>(), grad.numel(),
                                            static_cast<at::opmath_type<scalar_t>>(scale));
        });
    return {grad_input, at::Tensor(), at::Tensor()};
  }
};

bool has_fast_dropout(const at::Tensor& x, double p) {
  return x.device().is_cpu() && p < 1 &&
         (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble ||
          x.scalar_type() == at::kBFloat16);
}

}  // namespace

uint64_t draw_dropout_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  // Costs nothing when it would be the identity.
  if (!training || p <= 0) return x;
  return has_fast_dropout(x, p) ? FastDropout::apply(x, p, /*relu=*/false)
                                : at::dropout(x, p, /*train=*/true);
}

at::Tensor relu_dropout(const at::Tensor& x, double p, bool training) {
  // Fused when the fast dropout applies.
  if (training && p > 0 && has_fast_dropout(x, p)) return FastDropout::apply(x, p, /*relu=*/true);
  return kernels::dropout(at::relu(x), p, training);
}

}  // namespace garden::kernels
