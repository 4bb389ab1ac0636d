// kernels::linear: x W^T + b with Garden's GEMM, forward and backward
// (garden/kernels/linear.h).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "garden/base/cpu_isa.h"
#include "garden/core/precision.h"
#include "garden/kernels/embedding.h"
#include "garden/kernels/gemm.h"
#include "garden/kernels/linear.h"

namespace garden::kernels {
namespace {

struct Result {
  at::Tensor y, dx, dw, db;
};

Result run(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& grad,
           bool library) {
  at::Tensor xl = x.detach().clone().requires_grad_();
  at::Tensor wl = w.detach().clone().requires_grad_();
  at::Tensor bl = b.defined() ? b.detach().clone().requires_grad_() : at::Tensor();
  const at::Tensor y = library ? at::linear(xl, wl, bl) : kernels::linear(xl, wl, bl);
  y.backward(grad);
  return {y.detach(), xl.grad(), wl.grad(), bl.defined() ? bl.grad() : at::Tensor()};
}

double max_abs_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
}

// Forward and all three gradients against at::linear in double, with and
// without a bias, for [rows, K], [B, T, K], an input that is a transposed
// view (made contiguous inside), and rows enough for the bias to be laid
// into the output by several threads' chunks. Layers of 70, 65, 130, 260
// and 1,640 outputs from 130 inputs: with 1,000 rows, the 65- and
// 130-output layers' forward and the 260-output layer's weight gradient
// take the transposed products (linear.cpp), over transpositions whose 32-wide
// tiles do not divide 130; the 1,640-output layer's weight gradient is a
// wide TN product as it comes.
TEST(LinearTest, ForwardAndGradientsMatchTheDefinitionInDouble) {
  torch::manual_seed(11);
  for (const int64_t outputs : {70, 65, 130, 260, 1640}) {
    const at::Tensor w = torch::randn({outputs, 130});
    const at::Tensor b = torch::randn({outputs});
    for (const bool bias : {true, false}) {
      for (const auto& x : {torch::randn({37, 130}), torch::randn({3, 11, 130}),
                            torch::randn({130, 19}).t(), torch::randn({1000, 130})}) {
        const at::Tensor bb = bias ? b : at::Tensor();
        std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
        shape.back() = outputs;
        const at::Tensor grad = torch::randn(shape);
        EXPECT_TRUE(linear_applies(x, w, bb) == (gemm_library().rfind("oneDNN", 0) == 0));
        const Result got = run(x, w, bb, grad, false);
        const Result want =
            run(x.to(at::kDouble), w.to(at::kDouble), bias ? b.to(at::kDouble) : at::Tensor(),
                grad.to(at::kDouble), true);
        EXPECT_EQ(got.y.sizes(), want.y.sizes());
        EXPECT_EQ(got.dx.sizes(), x.sizes());
        EXPECT_LT(max_abs_error(got.y, want.y), 1e-4)
            << outputs << " outputs, bias " << bias << " " << x.sizes();
        EXPECT_LT(max_abs_error(got.dx, want.dx), 1e-4)
            << outputs << " outputs, bias " << bias << " " << x.sizes();
        EXPECT_LT(max_abs_error(got.dw, want.dw), 1e-3)
            << outputs << " outputs, bias " << bias << " " << x.sizes();
        if (bias) {
          EXPECT_LT(max_abs_error(got.db, want.db), 1e-4) << outputs << " outputs " << x.sizes();
        }
        // Without gradients, the same forward.
        torch::NoGradGuard no_grad;
        EXPECT_TRUE(kernels::linear(x, w, bb).equal(got.y));
      }
    }
  }
}

// Turned and as they come, the products are the same sums: a narrowing or
// square layer's output and a widening layer's weight and bias gradients
// agree to float32's rounding either way, and the transpositions are on unless
// switched off.
TEST(LinearTest, TurnedProductsAgreeWithTheProductsAsTheyCome) {
  EXPECT_TRUE(linear_transposes());
  torch::manual_seed(12);
  const at::Tensor x = torch::randn({600, 256});
  for (const int64_t outputs : {64, 256, 1024}) {
    const at::Tensor w = torch::randn({outputs, 256}) * 0.1;
    const at::Tensor b = torch::randn({outputs});
    const at::Tensor grad = torch::randn({600, outputs});
    set_linear_transposes(false);
    const Result plain = run(x, w, b, grad, false);
    set_linear_transposes(true);
    const Result transposed = run(x, w, b, grad, false);
    for (const auto& [got, want] :
         {std::pair{transposed.y, plain.y}, std::pair{transposed.dx, plain.dx},
          std::pair{transposed.dw, plain.dw}, std::pair{transposed.db, plain.db}})
      EXPECT_LE(max_abs_error(got, want), 2e-5 * want.abs().max().item<double>()) << outputs;
  }
}

// Only the gradients asked for are computed: a frozen input, a frozen
// weight; and an empty batch gives empty outputs and zero weight gradients.
TEST(LinearTest, GradientsOnlyWhereAskedAndEmptyBatches) {
  torch::manual_seed(12);
  const at::Tensor x = torch::randn({5, 16});
  at::Tensor w = torch::randn({8, 16}).requires_grad_();
  kernels::linear(x, w, at::Tensor()).sum().backward();
  EXPECT_LT(max_abs_error(w.grad(), at::ones({5, 8}).t().mm(x)), 1e-5);
  at::Tensor xl = x.clone().requires_grad_();
  const at::Tensor frozen = torch::randn({8, 16});
  kernels::linear(xl, frozen, at::Tensor()).sum().backward();
  EXPECT_LT(max_abs_error(xl.grad(), at::ones({5, 8}).mm(frozen)), 1e-5);

  at::Tensor empty = torch::randn({0, 16}).requires_grad_();
  at::Tensor w2 = torch::randn({8, 16}).requires_grad_();
  at::Tensor b2 = torch::randn({8}).requires_grad_();
  const at::Tensor y = kernels::linear(empty, w2, b2);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{0, 8}));
  y.sum().backward();
  EXPECT_TRUE(w2.grad().equal(at::zeros({8, 16})));
  EXPECT_TRUE(b2.grad().equal(at::zeros({8})));
}

