// kernels::dropout and kernels::relu_dropout: the rate, the scale, the backward using
// the forward's mask, and reproducibility from LibTorch's seed.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "garden/kernels/bias_dropout_add.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/linear.h"
#include "garden/nlp/modeling/transformer.h"

namespace {

namespace kernels = garden::kernels;
namespace nlp = garden::nlp;

TEST(Dropout, ZeroesAboutPAndScalesTheRestByOneOverOneMinusP) {
  torch::manual_seed(1);
  const at::Tensor x = torch::rand({1000, 1000}) + 0.5;  // no zeros of its own
  for (double p : {0.1, 0.3, 0.5}) {
    const at::Tensor y = kernels::dropout(x, p, /*training=*/true);
    const double dropped = (y == 0).to(torch::kDouble).mean().item<double>();
    // 1e6 Bernoulli draws: the standard deviation of the rate is < 5e-4.
    EXPECT_NEAR(dropped, p, 3e-3) << "p " << p;
    const at::Tensor kept = y != 0;
    EXPECT_TRUE(torch::allclose(y.masked_select(kept), x.masked_select(kept) / (1 - p), 1e-6, 0))
        << "p " << p;
  }
  EXPECT_TRUE(torch::equal(kernels::dropout(x, 0.5, /*training=*/false), x));
  EXPECT_TRUE(torch::equal(kernels::dropout(x, 0.0, /*training=*/true), x));
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  torch::manual_seed(2);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    at::Tensor x = (torch::rand({64, 33}, dtype) + 0.5).requires_grad_();
    const at::Tensor y = kernels::dropout(x, 0.25, true);
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
  const at::Tensor a = kernels::dropout(x, 0.1, true);
  const at::Tensor a_next = kernels::dropout(x, 0.1, true);
  at::set_num_threads(2);
  torch::manual_seed(9);
  const at::Tensor b = kernels::dropout(x, 0.1, true);
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
        const at::Tensor y = relu ? kernels::relu_dropout(x, p, true) : kernels::dropout(x, p, true);
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
  const at::Tensor fused = kernels::relu_dropout(x, 0.2, true);
  torch::manual_seed(5);
  const at::Tensor separate = kernels::dropout(torch::relu(x), 0.2, true);
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
    const at::Tensor y = relu ? kernels::relu_dropout(half, 0.1, true) : kernels::dropout(half, 0.1, true);
    torch::manual_seed(12);
    const at::Tensor want =
        relu ? kernels::relu_dropout(full, 0.1, true) : kernels::dropout(full, 0.1, true);
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(y, want.to(torch::kBFloat16))) << "relu " << relu;
    const at::Tensor weights = torch::randn({70, 90});
    (y * weights.to(torch::kBFloat16)).sum().backward();
    (want * weights.to(torch::kBFloat16).to(torch::kFloat)).sum().backward();
    ASSERT_EQ(half.grad().scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(half.grad(), full.grad().to(torch::kBFloat16))) << "relu " << relu;
  }
}

// ---- kernels::bias_dropout_add: r + dropout(y + b) in one pass --------------------------

struct Sublayer {
  at::Tensor out, grad_y, grad_bias, grad_r;
};

// r + dropout(y + bias) with gradients for `grad`; fused by kernels::bias_dropout_add,
// or as the separate operations (kernels::dropout draws the same mask from the seed).
Sublayer sublayer(const at::Tensor& y, const at::Tensor& bias, const at::Tensor& r,
                  const at::Tensor& grad, double p, bool training, bool fused, uint64_t seed) {
  at::Tensor yl = y.clone().requires_grad_();
  at::Tensor rl = r.clone().requires_grad_();
  at::Tensor bl = bias.defined() ? bias.clone().requires_grad_() : at::Tensor();
  torch::manual_seed(seed);
  const at::Tensor out = fused ? kernels::bias_dropout_add(yl, bl, rl, p, training)
                               : rl + kernels::dropout(bl.defined() ? yl + bl : yl, p, training);
  out.backward(grad);
  return {out.detach(), yl.grad(), bl.defined() ? bl.grad() : at::Tensor(), rl.grad()};
}

