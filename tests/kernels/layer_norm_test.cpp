// kernels::layer_norm (garden/kernels/layer_norm.h): Garden's layer normalization
// against at::layer_norm computed in double, its gradients by autograd of
// that definition and by finite differences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <vector>

#include "garden/kernels/layer_norm.h"
#include "garden/nlp/modeling/transformer.h"

namespace garden::kernels {
namespace {

using namespace garden::nlp;

double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Widths on and off the 16 lanes, row counts across the 64-row tasks,
// inputs with an offset and scale, weights and biases away from 1 and 0.
// (Rows of two nearly equal values are ill-conditioned in float: there
// LibTorch's own kernel is as far from the double result.)
TEST(LayerNormTest, FloatMatchesTheDefinitionAndItsGradientsInDouble) {
  torch::manual_seed(21);
  for (const int64_t width : {3, 7, 16, 33, 512}) {
    for (const int64_t rows : {1, 5, 130}) {
      const at::Tensor x = (torch::randn({rows, width}) * 3 + 2).requires_grad_();
      const at::Tensor w = (torch::randn({width}) + 1).requires_grad_();
      const at::Tensor b = torch::randn({width}).requires_grad_();
      const at::Tensor upstream = torch::randn({rows, width});
      const at::Tensor y = layer_norm(x, w, b, 1e-6);
      y.backward(upstream);

      std::vector<at::Tensor> ref;
      for (const at::Tensor& t : {x, w, b})
        ref.push_back(t.detach().to(at::kDouble).requires_grad_());
      const at::Tensor want = at::layer_norm(ref[0], {width}, ref[1], ref[2], 1e-6);
      want.backward(upstream.to(at::kDouble));
      const double scale = 1.0 + want.abs().max().item<double>();
      EXPECT_LE(max_difference(y, want), 1e-5 * scale) << width << " x " << rows;
      EXPECT_LE(max_difference(x.grad(), ref[0].grad()),
                1e-5 * (1.0 + ref[0].grad().abs().max().item<double>()))
          << width << " x " << rows;
      EXPECT_LE(max_difference(w.grad(), ref[1].grad()),
                1e-5 * (1.0 + ref[1].grad().abs().max().item<double>()))
          << width << " x " << rows;
      EXPECT_LE(max_difference(b.grad(), ref[2].grad()),
                1e-5 * (1.0 + ref[2].grad().abs().max().item<double>()))
          << width << " x " << rows;
    }
  }
}

// Width 1: every row has zero variance, the output is the bias and the
// input's gradient is zero (LibTorch's float kernel leaves rounding noise
// there, amplified by 1 / sqrt(eps)).
TEST(LayerNormTest, AWidthOfOneGivesTheBiasAndNoInputGradient) {
  const at::Tensor x = (torch::randn({9, 1}) * 5).requires_grad_();
  const at::Tensor w = torch::full({1}, 1.5).requires_grad_();
  const at::Tensor b = torch::full({1}, -0.25).requires_grad_();
  const at::Tensor y = layer_norm(x, w, b, 1e-6);
  EXPECT_TRUE(torch::all(y == -0.25f).item<bool>());
  y.backward(torch::randn({9, 1}));
  EXPECT_EQ(x.grad().abs().max().item<float>(), 0.0f);
}

// Central differences in double of sum(upstream * layer_norm(x, w, b)) with
// respect to every input, weight and bias element.
TEST(LayerNormTest, DoubleGradientsMatchFiniteDifferences) {
  torch::manual_seed(22);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor x0 = torch::randn({3, 2, 19}, options);
  const at::Tensor w0 = torch::randn({19}, options) + 1;
  const at::Tensor b0 = torch::randn({19}, options);
  const at::Tensor upstream = torch::randn({3, 2, 19}, options);
  std::vector<at::Tensor> inputs = {x0.clone().requires_grad_(), w0.clone().requires_grad_(),
                                    b0.clone().requires_grad_()};
  layer_norm(inputs[0], inputs[1], inputs[2], 1e-5).backward(upstream);
  const auto objective = [&](const std::vector<at::Tensor>& v) {
    return (upstream * layer_norm(v[0], v[1], v[2], 1e-5)).sum().item<double>();
  };
  const double h = 1e-6;
  for (size_t which = 0; which < 3; ++which) {
    const at::Tensor base = inputs[which].detach();
    for (int64_t i = 0; i < base.numel(); ++i) {
      std::vector<at::Tensor> plus = {x0, w0, b0}, minus = {x0, w0, b0};
      plus[which] = base.clone();
      minus[which] = base.clone();
      plus[which].view({-1})[i] += h;
      minus[which].view({-1})[i] -= h;
      const double numeric = (objective(plus) - objective(minus)) / (2 * h);
      EXPECT_NEAR(inputs[which].grad().view({-1})[i].item<double>(), numeric, 1e-7)
          << "input " << which << " element " << i;
    }
  }
}

// The weight and bias gradients are sums over rows taken in the same order
// whatever the thread count: bitwise equal with one thread and two.
TEST(LayerNormTest, GradientsDoNotDependOnTheThreadCount) {
  torch::manual_seed(23);
  const at::Tensor x0 = torch::randn({300, 40});
  const at::Tensor upstream = torch::randn({300, 40});
  std::vector<at::Tensor> grads;
  const int threads = at::get_num_threads();
  for (const int n : {1, 2}) {
    at::set_num_threads(n);
    const at::Tensor x = x0.clone().requires_grad_();
    const at::Tensor w = torch::ones({40}).requires_grad_();
    const at::Tensor b = torch::zeros({40}).requires_grad_();
    layer_norm(x, w, b, 1e-6).backward(upstream);
    grads.insert(grads.end(), {x.grad(), w.grad(), b.grad()});
  }
  at::set_num_threads(threads);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(grads[i], grads[i + 3])) << i;
}

// A non-contiguous input; a module without affine parameters or over two
// dimensions goes through the module's own forward.
TEST(LayerNormTest, ViewsAndOtherModulesGiveLibTorchsResult) {
  torch::manual_seed(24);
  const at::Tensor x = torch::randn({12, 8}).t();
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({12}).eps(1e-5));
  torch::NoGradGuard no_grad;
  norm->weight.uniform_(0.5, 1.5);
  norm->bias.uniform_(-1, 1);
  EXPECT_LE(max_difference(nlp::layer_norm(x, norm), norm->forward(x)), 1e-5);
  torch::nn::LayerNorm plain(torch::nn::LayerNormOptions({12}).elementwise_affine(false));
  EXPECT_TRUE(torch::equal(nlp::layer_norm(x, plain), plain->forward(x)));
  torch::nn::LayerNorm two_dims(torch::nn::LayerNormOptions({8, 12}));
  EXPECT_TRUE(torch::equal(nlp::layer_norm(x, two_dims), two_dims->forward(x)));
}