// What Garden's GEMM does not take is at::linear, bit for bit: double,
// bfloat16, a transposed (non-contiguous) weight, and under CPU autocast.
TEST(LinearTest, OtherTensorsAreAtLinear) {
  torch::manual_seed(13);
  const at::Tensor x = torch::randn({6, 32});
  const at::Tensor w = torch::randn({24, 32});
  const at::Tensor b = torch::randn({24});
  const at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble), bd = b.to(at::kDouble);
  EXPECT_FALSE(linear_applies(xd, wd, bd));
  EXPECT_TRUE(kernels::linear(xd, wd, bd).equal(at::linear(xd, wd, bd)));
  const at::Tensor xh = x.to(at::kBFloat16), wh = w.to(at::kBFloat16);
  EXPECT_FALSE(linear_applies(xh, wh, at::Tensor()));
  EXPECT_TRUE(kernels::linear(xh, wh, at::Tensor()).equal(at::linear(xh, wh, at::Tensor())));
  const at::Tensor wt = torch::randn({32, 24}).t();
  EXPECT_FALSE(linear_applies(x, wt, b));
  EXPECT_TRUE(kernels::linear(x, wt, b).equal(at::linear(x, wt, b)));
  EXPECT_FALSE(linear_applies(x, w, torch::randn({23})));
  {
    const AutocastGuard autocast(std::string("bfloat16"), c10::Device("cpu"));
    EXPECT_FALSE(linear_applies(x, w, b));
    const at::Tensor y = kernels::linear(x, w, b);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(y.equal(at::linear(x, w, b)));
  }
}

// x W^T (+ b) as the held product computes it, element by element: the
// multiply-adds in order over K, each rounded once (std::fma), then the bias.
at::Tensor sums_in_order(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  at::Tensor out = at::empty({m, n});
  const float* xs = x.data_ptr<float>();
  const float* ws = w.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t l = 0; l < k; ++l) acc = std::fma(xs[i * k + l], ws[j * k + l], acc);
      o[i * n + j] = b.defined() ? acc + b.data_ptr<float>()[j] : acc;
    }
  return out;
}

at::Tensor held_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  torch::NoGradGuard no_grad;
  const FrozenWeights frozen;
  at::Tensor y = kernels::linear(x, w, b);
  EXPECT_EQ(held_weight_count(), 1);  // the held product ran
  return y;
}