// The forward is the separate operations to the bit, the mask included (odd
// widths put an element pair across two rows); y's and r's gradients too,
// the bias gradient their column sums to float rounding.
TEST(BiasDropoutAdd, IsTheSeparateOperationsToTheBit) {
  torch::manual_seed(11);
  for (const int64_t width : {1, 7, 33, 256}) {
    for (const double p : {0.0, 0.1, 0.5}) {
      for (const bool training : {true, false}) {
        const at::Tensor y = torch::randn({2, 37, width});
        const at::Tensor r = torch::randn({2, 37, width});
        const at::Tensor bias = torch::randn({width});
        const at::Tensor grad = torch::randn(y.sizes());
        const Sublayer want = sublayer(y, bias, r, grad, p, training, false, 3);
        const Sublayer got = sublayer(y, bias, r, grad, p, training, true, 3);
        const std::string where = "width " + std::to_string(width) + " p " + std::to_string(p) +
                                  (training ? " training" : " eval");
        EXPECT_TRUE(got.out.equal(want.out)) << where;
        EXPECT_TRUE(got.grad_y.equal(want.grad_y)) << where;
        EXPECT_TRUE(got.grad_r.equal(want.grad_r)) << where;
        EXPECT_TRUE(torch::allclose(got.grad_bias, want.grad_bias, 1e-5, 1e-5)) << where;
        // The column sums of y's gradient in double, rounded once to float.
        const at::Tensor sums = got.grad_y.to(torch::kDouble).sum(at::IntArrayRef{0, 1});
        EXPECT_LE(((got.grad_bias.to(torch::kDouble) - sums).abs() / sums.abs().clamp_min(1e-30))
                      .max()
                      .item<double>(),
                  std::ldexp(1.0, -24))
            << where;
        if (training && p > 0) {
          const double dropped = (got.out == r).to(torch::kDouble).mean().item<double>();
          EXPECT_NEAR(dropped, p, 0.12) << where;
        }
      }
    }
  }
}

// The gradient of the fused operation by central differences in double of
// the definition, with the mask the fused forward kept (the function is
// linear in y, b and r, so the differences are exact up to rounding).
TEST(BiasDropoutAdd, GradientsMatchFiniteDifferences) {
  torch::manual_seed(12);
  const double p = 0.3;
  const at::Tensor y = torch::randn({5, 9, 17});
  const at::Tensor r = torch::randn({5, 9, 17});
  const at::Tensor bias = torch::randn({17});
  const at::Tensor weights = torch::randn(y.sizes());  // loss = sum(weights * out)
  const Sublayer got = sublayer(y, bias, r, weights, p, true, true, 21);
  const at::Tensor keep = (got.grad_y != 0).to(torch::kDouble);  // weights are never 0
  const auto loss = [&](const at::Tensor& yd, const at::Tensor& bd, const at::Tensor& rd) {
    return ((rd + keep * (yd + bd) / (1 - p)) * weights.to(torch::kDouble)).sum().item<double>();
  };
  const at::Tensor yd = y.to(torch::kDouble), bd = bias.to(torch::kDouble),
                   rd = r.to(torch::kDouble);
  const double h = 1e-3;
  for (const int64_t i : {0, 100, 500, 764}) {
    at::Tensor e = torch::zeros(y.numel(), torch::kDouble);
    e[i] = h;
    e = e.view(y.sizes());
    const double dy = (loss(yd + e, bd, rd) - loss(yd - e, bd, rd)) / (2 * h);
    const double dr = (loss(yd, bd, rd + e) - loss(yd, bd, rd - e)) / (2 * h);
    EXPECT_NEAR(got.grad_y.view(-1)[i].item<double>(), dy, 1e-5) << i;
    EXPECT_NEAR(got.grad_r.view(-1)[i].item<double>(), dr, 1e-5) << i;
  }
  for (const int64_t c : {0, 8, 16}) {
    at::Tensor e = torch::zeros({17}, torch::kDouble);
    e[c] = h;
    const double db = (loss(yd, bd + e, rd) - loss(yd, bd - e, rd)) / (2 * h);
    EXPECT_NEAR(got.grad_bias[c].item<double>(), db, 1e-4) << c;
  }
}

