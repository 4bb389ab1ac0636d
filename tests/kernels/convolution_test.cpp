// kernels::conv2d: oneDNN's Winograd algorithm for 3x3 stride-1 CPU layers,
// LibTorch's convolution for the rest (garden/kernels/convolution.h).
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "garden/base/torch_features.h"
#include "garden/kernels/convolution.h"

namespace garden::kernels {
// Named, not anonymous: the tests of a folder build in batches.
namespace convolution_test {

// Sets the process-wide algorithm for one test.
class AlgorithmScope {
 public:
  explicit AlgorithmScope(ConvolutionAlgorithm algorithm) : saved_(convolution_algorithm()) {
    set_convolution_algorithm(algorithm);
  }
  ~AlgorithmScope() { set_convolution_algorithm(saved_); }

 private:
  ConvolutionAlgorithm saved_;
};

#define SKIP_WITHOUT_WINOGRAD()               \
  if (!winograd_unavailable_reason().empty()) \
  GTEST_SKIP() << "no Winograd convolution here: " << winograd_unavailable_reason()

// The largest difference from `expected`, relative to expected's largest value.
double relative_error(const at::Tensor& got, const at::Tensor& expected) {
  const at::Tensor e = expected.to(torch::kDouble);
  return (got.to(torch::kDouble) - e).abs().max().item<double>() / e.abs().max().item<double>();
}

struct Gradients {
  at::Tensor y, dx, dw, db;
};

// y = conv(x, w) + b, and the gradients of sum(y * probe), through `conv`.
template <typename Conv>
Gradients run(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
              const at::Tensor& probe, Conv conv) {
  at::Tensor lx = x.detach().clone(x.suggest_memory_format()).requires_grad_();
  at::Tensor lw = w.detach().clone(w.suggest_memory_format()).requires_grad_();
  at::Tensor lb = b.detach().clone().requires_grad_();
  at::Tensor y = conv(lx, lw, lb);
  (y * probe.to(y.scalar_type())).sum().backward();
  return {y.detach(), lx.grad(), lw.grad(), lb.grad()};
}

Gradients garden_conv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& probe) {
  return run(x, w, b, probe, [](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb) {
    return conv2d(xx, ww, bb, 1, 1);
  });
}

// The reference: LibTorch's convolution in double (its own loops, not oneDNN).
Gradients reference_conv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                         const at::Tensor& probe) {
  return run(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble), probe,
             [](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb) {
               return at::conv2d(xx, ww, bb, {1, 1}, {1, 1});
             });
}

TEST(ConvolutionTest, WinogradMatchesADoubleReferenceForwardAndBackward) {
  SKIP_WITHOUT_WINOGRAD();
  AlgorithmScope scope(ConvolutionAlgorithm::kWinograd);
  torch::manual_seed(1);
  for (const auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
    SCOPED_TRACE(format == at::MemoryFormat::Contiguous ? "NCHW" : "NHWC");
    const at::Tensor x = torch::randn({4, 16, 13, 11}).contiguous(format);
    const at::Tensor w = (torch::randn({32, 16, 3, 3}) * 0.1).contiguous(format);
    const at::Tensor b = torch::randn({32});
    const at::Tensor probe = torch::randn({4, 32, 13, 11});
    ASSERT_TRUE(conv2d_uses_winograd(x, w, 1, 1, ConvolutionAlgorithm::kWinograd));
    const Gradients got = garden_conv(x, w, b, probe);
    const Gradients want = reference_conv(x, w, b, probe);
    EXPECT_EQ(got.y.sizes(), want.y.sizes());
    EXPECT_TRUE(got.y.is_contiguous(format));  // the input's memory format
    EXPECT_TRUE(got.dx.is_contiguous(format));
    EXPECT_LT(relative_error(got.y, want.y), 2e-5);
    EXPECT_LT(relative_error(got.dx, want.dx), 2e-5);
    EXPECT_LT(relative_error(got.dw, want.dw), 2e-5);
    EXPECT_LT(relative_error(got.db, want.db), 1e-6);
    // Rounding apart, not LibTorch's own float32 bits: this is not the direct algorithm.
    EXPECT_FALSE(torch::equal(got.y, at::conv2d(x, w, b, {1, 1}, {1, 1})));
  }
}