// Under FrozenWeights, a product of up to 256 rows without gradients: on
// widths with a partial block of columns (70, 3,000), a K not a multiple of
// the vectors (130) and a long one (512), 1 to 256 rows, with and without a
// bias, it equals the definition in double; where the CPU has FMA, each
// element is bit for bit the multiply-adds in order then the bias; and one
// and two threads give the same bits.
TEST(LinearTest, HeldWeightsGiveTheSumsInOrderThenTheBias) {
  torch::manual_seed(15);
  const int threads = at::get_num_threads();
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{70, 130}, {128, 512}, {3000, 130}}) {
    const at::Tensor w = torch::randn({n, k}) * 0.1;
    const at::Tensor b = torch::randn({n});
    for (const int64_t m : {1, 5, 37, 256}) {
      if (n == 3000 && m == 256) continue;  // the reference's loops: seconds
      const at::Tensor x = torch::randn({m, k});
      for (const bool bias : {true, false}) {
        const at::Tensor bb = bias ? b : at::Tensor();
        at::set_num_threads(1);
        const at::Tensor one = held_linear(x, w, bb);
        at::set_num_threads(2);
        const at::Tensor two = held_linear(x, w, bb);
        at::set_num_threads(threads);
        EXPECT_TRUE(one.equal(two)) << m << " x " << k << " x " << n;
        const at::Tensor want = at::linear(x.to(at::kDouble), w.to(at::kDouble),
                                           bias ? b.to(at::kDouble) : at::Tensor());
        EXPECT_LT(max_abs_error(one, want), 1e-4) << m << " x " << k << " x " << n;
        if (cpu_isa().avx2_fma) {
          EXPECT_TRUE(one.equal(sums_in_order(x, w, bb))) << m << " x " << k << " x " << n;
        }
      }
    }
  }
}

// The held copies follow their weights: a weight changed in place (its
// version counter) or given new storage is laid out again; a view made for
// one call leaves by the next copy made; more than 256 rows, an inference
// tensor's weight (no version counter) and products with gradients are
// oneDNN's; a KeepHeldWeights keeps the copies past their scope but leaves
// its thread's products as they were; the last scope or keeper to end
// drops them all.
TEST(LinearTest, HeldWeightsFollowTheirWeightsAndLeaveWithTheLastScope) {
  torch::manual_seed(16);
  const at::Tensor x = torch::randn({8, 64});
  at::Tensor w = torch::randn({96, 64});
  const auto near_definition = [&](const at::Tensor& got, const at::Tensor& weight) {
    return max_abs_error(got, at::linear(x.to(at::kDouble), weight.to(at::kDouble), {})) < 1e-4;
  };
  torch::NoGradGuard no_grad;
  const at::Tensor many = torch::randn({257, 64});
  const at::Tensor w2 = torch::randn({96, 64});
  at::Tensor inference_weight;
  {
    const c10::InferenceMode inference;
    inference_weight = torch::randn({96, 64});
  }
  EXPECT_EQ(held_weight_count(), 0);
  const at::Tensor many_outside = kernels::linear(many, w2, {});
  const at::Tensor inference_outside = kernels::linear(x, inference_weight, {});
  EXPECT_EQ(held_weight_count(), 0);
  {
    const FrozenWeights frozen;
    EXPECT_TRUE(near_definition(kernels::linear(x, w, {}), w));
    EXPECT_EQ(held_weight_count(), 1);
    kernels::linear(x, w, {});
    EXPECT_EQ(held_weight_count(), 1);
    w.mul_(-2.0);
    EXPECT_TRUE(near_definition(kernels::linear(x, w, {}), w));
    w.set_data(torch::randn({96, 64}));
    EXPECT_TRUE(near_definition(kernels::linear(x, w, {}), w));
    EXPECT_EQ(held_weight_count(), 1);
    const at::Tensor wide = torch::randn({200, 64});
    for (int i = 0; i < 3; ++i) {
      const at::Tensor top = wide.narrow(0, 0, 96);  // a new view each time
      EXPECT_TRUE(near_definition(kernels::linear(x, top, {}), top));
    }
    EXPECT_LE(held_weight_count(), 2);
    const int64_t before = held_weight_count();
    EXPECT_TRUE(kernels::linear(many, w2, {}).equal(many_outside));
    EXPECT_EQ(held_weight_count(), before);
    { const FrozenWeights nested; }
    EXPECT_EQ(held_weight_count(), before);  // a nested scope's end keeps them
    // An inference tensor counts no versions: its products are not held.
    EXPECT_TRUE(kernels::linear(x, inference_weight, {}).equal(inference_outside));
    EXPECT_EQ(held_weight_count(), before);
    // With gradients, the differentiable product, not held.
    const int64_t held_before_gradients = held_weight_count();
    torch::AutoGradMode grad(true);
    at::Tensor wg = w.detach().clone().requires_grad_();
    const at::Tensor yg = kernels::linear(x, wg, {});
    EXPECT_EQ(held_weight_count(), held_before_gradients);
    EXPECT_TRUE(near_definition(yg.detach(), w));
    yg.sum().backward();
    EXPECT_LT(max_abs_error(wg.grad(), at::ones({8, 96}).t().mm(x)), 1e-4);
  }
  EXPECT_EQ(held_weight_count(), 0);

  {
    const KeepHeldWeights keep;
    const at::Tensor same = torch::randn({96, 64});
    const at::Tensor unheld = kernels::linear(x, same, {});
    EXPECT_EQ(held_weight_count(), 0);  // a keeper alone holds nothing
    {
      const FrozenWeights frozen;
      kernels::linear(x, same, {});
    }
    EXPECT_EQ(held_weight_count(), 1);  // kept past the scope
    EXPECT_TRUE(kernels::linear(x, same, {}).equal(unheld));
  }
  EXPECT_EQ(held_weight_count(), 0);
}

