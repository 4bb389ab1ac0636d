// nlp::gelu: LibTorch's forward, Garden's one-pass backward (garden/nlp/kernels.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "garden/nlp/kernels.h"

namespace garden::nlp {
namespace {

// x over [-14, 14] (past the exp clamp at |x| = 13.2) in fine steps, and zero.
at::Tensor sample_points() {
  return torch::cat(
      {torch::linspace(-14.0, 14.0, 20001), torch::zeros({1}), torch::randn({4000}) * 3});
}

at::Tensor garden_gradient(const at::Tensor& x, const at::Tensor& grad) {
  at::Tensor leaf = x.clone().requires_grad_();
  const at::Tensor y = nlp::gelu(leaf);
  EXPECT_TRUE(torch::equal(y.detach(), at::gelu(x.contiguous())));  // LibTorch's forward
  y.backward(grad);
  return leaf.grad();
}

// The derivative of x Phi(x), Phi(x) + x phi(x), in double with libm's erf
// and exp, for each float x.
TEST(GeluTest, BackwardMatchesTheDefinitionInDouble) {
  torch::manual_seed(1);
  const at::Tensor x = sample_points();
  const at::Tensor grad = torch::randn(x.sizes());
  const at::Tensor got = garden_gradient(x, grad);
  const auto xs = x.accessor<float, 1>();
  const auto gs = grad.accessor<float, 1>();
  const auto out = got.accessor<float, 1>();
  double worst = 0.0;
  for (int64_t i = 0; i < x.size(0); ++i) {
    const double v = xs[i];
    const double derivative = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) +
                              v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    const double expected = gs[i] * derivative;
    worst = std::max(
        worst, std::fabs(out[i] - expected) / std::max(1.0, std::fabs(static_cast<double>(gs[i]))));
  }
  EXPECT_LT(worst, 1e-6);
}

// Central finite differences of LibTorch's gelu in double.
TEST(GeluTest, BackwardMatchesFiniteDifferences) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({3, 7, 33}) * 2;
  const at::Tensor got = garden_gradient(x, torch::ones(x.sizes()));
  const at::Tensor xd = x.to(torch::kDouble);
  const double h = 1e-4;
  const at::Tensor numeric = (at::gelu(xd + h) - at::gelu(xd - h)) / (2 * h);
  EXPECT_LT((got.to(torch::kDouble) - numeric).abs().max().item<double>(), 1e-5);
  // And LibTorch's own float backward.
  at::Tensor leaf = x.clone().requires_grad_();
  at::gelu(leaf).sum().backward();
  EXPECT_LT((got - leaf.grad()).abs().max().item<double>(), 1e-6);
}

// Inputs that are not contiguous, double inputs (LibTorch's path) and
// inference (no graph) give LibTorch's values.
TEST(GeluTest, OtherPathsAreLibTorchs) {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({8, 5}).t();
  const at::Tensor got = garden_gradient(x, torch::ones(x.sizes()));
  at::Tensor leaf = x.clone().requires_grad_();
  at::gelu(leaf).sum().backward();
  EXPECT_LT((got - leaf.grad()).abs().max().item<double>(), 1e-6);

  const at::Tensor xd = torch::randn({4, 4}, torch::kDouble);
  EXPECT_TRUE(torch::equal(nlp::gelu(xd), at::gelu(xd)));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(nlp::gelu(x), at::gelu(x)));
}

// bfloat16 with gradients (CPU autocast) is widened for the float32 path:
// LibTorch's float32 forward and Garden's backward on the same numbers, each
// rounded once to bfloat16.
TEST(GeluTest, Bfloat16IsTheFloatPathRoundedOnce) {
  torch::manual_seed(4);
  const at::Tensor values = (torch::randn({3000}) * 3).to(torch::kBFloat16);
  const at::Tensor grad = torch::randn({3000}).to(torch::kBFloat16);
  at::Tensor half = values.clone().requires_grad_();
  const at::Tensor y = nlp::gelu(half);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y, at::gelu(values.to(torch::kFloat)).to(torch::kBFloat16)));
  y.backward(grad);
  const at::Tensor want = garden_gradient(values.to(torch::kFloat), grad.to(torch::kFloat));
  EXPECT_TRUE(torch::equal(half.grad(), want.to(torch::kBFloat16)));
}

}  // namespace
}  // namespace garden::nlp