// The bias gradient is summed in blocks of rows added in order: the same
// bits with one thread and two; no bias, a double input or a mismatched bias
// take the separate operations.
TEST(BiasDropoutAdd, SameBitsAnyThreadsAndOtherInputsAreTheDefinition) {
  torch::manual_seed(13);
  const at::Tensor y = torch::randn({300, 96});
  const at::Tensor r = torch::randn({300, 96});
  const at::Tensor bias = torch::randn({96});
  const at::Tensor grad = torch::randn(y.sizes());
  const int threads = at::get_num_threads();
  std::vector<Sublayer> runs;
  for (const int n : {1, 2}) {
    at::set_num_threads(n);
    runs.push_back(sublayer(y, bias, r, grad, 0.2, true, true, 5));
  }
  at::set_num_threads(threads);
  EXPECT_TRUE(runs[0].out.equal(runs[1].out));
  EXPECT_TRUE(runs[0].grad_y.equal(runs[1].grad_y));
  EXPECT_TRUE(runs[0].grad_bias.equal(runs[1].grad_bias));
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(5);
    EXPECT_TRUE(kernels::bias_dropout_add(y, bias, r, 0.2, true).equal(runs[0].out));
  }
  {
    // A frozen bias: y's gradient alone, the same.
    at::Tensor leaf = y.clone().requires_grad_();
    torch::manual_seed(5);
    kernels::bias_dropout_add(leaf, bias, r, 0.2, true).backward(grad);
    EXPECT_TRUE(leaf.grad().equal(runs[0].grad_y));
  }
  const Sublayer none = sublayer(y, at::Tensor(), r, grad, 0.2, true, true, 6);
  const Sublayer none_want = sublayer(y, at::Tensor(), r, grad, 0.2, true, false, 6);
  EXPECT_TRUE(none.out.equal(none_want.out));
  EXPECT_TRUE(none.grad_y.equal(none_want.grad_y));
  const at::Tensor yd = y.to(torch::kDouble), rd = r.to(torch::kDouble),
                   bd = bias.to(torch::kDouble);
  const Sublayer twice = sublayer(yd, bd, rd, grad.to(torch::kDouble), 0.2, true, true, 7);
  const Sublayer twice_want = sublayer(yd, bd, rd, grad.to(torch::kDouble), 0.2, true, false, 7);
  EXPECT_TRUE(twice.out.equal(twice_want.out));
  EXPECT_TRUE(twice.grad_bias.equal(twice_want.grad_bias));
  EXPECT_FALSE(kernels::bias_dropout_add_applies(y, torch::randn({95}), r));
  EXPECT_FALSE(kernels::bias_dropout_add_applies(y, bias, r.narrow(0, 0, 10)));
  EXPECT_THROW(kernels::bias_dropout_add(y, torch::randn({95}), r, 0.2, true), c10::Error);
}