// A tied table: two lookups' sparse gradients added into the output
// projection's dense one give the gradient of at::embedding's dense form
// (in double), and .grad is dense. With lookups only, .grad is their sparse
// sum (the optimizer makes it dense: optimizer_test).
TEST(EmbeddingRowsTest, SparseGradientsAddIntoTheTiedProjectionsDenseOne) {
  torch::manual_seed(14);
  const at::Tensor table = torch::randn({50, 8});
  const at::Tensor ids = torch::tensor({3, 7, 3, 49, 0, 7}, at::kLong).view({2, 3});
  const at::Tensor ids2 = torch::tensor({{7, 7, 12, 3}}, at::kLong);
  const at::Tensor h = torch::randn({4, 8});
  const at::Tensor r1 = torch::randn({2, 3, 8}), r2 = torch::randn({1, 4, 8});
  const at::Tensor r3 = torch::randn({4, 50});
  const auto loss = [&](const at::Tensor& w, bool rows, bool projection) {
    const auto lookup = [&](const at::Tensor& i) {
      return rows ? embedding_rows(w, i) : at::embedding(w, i);
    };
    const auto typed = [&](const at::Tensor& t) { return t.to(w.scalar_type()); };
    at::Tensor l = (lookup(ids) * typed(r1)).sum() + (lookup(ids2) * typed(r2)).sum();
    if (projection) l = l + (kernels::linear(typed(h), w, {}) * typed(r3)).sum();
    return l;
  };
  at::Tensor w = table.clone().requires_grad_();
  loss(w, true, true).backward();
  at::Tensor want = table.to(at::kDouble).requires_grad_();
  loss(want, false, true).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().layout(), at::kStrided);
  EXPECT_LT(max_abs_error(w.grad(), want.grad()), 1e-5);

  at::Tensor bare = table.clone().requires_grad_();
  loss(bare, true, false).backward();
  ASSERT_TRUE(bare.grad().is_sparse());
  const at::Tensor rows_added = at::zeros({50, 8})
                                    .index_add_(0, ids.flatten(), r1.view({-1, 8}))
                                    .index_add_(0, ids2.flatten(), r2.view({-1, 8}));
  EXPECT_LT(max_abs_error(bare.grad().to_dense(), rows_added), 1e-6);
  // Without a gradient: at::embedding's rows, bit for bit.
  EXPECT_TRUE(embedding_rows(table, ids).equal(at::embedding(table, ids)));
}

}  // namespace
}  // namespace garden::kernels
