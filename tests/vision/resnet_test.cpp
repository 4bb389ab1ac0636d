// Model Garden's ResNet and ClassificationModel: parameter counts against
// torchvision's published ones (the same networks where Model Garden's
// differ in no weight), the shapes of every model_id, TensorFlow's 'same'
// padding, and the blocks on a hand-built case.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <limits>
#include <utility>
#include <vector>

#include "garden/vision/modeling/resnet.h"
#include "test_util.h"

namespace {

using garden::vision::ClassificationModel;
using garden::vision::ClassificationModelOptions;

int64_t parameter_count(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

ClassificationModelOptions options(int64_t model_id, int64_t classes) {
  ClassificationModelOptions o;
  o.backbone.model_id = model_id;
  o.num_classes = classes;
  return o;
}

TEST(ResNetTest, ParameterCountsAreTorchvisionsWhereTheNetworksAgree) {
  // torchvision's resnet50 (v1.5: the stride on the 3x3, as Model Garden):
  // 25,557,032 parameters with 1,000 classes; resnet101 44,549,160.
  ClassificationModel resnet50(options(50, 1000));
  EXPECT_EQ(parameter_count(*resnet50), 25557032);
  ClassificationModel resnet101(options(101, 1000));
  EXPECT_EQ(parameter_count(*resnet101), 44549160);
  // resnet18: torchvision's 11,689,512 plus Model Garden's projection on the
  // first block (use_first_projection: a 64 x 64 1x1 kernel and its norm).
  ClassificationModel resnet18(options(18, 1000));
  EXPECT_EQ(parameter_count(*resnet18), 11689512 + 64 * 64 + 2 * 64);
  auto no_projection = options(18, 1000);
  no_projection.backbone.use_first_projection = false;
  ClassificationModel torchvision18(no_projection);
  EXPECT_EQ(parameter_count(*torchvision18), 11689512);
  // resnet34: 21,797,672 in torchvision.
  auto o34 = options(34, 1000);
  o34.backbone.use_first_projection = false;
  ClassificationModel resnet34(o34);
  EXPECT_EQ(parameter_count(*resnet34), 21797672);
}

TEST(ResNetTest, EveryModelIdGivesLevelFiveFeaturesAndLogits) {
  for (int64_t id : {10, 18, 34, 50}) {
    SCOPED_TRACE(id);
    ClassificationModel model(options(id, 7));
    model->eval();
    torch::NoGradGuard no_grad;
    const at::Tensor images = torch::randn({2, 3, 64, 48});
    const at::Tensor features = model->backbone->forward(images);
    EXPECT_EQ(features.sizes(), (at::IntArrayRef{2, id >= 50 ? 2048 : 512, 2, 2}));
    EXPECT_EQ(model->forward(images).sizes(), (at::IntArrayRef{2, 7}));
  }
  // Odd sizes: 'same' rounds up at each stride 2 (33 -> 17 -> 9 -> 5 -> 3 -> 2).
  ClassificationModel model(options(18, 3));
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->backbone->forward(torch::randn({1, 3, 33, 33})).sizes(),
            (at::IntArrayRef{1, 512, 2, 2}));
  auto half = options(18, 3);
  half.backbone.depth_multiplier = 0.5;
  ClassificationModel narrow(half);
  EXPECT_EQ(narrow->backbone->output_channels(), 256);
  EXPECT_NE(garden_test::error_of([] { ClassificationModel bad(options(19, 3)); })
                .find("model_id 19 is not one of"),
            std::string::npos);
}

TEST(ResNetTest, SamePaddingIsTensorFlows) {
  // TensorFlow: total = max(kernel - (size % stride or stride), 0), the odd
  // pixel at the end.
  EXPECT_EQ(garden::vision::same_padding(224, 7, 2), (std::pair<int64_t, int64_t>{2, 3}));
  EXPECT_EQ(garden::vision::same_padding(225, 7, 2), (std::pair<int64_t, int64_t>{3, 3}));
  EXPECT_EQ(garden::vision::same_padding(56, 3, 2), (std::pair<int64_t, int64_t>{0, 1}));
  EXPECT_EQ(garden::vision::same_padding(56, 3, 1), (std::pair<int64_t, int64_t>{1, 1}));
  EXPECT_EQ(garden::vision::same_padding(56, 1, 2), (std::pair<int64_t, int64_t>{0, 0}));
  // A 3x3 stride-2 convolution of ones with an all-ones kernel on a 4 x 4
  // input of ones: windows at rows/columns 0..2 and 2..4, the last padded by
  // one zero row and column: 9, 6 / 6, 4.
  garden::vision::Conv2dSame conv(1, 1, 3, 2);
  torch::NoGradGuard no_grad;
  conv->conv->weight.fill_(1.0);
  const at::Tensor out = conv->forward(torch::ones({1, 1, 4, 4}));
  EXPECT_EQ(out.reshape(-1)[0].item<float>(), 9);
  EXPECT_EQ(out.reshape(-1)[1].item<float>(), 6);
  EXPECT_EQ(out.reshape(-1)[2].item<float>(), 6);
  EXPECT_EQ(out.reshape(-1)[3].item<float>(), 4);
}

// TensorFlow's max pooling with 'same' padding, by its definition: each
// output is the largest input in its window, the window starting `before`
// cells ahead of the image and cut at its edges.
at::Tensor max_pool_by_definition(const at::Tensor& x, int64_t kernel, int64_t stride) {
  const int64_t h = x.size(2), w = x.size(3);
  const int64_t oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride;
  const int64_t top = garden::vision::same_padding(h, kernel, stride).first;
  const int64_t left = garden::vision::same_padding(w, kernel, stride).first;
  at::Tensor out = torch::empty({x.size(0), x.size(1), oh, ow});
  auto in = x.accessor<float, 4>();
  auto o = out.accessor<float, 4>();
  for (int64_t n = 0; n < x.size(0); ++n)
    for (int64_t c = 0; c < x.size(1); ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t y = i * stride - top; y < i * stride - top + kernel; ++y)
            for (int64_t z = j * stride - left; z < j * stride - left + kernel; ++z)
              if (y >= 0 && y < h && z >= 0 && z < w) best = std::max(best, in[n][c][y][z]);
          o[n][c][i][j] = best;
        }
  return out;
}