// Without a gradient to take (no-grad mode, or nothing requiring one) the
// rows go through the same kernel with no autograd node: the same bits as
// the forward that keeps its statistics, in float and double, for a
// transposed view too; and no gradient function on the result.
TEST(LayerNormTest, WithoutAGradientTheSameBitsAndNoNode) {
  torch::manual_seed(26);
  for (const auto type : {at::kFloat, at::kDouble}) {
    for (const bool transposed : {false, true}) {
      const at::Tensor base = torch::randn({130, 48}, type) * 3 + 2;
      const at::Tensor x = transposed ? base.t() : base;
      const int64_t width = x.size(-1);
      const at::Tensor w = (torch::randn({width}, type) + 1).requires_grad_();
      const at::Tensor b = torch::randn({width}, type).requires_grad_();
      const at::Tensor kept = layer_norm(x.detach().requires_grad_(), w, b, 1e-6);
      ASSERT_TRUE(kept.requires_grad());
      at::Tensor plain;
      {
        torch::NoGradGuard no_grad;
        plain = layer_norm(x, w, b, 1e-6);
      }
      EXPECT_FALSE(plain.requires_grad());
      EXPECT_TRUE(plain.equal(kept.detach())) << type << " " << transposed;
      const at::Tensor no_parameters = layer_norm(x, w.detach(), b.detach(), 1e-6);
      EXPECT_FALSE(no_parameters.requires_grad());
      EXPECT_TRUE(no_parameters.equal(kept.detach())) << type << " " << transposed;
    }
  }
}

