// kernels::gelu: LibTorch's forward, Garden's one-pass backward (garden/kernels/gelu.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "garden/kernels/gelu.h"

namespace garden::kernels {
namespace {

// x over [-14, 14] (past the exp clamp at |x| = 13.2) in fine steps, and zero.
at::Tensor sample_points() {
  return torch::cat(
      {torch::linspace(-14.0, 14.0, 20001), torch::zeros({1}), torch::randn({4000}) * 3});
}

at::Tensor garden_gradient(const at::Tensor& x, const at::Tensor& grad) {
  at::Tensor leaf = x.clone().requires_grad_();
  const at::Tensor y = kernels::gelu(leaf);
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
  EXPECT_TRUE(torch::equal(kernels::gelu(xd), at::gelu(xd)));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(kernels::gelu(x), at::gelu(x)));
}

// bfloat16 with gradients (CPU autocast) is widened for the float32 path:
// LibTorch's float32 forward and Garden's backward on the same numbers, each
// rounded once to bfloat16.
TEST(GeluTest, Bfloat16IsTheFloatPathRoundedOnce) {
  torch::manual_seed(4);
  const at::Tensor values = (torch::randn({3000}) * 3).to(torch::kBFloat16);
  const at::Tensor grad = torch::randn({3000}).to(torch::kBFloat16);
  at::Tensor half = values.clone().requires_grad_();
  const at::Tensor y = kernels::gelu(half);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y, at::gelu(values.to(torch::kFloat)).to(torch::kBFloat16)));
  y.backward(grad);
  const at::Tensor want = garden_gradient(values.to(torch::kFloat), grad.to(torch::kFloat));
  EXPECT_TRUE(torch::equal(half.grad(), want.to(torch::kBFloat16)));
}


// bias_gelu: gelu(x + bias) in one pass, the bias gradient summed in the
// backward's pass. Against the definition in double with libm's erf, on the
// exact x + b: the forward within 3e-7 of max(1, |x + b|) (Phi to 7.5e-8,
// and x + b and the result each rounded to float), the x gradient as
// gelu's, the bias gradient its column sums.
TEST(BiasGeluTest, ForwardAndGradientsMatchTheDefinitionInDouble) {
  torch::manual_seed(5);
  for (const int64_t width : {33, 64, 1000}) {
    const at::Tensor x = torch::cat({torch::randn({70, width}) * 3,
                                     torch::linspace(-14.0, 14.0, 10 * width).view({10, width})});
    const at::Tensor bias = torch::randn({width});
    const at::Tensor grad = torch::randn(x.sizes());
    at::Tensor leaf = x.clone().requires_grad_();
    at::Tensor bias_leaf = bias.clone().requires_grad_();
    const at::Tensor y = bias_gelu(leaf, bias_leaf);
    y.backward(grad);

    const at::Tensor p = x.to(torch::kDouble) + bias.to(torch::kDouble);
    const at::Tensor cdf = 0.5 * (1.0 + torch::erf(p / std::sqrt(2.0)));
    const at::Tensor want_y = p * cdf;
    const at::Tensor want_dx =
        grad.to(torch::kDouble) * (cdf + p * torch::exp(-0.5 * p * p) / std::sqrt(2.0 * M_PI));
    const at::Tensor scale = p.abs().clamp_min(1.0);
    EXPECT_LT(((y.to(torch::kDouble) - want_y).abs() / scale).max().item<double>(), 3e-7) << width;
    EXPECT_LT(((leaf.grad().to(torch::kDouble) - want_dx).abs() /
               grad.to(torch::kDouble).abs().clamp_min(1.0))
                  .max()
                  .item<double>(),
              1e-6)
        << width;
    // The bias gradient: the x gradient's column sums.
    const at::Tensor want_db = leaf.grad().to(torch::kDouble).sum(0);
    EXPECT_LT((bias_leaf.grad().to(torch::kDouble) - want_db).abs().max().item<double>(), 1e-5)
        << width;
  }
}

// Central finite differences of the definition in double, through three
// dimensions (the feed-forward layer's [B, T, C]).
TEST(BiasGeluTest, GradientsMatchFiniteDifferences) {
  torch::manual_seed(6);
  const at::Tensor x = torch::randn({3, 7, 33}) * 2;
  const at::Tensor bias = torch::randn({33});
  at::Tensor leaf = x.clone().requires_grad_();
  at::Tensor bias_leaf = bias.clone().requires_grad_();
  bias_gelu(leaf, bias_leaf).sum().backward();
  const at::Tensor pd = x.to(torch::kDouble) + bias.to(torch::kDouble);
  const double h = 1e-4;
  const at::Tensor numeric = (at::gelu(pd + h) - at::gelu(pd - h)) / (2 * h);
  EXPECT_LT((leaf.grad().to(torch::kDouble) - numeric).abs().max().item<double>(), 1e-5);
  EXPECT_LT((bias_leaf.grad().to(torch::kDouble) - numeric.sum(at::IntArrayRef{0, 1})).abs().max().item<double>(),
            1e-4);
}

// The bias gradient is summed in blocks of rows added in order: the same
// bits with one thread and two. Without gradients the forward is the same
// pass; a double input, a mismatched or missing bias take gelu(x + bias).
TEST(BiasGeluTest, SameBitsAnyThreadsAndOtherPathsAreTheDefinition) {
  torch::manual_seed(7);
  const at::Tensor x = torch::randn({300, 96});
  const at::Tensor bias = torch::randn({96});
  const at::Tensor grad = torch::randn(x.sizes());
  const int threads = at::get_num_threads();
  std::vector<at::Tensor> results;
  for (const int n : {1, 2}) {
    at::set_num_threads(n);
    at::Tensor leaf = x.clone().requires_grad_();
    at::Tensor bias_leaf = bias.clone().requires_grad_();
    const at::Tensor y = bias_gelu(leaf, bias_leaf);
    y.backward(grad);
    results.insert(results.end(), {y.detach(), leaf.grad(), bias_leaf.grad()});
  }
  at::set_num_threads(threads);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(results[i].equal(results[i + 3])) << i;
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(bias_gelu(x, bias).equal(results[0]));
  }
  const at::Tensor xd = x.to(torch::kDouble);
  const at::Tensor bd = bias.to(torch::kDouble);
  EXPECT_TRUE(bias_gelu(xd, bd).equal(at::gelu(xd + bd)));
  EXPECT_FALSE(bias_gelu_applies(x, torch::randn({95})));
  EXPECT_TRUE(bias_gelu(x, at::Tensor()).equal(at::gelu(x)));
}

}  // namespace
}  // namespace garden::kernels