TEST(ResNetTest, SameMaxPoolingIsTensorFlowsWithTheGradientOfThePaddedPooling) {
  torch::manual_seed(3);
  for (const auto& [kernel, stride] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 2}, {2, 2}, {3, 1}})
    for (int64_t h = 3; h <= 9; ++h)
      for (int64_t w : {4, 7, 8}) {
        SCOPED_TRACE("kernel " + std::to_string(kernel) + " stride " + std::to_string(stride) +
                     ", " + std::to_string(h) + " x " + std::to_string(w));
        // Random values, then ties everywhere: the gradient goes to the same
        // cell as through the padded copy (the first largest in the window).
        for (const at::Tensor& base : {torch::randn({2, 3, h, w}), torch::ones({2, 3, h, w})}) {
          const at::Tensor x = base.clone().requires_grad_(true);
          const at::Tensor y = garden::vision::max_pool_same(x, kernel, stride);
          EXPECT_TRUE(torch::equal(y.detach(), max_pool_by_definition(base, kernel, stride)));
          const auto [top, bottom] = garden::vision::same_padding(h, kernel, stride);
          const auto [left, right] = garden::vision::same_padding(w, kernel, stride);
          const at::Tensor x2 = base.clone().requires_grad_(true);
          const at::Tensor y2 =
              at::max_pool2d(at::constant_pad_nd(x2, {left, right, top, bottom},
                                                 -std::numeric_limits<double>::infinity()),
                             {kernel, kernel}, {stride, stride});
          const at::Tensor g = torch::randn(y.sizes());
          y.backward(g);
          y2.backward(g);
          EXPECT_TRUE(torch::equal(x.grad(), x2.grad()));
        }
      }
}

TEST(ResNetTest, ABasicBlockComputesItsDefinition) {
  // One residual block (1 channel, identity shortcut) in inference mode with
  // unit norms: relu(conv2(relu(conv1(x))) + x).
  garden::vision::ResNetOptions o;
  o.norm_epsilon = 0.0;
  garden::vision::ResNetBlock block(o, false, 1, 1, 1, false, 0.0);
  block->eval();
  torch::NoGradGuard no_grad;
  for (auto& p : block->named_parameters()) {
    if (p.key().find("conv") != std::string::npos) {
      p.value().zero_();
      p.value()[0][0][1][1] = 2.0;  // conv = 2x (centre tap)
    }
  }
  const at::Tensor x = torch::tensor({-1.0f, 0.5f, 2.0f, -3.0f}).reshape({1, 1, 2, 2});
  const at::Tensor expected = torch::relu(4 * torch::relu(x) + x);
  EXPECT_TRUE(torch::allclose(block->forward(x), expected, 1e-6, 1e-6))
      << block->forward(x) << expected;
}

// In training on a channels-last batch the norms run fused with their
// residual and ReLU (kernels::batch_norm_act); on an NCHW batch they run as
// LibTorch's operators. The same network either way.
TEST(ResNetTest, FusedNormsTrainAsTheModulesOperators) {
  const auto run = [](at::MemoryFormat format) {
    torch::manual_seed(7);
    ClassificationModelOptions o = options(18, 3);
    o.backbone.depth_multiplier = 0.25;
    ClassificationModel model(o);
    model->train();
    torch::manual_seed(8);
    const at::Tensor images = torch::randn({4, 3, 40, 40}).contiguous(format);
    const at::Tensor logits = model->forward(images);
    (logits * torch::randn(logits.sizes())).sum().backward();
    std::vector<at::Tensor> out = {logits.detach()};
    for (const auto& p : model->named_parameters()) out.push_back(p.value().grad());
    for (const auto& b : model->named_buffers()) out.push_back(b.value().clone());
    return out;
  };
  const auto fused = run(at::MemoryFormat::ChannelsLast);
  const auto plain = run(at::MemoryFormat::Contiguous);
  ASSERT_EQ(fused.size(), plain.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i));
    ASSERT_TRUE(fused[i].defined());
    const at::Tensor a = fused[i].to(torch::kDouble), b = plain[i].to(torch::kDouble);
    EXPECT_LE((a - b).abs().max().item<double>(),
              1e-3 * std::max(1.0, b.abs().max().item<double>()));
  }
}

TEST(ResNetTest, TheL2TermCountsKernelsOnly) {
  ClassificationModel model(options(10, 2));
  double sum = 0;
  for (const auto& p : model->named_parameters())
    if (p.value().dim() >= 2) sum += p.value().pow(2).sum().item<double>();
  EXPECT_NEAR(model->l2_loss(1e-4).item<double>(), 1e-4 / 2 * sum, 1e-9 + 1e-6 * sum * 1e-4);
}

}  // namespace