// relu_dropout(y + b): y + b with the mask relu_dropout draws for it, to the
// bit (odd widths put an element pair across two rows), y's gradient too,
// the bias gradient its column sums in double rounded once; the same bits
// with one thread and two; outside training, at p 0 or without a bias, the
// separate operations.
TEST(BiasReluDropout, IsReluDropoutOfTheSumToTheBitWithTheBiasGradientSummed) {
  torch::manual_seed(14);
  const auto run = [](const at::Tensor& y, const at::Tensor& bias, const at::Tensor& grad, double p,
                      bool training, bool fused, uint64_t seed) {
    at::Tensor leaf = y.clone().requires_grad_();
    at::Tensor b = bias.defined() ? bias.clone().requires_grad_() : at::Tensor();
    torch::manual_seed(seed);
    const at::Tensor out = fused ? kernels::bias_relu_dropout(leaf, b, p, training)
                                 : kernels::relu_dropout(b.defined() ? leaf + b : leaf, p, training);
    out.backward(grad);
    return std::vector<at::Tensor>{out.detach(), leaf.grad(), b.defined() ? b.grad() : at::Tensor()};
  };
  for (const int64_t width : {1, 7, 33, 256}) {
    for (const double p : {0.0, 0.1, 0.5}) {
      for (const bool training : {true, false}) {
        const at::Tensor y = torch::randn({2, 37, width});
        const at::Tensor bias = torch::randn({width});
        const at::Tensor grad = torch::randn(y.sizes());
        const auto want = run(y, bias, grad, p, training, false, 3);
        const auto got = run(y, bias, grad, p, training, true, 3);
        const std::string where = "width " + std::to_string(width) + " p " + std::to_string(p) +
                                  (training ? " training" : " eval");
        EXPECT_TRUE(got[0].equal(want[0])) << where;
        EXPECT_TRUE(got[1].equal(want[1])) << where;
        if (!(training && p > 0)) {  // the separate operations
          EXPECT_TRUE(got[2].equal(want[2])) << where;
          continue;
        }
        const at::Tensor sums = got[1].to(torch::kDouble).sum(at::IntArrayRef{0, 1});
        EXPECT_LE(((got[2].to(torch::kDouble) - sums).abs() / sums.abs().clamp_min(1e-30))
                      .max()
                      .item<double>(),
                  std::ldexp(1.0, -24))
            << where;
        {
          // Dropped: the ReLU's zeros (about half) and p of the rest.
          const double zeros = (got[0] == 0).to(torch::kDouble).mean().item<double>();
          const double negative = ((y + bias) <= 0).to(torch::kDouble).mean().item<double>();
          EXPECT_NEAR(zeros, negative + (1 - negative) * p, 0.12) << where;
        }
      }
    }
  }
  const at::Tensor y = torch::randn({300, 96});
  const at::Tensor bias = torch::randn({96});
  const at::Tensor grad = torch::randn(y.sizes());
  const int threads = at::get_num_threads();
  std::vector<std::vector<at::Tensor>> runs;
  for (const int n : {1, 2}) {
    at::set_num_threads(n);
    runs.push_back(run(y, bias, grad, 0.2, true, true, 5));
  }
  at::set_num_threads(threads);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(runs[0][i].equal(runs[1][i])) << i;
  const auto none = run(y, at::Tensor(), grad, 0.2, true, true, 6);
  const auto none_want = run(y, at::Tensor(), grad, 0.2, true, false, 6);
  EXPECT_TRUE(none[0].equal(none_want[0]));
  EXPECT_TRUE(none[1].equal(none_want[1]));
}

// A ReLU feed-forward block in training takes the fused activation: its
// output and gradients are the unfused block's (relu_dropout of the product
// with its bias) to float rounding, for the same seed.
TEST(BiasReluDropout, TheFeedForwardBlockMatchesItsDefinition) {
  torch::manual_seed(15);
  nlp::TransformerBlockOptions o;
  o.hidden_size = 32;
  o.intermediate_size = 96;
  o.activation = "relu";
  o.intermediate_dropout = 0.25;
  nlp::FeedForward ffn(o);
  ffn->train();
  const at::Tensor x = torch::randn({3, 11, 32});
  const at::Tensor grad = torch::randn({3, 11, 32});
  torch::manual_seed(9);
  const at::Tensor got = ffn->forward(x);
  got.backward(grad);
  const at::Tensor got_w = ffn->intermediate->weight.grad().clone();
  const at::Tensor got_b = ffn->intermediate->bias.grad().clone();
  ffn->zero_grad();
  torch::manual_seed(9);
  const at::Tensor h = kernels::relu_dropout(
      at::linear(x, ffn->intermediate->weight, ffn->intermediate->bias), 0.25, true);
  const at::Tensor want = ffn->output->forward(h);
  want.backward(grad);
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(got_w, ffn->intermediate->weight.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(got_b, ffn->intermediate->bias.grad(), 1e-4, 1e-5));
}

}  // namespace
