// kernels::linear: x W^T + b with Garden's GEMM, forward and backward
// (garden/kernels/linear.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

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
