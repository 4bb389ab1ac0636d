// kernels::batch_norm_act: batch normalization in training with the residual
// and the ReLU fused (garden/kernels/batch_norm.h), against the definition
// computed in double with plain tensor operations.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "garden/kernels/batch_norm.h"

namespace garden::kernels {
// Named, not anonymous: the tests of a folder build in batches.
namespace batch_norm_test {

constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast;

double relative_error(const at::Tensor& got, const at::Tensor& expected) {
  const at::Tensor e = expected.to(torch::kDouble);
  return (got.to(torch::kDouble) - e).abs().max().item<double>() /
         std::max(e.abs().max().item<double>(), 1e-30);
}

struct Result {
  at::Tensor y, dx, dw, db, dr, running_mean, running_var;
};

// y = [relu](batch_norm(x) [+ r]) and the gradients of sum(y * probe).
template <typename Norm>
Result run(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& r,
           const at::Tensor& probe, bool relu, Norm norm, at::ScalarType dtype) {
  at::Tensor lx = x.detach().to(dtype).contiguous(kChannelsLast).requires_grad_();
  at::Tensor lw = w.detach().to(dtype).requires_grad_();
  at::Tensor lb = b.detach().to(dtype).requires_grad_();
  at::Tensor lr;
  if (r.defined()) lr = r.detach().to(dtype).contiguous(kChannelsLast).requires_grad_();
  at::Tensor rm = torch::full({x.size(1)}, 0.5, dtype), rv = torch::full({x.size(1)}, 2.0, dtype);
  at::Tensor y = norm(lx, lw, lb, lr, rm, rv, relu);
  (y * probe.to(dtype)).sum().backward();
  return {y.detach(), lx.grad(), lw.grad(), lb.grad(), lr.defined() ? lr.grad() : at::Tensor(),
          rm,         rv};
}

constexpr double kMomentum = 0.1, kEps = 1e-3;

Result garden_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                   const at::Tensor& r, const at::Tensor& probe, bool relu) {
  return run(
      x, w, b, r, probe, relu,
      [](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb, const at::Tensor& rr,
         at::Tensor& rm, at::Tensor& rv,
         bool act) { return batch_norm_act(xx, ww, bb, rm, rv, kMomentum, kEps, rr, act); },
      at::kFloat);
}

// The definition, in double: the batch's mean and biased variance per
// channel; the running statistics move by the momentum towards the mean and
// the unbiased variance.
Result reference_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& r, const at::Tensor& probe, bool relu) {
  return run(
      x, w, b, r, probe, relu,
      [](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb, const at::Tensor& rr,
         at::Tensor& rm, at::Tensor& rv, bool act) {
        const at::Tensor mean = xx.mean({0, 2, 3}, /*keepdim=*/true);
        const at::Tensor var = (xx - mean).pow(2).mean({0, 2, 3}, /*keepdim=*/true);
        at::Tensor y =
            (xx - mean) / (var + kEps).sqrt() * ww.view({1, -1, 1, 1}) + bb.view({1, -1, 1, 1});
        if (rr.defined()) y = y + rr;
        const double n = static_cast<double>(xx.numel() / xx.size(1));
        {
          torch::NoGradGuard no_grad;
          rm.mul_(1 - kMomentum).add_(mean.view(-1) * kMomentum);
          rv.mul_(1 - kMomentum).add_(var.view(-1) * (n / (n - 1)) * kMomentum);
        }
        return act ? at::relu(y) : y;
      },
      at::kDouble);
}