TEST(ConvolutionTest, WinogradRunsAgreeBitwise) {
  SKIP_WITHOUT_WINOGRAD();
  AlgorithmScope scope(ConvolutionAlgorithm::kWinograd);
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({8, 32, 14, 14}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor w =
      (torch::randn({32, 32, 3, 3}) * 0.1).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor b = torch::zeros({32});
  const at::Tensor probe = torch::randn({8, 32, 14, 14});
  const Gradients first = garden_conv(x, w, b, probe);
  const Gradients second = garden_conv(x, w, b, probe);
  EXPECT_TRUE(torch::equal(first.y, second.y));
  EXPECT_TRUE(torch::equal(first.dx, second.dx));
  EXPECT_TRUE(torch::equal(first.dw, second.dw));
}

// The backward passes reuse the operands the forward pass reordered and drop
// them; a second pass through a retained graph reorders them again, to the
// same bits.
TEST(ConvolutionTest, ARetainedGraphGivesTheSameGradientsTwice) {
  SKIP_WITHOUT_WINOGRAD();
  AlgorithmScope scope(ConvolutionAlgorithm::kWinograd);
  torch::manual_seed(5);
  at::Tensor x = torch::randn({4, 16, 10, 10}).contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor w = (torch::randn({16, 16, 3, 3}) * 0.1).contiguous(at::MemoryFormat::ChannelsLast);
  x.requires_grad_();
  w.requires_grad_();
  const at::Tensor loss = (conv2d(x, w, {}, 1, 1) * torch::randn({4, 16, 10, 10})).sum();
  loss.backward({}, /*retain_graph=*/true);
  const at::Tensor dx = x.grad().clone(), dw = w.grad().clone();
  x.mutable_grad().zero_();
  w.mutable_grad().zero_();
  loss.backward();
  EXPECT_TRUE(torch::equal(x.grad(), dx));
  EXPECT_TRUE(torch::equal(w.grad(), dw));
}

TEST(ConvolutionTest, OnlyTheInputsGradientWhenTheWeightIsFrozen) {
  SKIP_WITHOUT_WINOGRAD();
  AlgorithmScope scope(ConvolutionAlgorithm::kWinograd);
  torch::manual_seed(3);
  at::Tensor x = torch::randn({2, 16, 8, 8}).requires_grad_();
  const at::Tensor w = torch::randn({16, 16, 3, 3}) * 0.1;
  conv2d(x, w, at::Tensor(), 1, 1).sum().backward();
  at::Tensor xd = x.detach().to(torch::kDouble).requires_grad_();
  at::conv2d(xd, w.to(torch::kDouble), {}, {1, 1}, {1, 1}).sum().backward();
  EXPECT_LT(relative_error(x.grad(), xd.grad()), 2e-5);
  // And without any gradient: the forward alone.
  torch::NoGradGuard no_grad;
  EXPECT_LT(relative_error(conv2d(x.detach(), w, {}, 1, 1),
                           at::conv2d(xd.detach(), w.to(torch::kDouble), {}, {1, 1}, {1, 1})),
            2e-5);
}

// What Winograd does not cover goes to at::conv2d: the same bits.
TEST(ConvolutionTest, OtherConvolutionsAreLibTorchs) {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({2, 8, 10, 10});
  const at::Tensor w3 = torch::randn({8, 8, 3, 3});
  const at::Tensor w1 = torch::randn({8, 8, 1, 1});
  const at::Tensor b = torch::randn({8});
  AlgorithmScope scope(ConvolutionAlgorithm::kWinograd);
  EXPECT_FALSE(conv2d_uses_winograd(x, w3, 2, 1, ConvolutionAlgorithm::kWinograd));  // stride
  EXPECT_TRUE(torch::equal(conv2d(x, w3, b, 2, 1), at::conv2d(x, w3, b, {2, 2}, {1, 1})));
  EXPECT_FALSE(conv2d_uses_winograd(x, w3, 1, 0, ConvolutionAlgorithm::kWinograd));  // padding
  EXPECT_TRUE(torch::equal(conv2d(x, w3, b, 1, 0),
                           at::conv2d(x, w3, b, at::IntArrayRef{1, 1}, at::IntArrayRef{0, 0})));
  EXPECT_FALSE(conv2d_uses_winograd(x, w1, 1, 1, ConvolutionAlgorithm::kWinograd));  // 1x1
  const at::Tensor xd = x.to(torch::kDouble), wd = w3.to(torch::kDouble);
  EXPECT_FALSE(conv2d_uses_winograd(xd, wd, 1, 1, ConvolutionAlgorithm::kWinograd));  // double
  EXPECT_TRUE(torch::equal(conv2d(xd, wd, {}, 1, 1), at::conv2d(xd, wd, {}, {1, 1}, {1, 1})));
  {
    // LibTorch 2.4 replaced the per-device setters (torch_features.h).
#if GARDEN_HAS_DEVICE_TYPE_AUTOCAST
    at::autocast::set_autocast_enabled(at::kCPU, true);
    EXPECT_FALSE(conv2d_uses_winograd(x, w3, 1, 1, ConvolutionAlgorithm::kWinograd));
    at::autocast::set_autocast_enabled(at::kCPU, false);
#else
    at::autocast::set_cpu_enabled(true);
    EXPECT_FALSE(conv2d_uses_winograd(x, w3, 1, 1, ConvolutionAlgorithm::kWinograd));
    at::autocast::set_cpu_enabled(false);
#endif
  }
  // direct: never Winograd.
  EXPECT_FALSE(conv2d_uses_winograd(x, w3, 1, 1, ConvolutionAlgorithm::kDirect));
  set_convolution_algorithm(ConvolutionAlgorithm::kDirect);
  EXPECT_TRUE(torch::equal(conv2d(x, w3, b, 1, 1), at::conv2d(x, w3, b, {1, 1}, {1, 1})));
}

TEST(ConvolutionTest, AlgorithmNames) {
  EXPECT_EQ(parse_convolution_algorithm("auto"), ConvolutionAlgorithm::kAuto);
  EXPECT_EQ(parse_convolution_algorithm("direct"), ConvolutionAlgorithm::kDirect);
  EXPECT_EQ(parse_convolution_algorithm("winograd"), ConvolutionAlgorithm::kWinograd);
  try {
    parse_convolution_algorithm("fast");
    FAIL() << "'fast' was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "'fast' is not one of auto, direct, winograd");
  }
}

}  // namespace convolution_test
}  // namespace garden::kernels