// A bfloat16 input with float32 parameters (what a product returns under CPU
// autocast, and what LibTorch 1.13's layer norm refuses) is normalized in
// float32: the float result of the same numbers, and a bfloat16 gradient
// equal to the float one rounded.
TEST(LayerNormTest, Bfloat16InputWithFloatParametersIsNormalizedInFloat) {
  torch::manual_seed(25);
  const at::Tensor values = (torch::randn({9, 40}) * 2 + 1).to(at::kBFloat16);
  const at::Tensor w = torch::rand({40}) + 0.5, b = torch::randn({40});
  const at::Tensor upstream = torch::randn({9, 40});
  at::Tensor half = values.clone().requires_grad_();
  at::Tensor full = values.to(at::kFloat).requires_grad_();
  const at::Tensor got = layer_norm(half, w, b, 1e-6);
  const at::Tensor want = layer_norm(full, w, b, 1e-6);
  ASSERT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(got, want));
  got.backward(upstream);
  want.backward(upstream);
  ASSERT_EQ(half.grad().scalar_type(), at::kBFloat16);
  EXPECT_TRUE(torch::equal(half.grad(), full.grad().to(at::kBFloat16)));
}

// layer_norm_and_skip: the tensor used twice gets, from its one node, the
// gradients autograd gives layer_norm with the second use read from x (or
// y) itself, bit for bit: the sum of the two gradients is one float
// addition either way. With one handle used, the other's gradient is taken
// as absent; in float and double, across the 64-row tasks.
TEST(LayerNormTest, AndSkipGivesTheGradientsOfTheTwoUsesBitForBit) {
  torch::manual_seed(27);
  for (const auto type : {at::kFloat, at::kDouble}) {
    for (const auto skip : {LayerNormSkip::kInput, LayerNormSkip::kOutput}) {
      // Which handles the loss reads: both, only the normalized one, only skip.
      for (const int used : {3, 1, 2}) {
        const at::Tensor x0 = torch::randn({130, 48}, type) * 3 + 2;
        const at::Tensor w0 = torch::randn({48}, type) + 1, b0 = torch::randn({48}, type);
        const at::Tensor up_y = torch::randn({130, 48}, type),
                         up_skip = torch::randn({130, 48}, type);
        std::vector<at::Tensor> got, want;
        for (const bool fused : {true, false}) {
          const at::Tensor x = x0.clone().requires_grad_();
          const at::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
          at::Tensor y, second;
          if (fused) {
            auto out = layer_norm_and_skip(x, w, b, 1e-6, skip);
            y = out[0];
            second = out[1];
            if (skip == LayerNormSkip::kInput) {
              EXPECT_TRUE(second.equal(x));
            } else {
              EXPECT_TRUE(second.equal(y));
            }
          } else {
            y = layer_norm(x, w, b, 1e-6);
            second = skip == LayerNormSkip::kInput ? x : y;
          }
          // (x * 0 keeps x in the loss whichever handles are read.)
          at::Tensor loss = (x * 0).sum();
          if (used & 1) loss = loss + (y * up_y).sum();
          if (used & 2) loss = loss + (second * up_skip).sum();
          loss.backward();
          auto& into = fused ? got : want;
          into.push_back(x.grad());
          into.push_back(w.grad());
          into.push_back(b.grad());
        }
        for (int i = 0; i < 3; ++i) {
          // Where the loss does not read the norm, no parameter gradient either way.
          ASSERT_EQ(got[i].defined(), want[i].defined()) << "gradient " << i << " used " << used;
          if (!want[i].defined()) continue;
          EXPECT_TRUE(torch::equal(got[i], want[i]))
              << type << " skip " << static_cast<int>(skip) << " used " << used << " gradient " << i
              << ": max difference " << max_difference(got[i], want[i]);
        }
      }
    }
  }
}

// The second handle is read-only (LibTorch refuses an in-place change of a
// view a custom function returned, which would bypass its backward); without
// a gradient to take it is x or y itself.
TEST(LayerNormTest, AndSkipRefusesAnInPlaceChangeOfTheHandle) {
  const at::Tensor x = torch::randn({4, 8}).requires_grad_();
  const at::Tensor w = torch::ones({8}).requires_grad_(), b = torch::zeros({8}).requires_grad_();
  auto out = layer_norm_and_skip(x, w, b, 1e-6, LayerNormSkip::kOutput);
  EXPECT_THROW(out[1].mul_(2), c10::Error);
  torch::NoGradGuard no_grad;
  auto plain = layer_norm_and_skip(x, w, b, 1e-6, LayerNormSkip::kOutput);
  EXPECT_TRUE(plain[1].is_same(plain[0]));
  auto input = layer_norm_and_skip(x, w, b, 1e-6, LayerNormSkip::kInput);
  EXPECT_TRUE(input[1].is_same(x));
}

}  // namespace
}  // namespace garden::kernels
