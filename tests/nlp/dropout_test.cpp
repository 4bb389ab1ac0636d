// nlp::dropout and nlp::relu_dropout: the rate, the scale, the backward using
// the forward's mask, and reproducibility from LibTorch's seed.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "garden/nlp/transformer.h"

namespace {

namespace nlp = garden::nlp;

TEST(Dropout, ZeroesAboutPAndScalesTheRestByOneOverOneMinusP) {
  torch::manual_seed(1);
  const at::Tensor x = torch::rand({1000, 1000}) + 0.5;  // no zeros of its own
  for (double p : {0.1, 0.3, 0.5}) {
    const at::Tensor y = nlp::dropout(x, p, /*training=*/true);
    const double dropped = (y == 0).to(torch::kDouble).mean().item<double>();
    // 1e6 Bernoulli draws: the standard deviation of the rate is < 5e-4.
    EXPECT_NEAR(dropped, p, 3e-3) << "p " << p;
    const at::Tensor kept = y != 0;
    EXPECT_TRUE(torch::allclose(y.masked_select(kept), x.masked_select(kept) / (1 - p), 1e-6, 0))
        << "p " << p;
  }
  EXPECT_TRUE(torch::equal(nlp::dropout(x, 0.5, /*training=*/false), x));
  EXPECT_TRUE(torch::equal(nlp::dropout(x, 0.0, /*training=*/true), x));
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  torch::manual_seed(2);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    at::Tensor x = (torch::rand({64, 33}, dtype) + 0.5).requires_grad_();
    const at::Tensor y = nlp::dropout(x, 0.25, true);
    const at::Tensor weights = torch::randn({64, 33}, dtype);
    (y * weights).sum().backward();
    const at::Tensor expected = (y != 0).to(dtype) * weights / 0.75;
    EXPECT_TRUE(torch::allclose(x.grad(), expected, 1e-6, 1e-12));
  }
}

TEST(Dropout, TheSeedReproducesTheMaskWhateverTheThreadCount) {
  const at::Tensor x = torch::ones({300, 700});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  torch::manual_seed(9);
  const at::Tensor a = nlp::dropout(x, 0.1, true);
  const at::Tensor a_next = nlp::dropout(x, 0.1, true);
  at::set_num_threads(2);
  torch::manual_seed(9);
  const at::Tensor b = nlp::dropout(x, 0.1, true);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, a_next));  // each call draws a new seed
}

// The mask by its recipe (src/nlp/dropout_bits.h), computed here on its
// own: element i keeps its value when half i % 2 (low first) of
// splitmix64(seed + (i / 2) * golden_gamma) is at least p * 2^32, with the
// seed the next 64-bit draw of LibTorch's default generator. float32 runs a
// vectorized kernel in chunks of 1,024 elements: sizes off the chunks and
// odd, one and two threads, dropout and relu then dropout (negatives, zeros
// and a NaN among the inputs), and the kept values x / (1 - p) to the bit.
TEST(Dropout, Float32MasksFollowTheRecipeElementByElement) {
  const auto splitmix64 = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const int threads = at::get_num_threads();
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{3001}, int64_t{70001}})
    for (const int t : {1, 2})
      for (const bool relu : {false, true}) {
        at::set_num_threads(t);
        torch::manual_seed(11);
        at::Tensor x = torch::randn({n});
        x[0] = relu ? 0.0f : 1.5f;
        if (n > 5) x[5] = std::numeric_limits<float>::quiet_NaN();
        torch::manual_seed(n + t);
        const uint64_t seed =
            at::check_generator<at::CPUGeneratorImpl>(at::detail::getDefaultCPUGenerator())
                ->random64();
        torch::manual_seed(n + t);
        const double p = 0.3;
        const at::Tensor y = relu ? nlp::relu_dropout(x, p, true) : nlp::dropout(x, p, true);
        const auto threshold = static_cast<uint32_t>(p * 4294967296.0 + 0.5);
        const float scale = static_cast<float>(1.0 / (1.0 - p));
        const float* px = x.data_ptr<float>();
        const float* py = y.data_ptr<float>();
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t r =
              splitmix64(seed + static_cast<uint64_t>(i / 2) * 0x9e3779b97f4a7c15ULL);
          const auto bits = static_cast<uint32_t>(i % 2 ? r >> 32 : r);
          const bool keep = bits >= threshold && (!relu || px[i] > 0.0f);
          const float want = px[i] * (static_cast<float>(keep) * scale);
          if (std::memcmp(&want, &py[i], sizeof(float)) != 0 &&
              !(std::isnan(want) && std::isnan(py[i])))
            ++wrong;
        }
        EXPECT_EQ(wrong, 0) << "n " << n << ", threads " << t << (relu ? ", relu" : "");
      }
  at::set_num_threads(threads);
}

TEST(Dropout, ReluDropoutIsDropoutOfRelu) {
  torch::manual_seed(4);
  at::Tensor x = torch::randn({50, 40}, torch::kDouble).requires_grad_();
  torch::manual_seed(5);
  const at::Tensor fused = nlp::relu_dropout(x, 0.2, true);
  torch::manual_seed(5);
  const at::Tensor separate = nlp::dropout(torch::relu(x), 0.2, true);
  EXPECT_TRUE(torch::equal(fused, separate));
  fused.sum().backward();
  const at::Tensor expected = (fused != 0).to(torch::kDouble) / 0.8;
  EXPECT_TRUE(torch::allclose(x.grad(), expected, 1e-12, 0));
  EXPECT_EQ(x.grad().masked_select(x <= 0).abs().sum().item<double>(), 0.0);
}

// bfloat16 (what CPU autocast's products return) takes the same kernel:
// for the same seed, the mask and values of the float computation on the
// same numbers, rounded once to bfloat16; the gradient likewise.
TEST(Dropout, Bfloat16IsTheFloatComputationRoundedOnce) {
  const at::Tensor values = (torch::randn({70, 90}) * 3).to(torch::kBFloat16);
  for (bool relu : {false, true}) {
    at::Tensor half = values.clone().requires_grad_();
    at::Tensor full = values.to(torch::kFloat).requires_grad_();
    torch::manual_seed(12);
    const at::Tensor y = relu ? nlp::relu_dropout(half, 0.1, true) : nlp::dropout(half, 0.1, true);
    torch::manual_seed(12);
    const at::Tensor want =
        relu ? nlp::relu_dropout(full, 0.1, true) : nlp::dropout(full, 0.1, true);
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(y, want.to(torch::kBFloat16))) << "relu " << relu;
    const at::Tensor weights = torch::randn({70, 90});
    (y * weights.to(torch::kBFloat16)).sum().backward();
    (want * weights.to(torch::kBFloat16).to(torch::kFloat)).sum().backward();
    ASSERT_EQ(half.grad().scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(half.grad(), full.grad().to(torch::kBFloat16))) << "relu " << relu;
  }
}

}  // namespace
