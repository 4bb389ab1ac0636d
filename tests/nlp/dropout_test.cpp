// nlp::dropout and nlp::relu_dropout: the rate, the scale, the backward using
// the forward's mask, and reproducibility from LibTorch's seed.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/torch.h>

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