TEST(BatchNormTest, MatchesItsDefinitionForwardAndBackward) {
  torch::manual_seed(1);
  for (const bool with_residual : {false, true})
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(std::string(with_residual ? "residual" : "no residual") +
                   (relu ? ", relu" : ", no relu"));
      // Channels neither a multiple of 16 nor of 8; a mean far from 0 in
      // some channels.
      const at::Tensor x =
          torch::randn({5, 19, 7, 6}) * 3 + torch::linspace(-50, 50, 19).view({1, -1, 1, 1});
      const at::Tensor w = torch::randn({19}), b = torch::randn({19});
      const at::Tensor r = with_residual ? torch::randn({5, 19, 7, 6}) : at::Tensor();
      const at::Tensor probe = torch::randn({5, 19, 7, 6});
      const Result got = garden_norm(x, w, b, r, probe, relu);
      const Result want = reference_norm(x, w, b, r, probe, relu);
      EXPECT_TRUE(got.y.is_contiguous(kChannelsLast));
      EXPECT_LT(relative_error(got.y, want.y), 1e-6);
      EXPECT_LT(relative_error(got.dx, want.dx), 1e-5);
      EXPECT_LT(relative_error(got.dw, want.dw), 1e-6);
      EXPECT_LT(relative_error(got.db, want.db), 1e-6);
      if (with_residual) {
        EXPECT_LT(relative_error(got.dr, want.dr), 1e-6);
      }
      EXPECT_LT(relative_error(got.running_mean, want.running_mean), 1e-6);
      EXPECT_LT(relative_error(got.running_var, want.running_var), 1e-6);
      if (relu) {
        EXPECT_EQ(got.y.min().item<float>(), 0.0f);
      }
    }
}

TEST(BatchNormTest, RunsAgreeBitwiseWhateverTheThreadCount) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({8, 32, 9, 9});
  const at::Tensor w = torch::randn({32}), b = torch::randn({32});
  const at::Tensor r = torch::randn({8, 32, 9, 9}), probe = torch::randn({8, 32, 9, 9});
  const int threads = at::get_num_threads();
  const Result first = garden_norm(x, w, b, r, probe, true);
  at::set_num_threads(1);
  const Result one = garden_norm(x, w, b, r, probe, true);
  at::set_num_threads(threads);
  for (const Result& again : {garden_norm(x, w, b, r, probe, true), one}) {
    EXPECT_TRUE(torch::equal(first.y, again.y));
    EXPECT_TRUE(torch::equal(first.dx, again.dx));
    EXPECT_TRUE(torch::equal(first.dw, again.dw));
    EXPECT_TRUE(torch::equal(first.dr, again.dr));
    EXPECT_TRUE(torch::equal(first.running_var, again.running_var));
  }
}

TEST(BatchNormTest, OnlyWhatNeedsAGradientGetsOne) {
  torch::manual_seed(3);
  at::Tensor x = torch::randn({4, 8, 3, 3}).contiguous(kChannelsLast).requires_grad_();
  const at::Tensor w = torch::ones({8}), b = torch::zeros({8});
  at::Tensor rm = torch::zeros({8}), rv = torch::ones({8});
  batch_norm_act(x, w, b, rm, rv, kMomentum, kEps, {}, true).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  // Without gradients: the forward pass alone, and the running statistics
  // still move.
  torch::NoGradGuard no_grad;
  const at::Tensor before = rm.clone();
  batch_norm_act(x.detach(), w, b, rm, rv, kMomentum, kEps, {}, false);
  EXPECT_FALSE(torch::equal(rm, before));
}

TEST(BatchNormTest, RefusesWhatItDoesNotRun) {
  const at::Tensor x = torch::randn({2, 4, 3, 3}).contiguous(kChannelsLast);
  const at::Tensor v = torch::ones({4});
  EXPECT_TRUE(batch_norm_act_applies(x, v, v, v, v, {}));
  EXPECT_FALSE(batch_norm_act_applies(x.contiguous(), v, v, v, v, {}));  // NCHW
  EXPECT_FALSE(batch_norm_act_applies(x.to(torch::kDouble), v, v, v, v, {}));
  EXPECT_FALSE(batch_norm_act_applies(x, torch::ones({3}), v, v, v, {}));  // channels
  EXPECT_FALSE(batch_norm_act_applies(x, v, v, v, v, torch::randn({2, 4, 3, 2})));
  EXPECT_FALSE(batch_norm_act_applies(x, v, v, v, v, x.contiguous()));  // residual NCHW
  EXPECT_FALSE(batch_norm_act_applies(x.narrow(0, 0, 1).narrow(2, 0, 1).narrow(3, 0, 1), v, v, v, v,
                                      {}));  // one value per channel
  try {
    at::Tensor rm = v.clone(), rv = v.clone();
    batch_norm_act(x.contiguous(), v, v, rm, rv, kMomentum, kEps, {}, true);
    FAIL() << "an NCHW batch was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("channels-last"), std::string::npos) << e.what();
  }
}

}  // namespace batch_norm_test
}  // namespace garden::kernels
