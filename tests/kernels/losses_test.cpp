// padded_cross_entropy_loss against a hand computation in double of Model
// Garden's label-smoothed cross-entropy (official/legacy/transformer/metrics.py).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/kernels/losses.h"

namespace {

using garden::kernels::padded_cross_entropy_loss;

// Builds the explicit soft targets and sums -target * log_softmax by hand.
double hand_token_loss(const std::vector<double>& logits, int64_t label, double smoothing) {
  const size_t vocab = logits.size();
  double max_logit = logits[0];
  for (double l : logits) max_logit = std::max(max_logit, l);
  double norm = 0.0;
  for (double l : logits) norm += std::exp(l - max_logit);
  const double log_norm = max_logit + std::log(norm);
  const double confidence = 1.0 - smoothing;
  const double low = smoothing / static_cast<double>(vocab - 1);
  double xent = 0.0;
  for (size_t v = 0; v < vocab; ++v) {
    const double target = static_cast<int64_t>(v) == label ? confidence : low;
    xent -= target * (logits[v] - log_norm);
  }
  const double constant = -(confidence * std::log(confidence) +
                            static_cast<double>(vocab - 1) * low * std::log(low + 1e-20));
  return xent - constant;
}

const std::vector<std::vector<std::vector<double>>> kLogits = {
    {{1.0, -0.5, 2.0, 0.3}, {0.0, 0.1, -1.2, 0.7}, {3.0, 1.0, -2.0, 0.5}},
    {{-0.3, 0.8, 0.2, 1.5}, {2.2, -1.0, 0.4, 0.0}, {0.6, 0.6, 0.1, -0.9}}};
const std::vector<std::vector<int64_t>> kLabels = {{2, 3, 0}, {1, 0, 0}};  // 0 is padding

at::Tensor logits_tensor() {
  std::vector<double> flat;
  for (const auto& row : kLogits)
    for (const auto& step : row) flat.insert(flat.end(), step.begin(), step.end());
  return torch::tensor(flat, torch::kDouble).view({2, 3, 4});
}

at::Tensor labels_tensor() {
  return torch::tensor(std::vector<int64_t>{2, 3, 0, 1, 0, 0}, torch::kLong).view({2, 3});
}

TEST(PaddedCrossEntropyLoss, MatchesHandComputationWithSmoothing) {
  const double smoothing = 0.1;
  const auto loss = padded_cross_entropy_loss(logits_tensor(), labels_tensor(), smoothing);
  double expected_sum = 0.0;
  double expected_weight = 0.0;
  for (size_t b = 0; b < kLabels.size(); ++b) {
    for (size_t t = 0; t < kLabels[b].size(); ++t) {
      const bool real = kLabels[b][t] != 0;
      const double expected = real ? hand_token_loss(kLogits[b][t], kLabels[b][t], smoothing) : 0.0;
      EXPECT_NEAR(loss.token_losses[b][t].item<double>(), expected, 1e-12) << b << "," << t;
      EXPECT_DOUBLE_EQ(loss.weights[b][t].item<double>(), real ? 1.0 : 0.0);
      expected_sum += expected;
      expected_weight += real ? 1.0 : 0.0;
    }
  }
  EXPECT_NEAR(loss.loss_sum.item<double>(), expected_sum, 1e-12);
  EXPECT_DOUBLE_EQ(loss.weight_sum.item<double>(), 3.0);
  EXPECT_NEAR(loss.mean().item<double>(), expected_sum / expected_weight, 1e-12);
}

TEST(PaddedCrossEntropyLoss, PadPositionsAreIgnored) {
  // Changing the logits where the label is padding changes nothing, and the
  // gradient there is zero.
  at::Tensor logits = logits_tensor().requires_grad_();
  const auto loss = padded_cross_entropy_loss(logits, labels_tensor(), 0.1);
  loss.loss_sum.backward();
  const at::Tensor pad_mask = labels_tensor().eq(0);
  EXPECT_EQ(logits.grad().index({pad_mask}).abs().max().item<double>(), 0.0);

  at::Tensor perturbed = logits_tensor().clone();
  perturbed.index_put_({pad_mask},
                       torch::randn({pad_mask.sum().item<int64_t>(), 4}, torch::kDouble) * 10.0);
  const auto other = padded_cross_entropy_loss(perturbed, labels_tensor(), 0.1);
  EXPECT_NEAR(other.loss_sum.item<double>(), loss.loss_sum.item<double>(), 1e-12);
}

// The backward writes the gradient over the softmax it saved; a second
// backward through the same graph must then fail, not read the gradient as
// probabilities.
TEST(PaddedCrossEntropyLoss, ASecondBackwardThroughTheGraphIsRefused) {
  at::Tensor logits = logits_tensor().to(torch::kFloat).requires_grad_();
  const at::Tensor loss = padded_cross_entropy_loss(logits, labels_tensor(), 0.1).mean();
  loss.backward({}, /*retain_graph=*/true);
  const at::Tensor first = logits.grad().clone();
  EXPECT_THROW(loss.backward(), c10::Error);
  EXPECT_TRUE(torch::equal(logits.grad(), first));
}

TEST(PaddedCrossEntropyLoss, GradientMatchesAutogradOfTheDefinition) {
  // The fused backward against autograd through the formula written out:
  // -sum(soft_target * log_softmax(logits)) weighted by the non-pad labels.
  for (double smoothing : {0.0, 0.1, 0.3}) {
    at::Tensor logits = logits_tensor().requires_grad_();
    padded_cross_entropy_loss(logits, labels_tensor(), smoothing).mean().backward();
    at::Tensor reference = logits_tensor().requires_grad_();
    const int64_t vocab = reference.size(-1);
    const at::Tensor target =
        torch::full(reference.sizes(), smoothing / double(vocab - 1), torch::kDouble)
            .scatter_(-1, labels_tensor().unsqueeze(-1), 1.0 - smoothing);
    const at::Tensor weights = labels_tensor().ne(0).to(torch::kDouble);
    const at::Tensor token = -(target * torch::log_softmax(reference, -1)).sum(-1);
    ((token * weights).sum() / weights.sum()).backward();
    EXPECT_TRUE(torch::allclose(logits.grad(), reference.grad(), 1e-12, 1e-12))
        << "smoothing " << smoothing;
  }
}

// The float32 path as training runs it: vocabularies on and off the
// kernel's 16 lanes, logits spread wide enough that most exponentials
// underflow, against the definition computed in double.
TEST(PaddedCrossEntropyLoss, FloatRowsMatchTheDefinitionInDouble) {
  torch::manual_seed(11);
  for (const int64_t vocab : {2, 17, 1000, 8003}) {
    for (const double spread : {1.0, 30.0}) {
      const at::Tensor logits = (torch::randn({3, 5, vocab}) * spread).requires_grad_();
      const at::Tensor labels = torch::randint(1, vocab, {3, 5}, torch::kLong);
      labels[1][2] = 0;  // one padded position
      const auto loss = padded_cross_entropy_loss(logits, labels, 0.1);
      loss.loss_sum.backward();

      const at::Tensor reference = logits.detach().to(torch::kDouble).requires_grad_();
      const at::Tensor target =
          torch::full(reference.sizes(), 0.1 / double(vocab - 1), torch::kDouble)
              .scatter_(-1, labels.unsqueeze(-1), 0.9);
      const double constant =
          -(0.9 * std::log(0.9) + double(vocab - 1) * (0.1 / double(vocab - 1)) *
                                      std::log(0.1 / double(vocab - 1) + 1e-20));
      const at::Tensor token = (-(target * torch::log_softmax(reference, -1)).sum(-1) - constant) *
                               labels.ne(0).to(torch::kDouble);
      token.sum().backward();
      const double scale = 1.0 + token.abs().max().item<double>();
      EXPECT_LE((loss.token_losses.to(torch::kDouble) - token).abs().max().item<double>(),
                2e-5 * scale)
          << "vocab " << vocab << " spread " << spread;
      EXPECT_LE((logits.grad().to(torch::kDouble) - reference.grad()).abs().max().item<double>(),
                1e-6)
          << "vocab " << vocab << " spread " << spread;
    }
  }
}

// Central finite differences of the summed loss, in double, on every logit
// of a small batch: the fused backward is the derivative of the fused forward.
TEST(PaddedCrossEntropyLoss, GradientMatchesFiniteDifferences) {
  const at::Tensor base = logits_tensor();
  at::Tensor logits = base.clone().requires_grad_();
  padded_cross_entropy_loss(logits, labels_tensor(), 0.1).loss_sum.backward();
  const at::Tensor flat = base.reshape({-1});
  const double h = 1e-6;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    at::Tensor plus = flat.clone(), minus = flat.clone();
    plus[i] += h;
    minus[i] -= h;
    const double up = padded_cross_entropy_loss(plus.view(base.sizes()), labels_tensor(), 0.1)
                          .loss_sum.item<double>();
    const double down = padded_cross_entropy_loss(minus.view(base.sizes()), labels_tensor(), 0.1)
                            .loss_sum.item<double>();
    EXPECT_NEAR(logits.grad().reshape({-1})[i].item<double>(), (up - down) / (2 * h), 1e-8)
        << "logit " << i;
  }
}

// The node from LibTorch's operations (CUDA and bfloat16 take it), run here
// on the CPU: forward and gradient against autograd through the definition
// in double, a second backward refused, and finite differences.
TEST(SmoothedCrossEntropyRows, MatchesTheDefinitionAndItsGradient) {
  torch::manual_seed(5);
  for (const double smoothing : {0.0, 0.1}) {
    for (const int64_t vocab : {2, 37, 1000}) {
      const double confidence = 1.0 - smoothing, low = smoothing / double(vocab - 1);
      const at::Tensor base = torch::randn({6, vocab}, torch::kDouble) * 3.0;
      const at::Tensor ids = torch::randint(0, vocab, {6}, torch::kLong);
      const at::Tensor row_grads = torch::randn({6}, torch::kDouble);
      at::Tensor logits = base.clone().requires_grad_();
      const at::Tensor rows =
          garden::kernels::smoothed_cross_entropy_rows(logits, ids, confidence, low);
      (rows * row_grads).sum().backward({}, /*retain_graph=*/true);

      at::Tensor reference = base.clone().requires_grad_();
      const at::Tensor target =
          torch::full({6, vocab}, low, torch::kDouble).scatter_(1, ids.unsqueeze(1), confidence);
      const at::Tensor expected = -(target * torch::log_softmax(reference, -1)).sum(-1);
      (expected * row_grads).sum().backward();
      EXPECT_TRUE(torch::allclose(rows, expected, 1e-12, 1e-12)) << vocab << " " << smoothing;
      EXPECT_TRUE(torch::allclose(logits.grad(), reference.grad(), 1e-12, 1e-12))
          << vocab << " " << smoothing;
      // Its backward overwrote the saved log-probabilities.
      EXPECT_THROW((rows * row_grads).sum().backward(), c10::Error);
    }
  }
  const at::Tensor base = logits_tensor().view({6, 4});
  const at::Tensor ids = labels_tensor().view({6});
  at::Tensor logits = base.clone().requires_grad_();
  garden::kernels::smoothed_cross_entropy_rows(logits, ids, 0.9, 0.1 / 3).sum().backward();
  const double h = 1e-6;
  for (int64_t i = 0; i < base.numel(); ++i) {
    at::Tensor plus = base.clone().reshape({-1}), minus = base.clone().reshape({-1});
    plus[i] += h;
    minus[i] -= h;
    const double up = garden::kernels::smoothed_cross_entropy_rows(plus.view({6, 4}), ids, 0.9, 0.1 / 3)
                          .sum()
                          .item<double>();
    const double down =
        garden::kernels::smoothed_cross_entropy_rows(minus.view({6, 4}), ids, 0.9, 0.1 / 3)
            .sum()
            .item<double>();
    EXPECT_NEAR(logits.grad().reshape({-1})[i].item<double>(), (up - down) / (2 * h), 1e-8)
        << "logit " << i;
  }
}

// bfloat16 logits (the path autocast gives the loss) reach the same loss
// and gradient as padded_cross_entropy_loss on the same values in float32,
// within bfloat16's rounding, and the gradient comes back in bfloat16
// (without autocast, as here, the log-probabilities are bfloat16 too).
TEST(SmoothedCrossEntropyRows, Bfloat16LogitsGiveTheFloatLossAndABfloat16Gradient) {
  torch::manual_seed(6);
  const at::Tensor values = (torch::randn({4, 7, 300}) * 2.0).to(torch::kBFloat16);
  const at::Tensor labels = torch::randint(1, 300, {4, 7}, torch::kLong);
  labels[2][3] = 0;
  at::Tensor half = values.clone().requires_grad_();
  const auto low = padded_cross_entropy_loss(half, labels, 0.1);
  low.mean().backward();
  at::Tensor full = values.to(torch::kFloat).requires_grad_();
  const auto high = padded_cross_entropy_loss(full, labels, 0.1);
  high.mean().backward();
  EXPECT_EQ(half.grad().scalar_type(), torch::kBFloat16);
  // log_softmax in bfloat16 (8 bits of mantissa) over 300 ids: about 1 %.
  const float scale = 1.0f + high.token_losses.abs().max().item<float>();
  EXPECT_LE((low.token_losses.to(torch::kFloat) - high.token_losses).abs().max().item<float>(),
            0.02f * scale);
  EXPECT_LE((half.grad().to(torch::kFloat) - full.grad()).abs().max().item<float>(), 1e-3f);
}

// On the CPU, bfloat16 logits take the fused float32 kernel on their
// widened values: the loss is the float32 loss of the same numbers, bit for
// bit, and the gradient is the float32 gradient rounded to bfloat16.
TEST(PaddedCrossEntropyLoss, CpuBfloat16LogitsAreTheFloatLossOfTheirValues) {
  torch::manual_seed(8);
  const at::Tensor values = (torch::randn({3, 5, 200}) * 3.0).to(torch::kBFloat16);
  const at::Tensor labels = torch::randint(1, 200, {3, 5}, torch::kLong);
  labels[1][2] = 0;
  at::Tensor half = values.clone().requires_grad_();
  const auto low = padded_cross_entropy_loss(half, labels, 0.1);
  (low.loss_sum / low.weight_sum).backward();
  at::Tensor full = values.to(torch::kFloat).requires_grad_();
  const auto high = padded_cross_entropy_loss(full, labels, 0.1);
  (high.loss_sum / high.weight_sum).backward();
  EXPECT_EQ(low.token_losses.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(low.token_losses, high.token_losses));
  EXPECT_EQ(half.grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(half.grad(), full.grad().to(torch::kBFloat16)));
}

// A NaN or infinite logit makes its row's loss NaN (the trainer's NaN
// handling then acts), and leaves the other rows as they were.
TEST(PaddedCrossEntropyLoss, ANonFiniteLogitMakesOnlyItsRowNaN) {
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    at::Tensor logits = logits_tensor().to(torch::kFloat);
    const auto clean = padded_cross_entropy_loss(logits, labels_tensor(), 0.1);
    logits[0][1][2] = bad;
    const auto loss = padded_cross_entropy_loss(logits, labels_tensor(), 0.1);
    const bool minus_infinity = std::isinf(bad) && bad < 0;
    // -inf on a logit that is not the label's is a zero probability: with
    // smoothing its log enters the sum, so the loss is +inf, not NaN.
    const double got = loss.token_losses[0][1].item<double>();
    EXPECT_TRUE(minus_infinity ? std::isinf(got) : std::isnan(got)) << bad << ": " << got;
    EXPECT_EQ(loss.token_losses[0][0].item<float>(), clean.token_losses[0][0].item<float>());
    EXPECT_EQ(loss.token_losses[1][0].item<float>(), clean.token_losses[1][0].item<float>());
  }
}

// Float32 rows of 37 logits (two blocks of the kernel's 16 lanes and a
// tail of 5): the maximum in the tail, tied across lanes and the tail, at id
// 0, alone in a row of -inf; each row's loss against the hand computation in
// double. A NaN or +inf in a lane, and a row of -inf, give NaN.
TEST(PaddedCrossEntropyLoss, FloatRowsFindTheirMaximumInAnyLaneOrTheTail) {
  constexpr int64_t kVocab = 37;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  std::vector<float> base(kVocab);
  for (int64_t v = 0; v < kVocab; ++v) base[v] = std::sin(0.7f * static_cast<float>(v));
  auto with = [&](std::vector<std::pair<int64_t, float>> set, std::vector<float> row) {
    for (const auto& [v, x] : set) row[static_cast<size_t>(v)] = x;
    return row;
  };
  rows.push_back(with({{35, 4.0f}}, base));                        // in the tail
  rows.push_back(with({{3, 4.0f}, {20, 4.0f}, {33, 4.0f}}, base));  // tied: lanes and tail
  rows.push_back(with({{0, 4.0f}}, base));                         // id 0
  rows.push_back(with({{17, 2.5f}}, std::vector<float>(kVocab, -inf)));
  rows.push_back(with({{21, 90.0f}, {5, -90.0f}}, base));  // most exponentials underflow
  const size_t finite = rows.size();
  rows.push_back(with({{9, std::nanf("")}}, base));
  rows.push_back(with({{12, inf}}, base));
  rows.push_back(std::vector<float>(kVocab, -inf));
  std::vector<float> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  const int64_t n = static_cast<int64_t>(rows.size());
  const at::Tensor logits = torch::tensor(flat).view({1, n, kVocab});
  const at::Tensor labels = torch::full({1, n}, 7, torch::kLong);
  const auto loss = padded_cross_entropy_loss(logits, labels, 0.1);
  for (size_t r = 0; r < rows.size(); ++r) {
    const double got = loss.token_losses[0][static_cast<int64_t>(r)].item<double>();
    if (r < finite) {
      const std::vector<double> row(rows[r].begin(), rows[r].end());
      const double expected = hand_token_loss(row, 7, 0.1);
      if (std::isinf(expected)) {
        EXPECT_EQ(got, expected) << "row " << r;
      } else {
        EXPECT_NEAR(got, expected, 2e-5 * (1.0 + std::fabs(expected))) << "row " << r;
      }
    } else {
      EXPECT_TRUE(std::isnan(got)) << "row " << r << ": " << got;
    }
  }
}

TEST(PaddedCrossEntropyLoss, CustomPadId) {
  const auto loss = padded_cross_entropy_loss(logits_tensor(), labels_tensor(), 0.0, /*pad_id=*/3);
  // Only label 3 (at [0][1]) is padding now; the zeros count.
  EXPECT_DOUBLE_EQ(loss.weight_sum.item<double>(), 5.0);
  EXPECT_EQ(loss.token_losses[0][1].item<double>(), 0.0);
}

TEST(PaddedCrossEntropyLoss, NoSmoothingEqualsPlainCrossEntropy) {
  const at::Tensor logits = logits_tensor();
  const at::Tensor labels = labels_tensor();
  const auto loss = padded_cross_entropy_loss(logits, labels, 0.0);
  const at::Tensor plain = torch::nn::functional::cross_entropy(
      logits.view({-1, 4}), labels.view({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const at::Tensor expected = plain.view({2, 3}) * labels.ne(0).to(torch::kDouble);
  EXPECT_TRUE(torch::allclose(loss.token_losses, expected, 1e-12, 1e-12));
}

TEST(PaddedCrossEntropyLoss, PerfectPredictionCostsZeroAndFloatWorks) {
  // Logits whose softmax is exactly the soft target give 0 loss.
  const double smoothing = 0.2;
  const double low = smoothing / 3.0;
  std::vector<float> row = {static_cast<float>(std::log(low)), static_cast<float>(std::log(low)),
                            static_cast<float>(std::log(1.0 - smoothing)),
                            static_cast<float>(std::log(low))};
  const at::Tensor logits = torch::tensor(row).view({1, 1, 4});
  const at::Tensor labels = torch::tensor(std::vector<int64_t>{2}).view({1, 1});
  const auto loss = padded_cross_entropy_loss(logits, labels, smoothing);
  EXPECT_EQ(loss.loss_sum.scalar_type(), torch::kFloat);
  EXPECT_NEAR(loss.loss_sum.item<double>(), 0.0, 1e-6);
}

// sparse_cross_entropy_rows (ELECTRA's masked-LM loss) against LibTorch's
// cross_entropy_loss without reduction, value and gradient: in double to
// 1e-12 (vocab sizes around a 16-lane block, and ELECTRA's 30,522), in
// float32 to float rounding; bfloat16 logits give a bfloat16 gradient.
TEST(SparseCrossEntropyRows, MatchesLibTorchsCrossEntropyAndItsGradient) {
  torch::manual_seed(7);
  for (const auto dtype : {torch::kDouble, torch::kFloat}) {
    for (const int64_t vocab : {2, 17, 1000, 30522}) {
      SCOPED_TRACE(testing::Message() << dtype << " vocab " << vocab);
      const at::Tensor base = (torch::randn({9, vocab}, torch::kDouble) * 4.0).to(dtype);
      const at::Tensor ids = torch::randint(0, vocab, {9}, torch::kInt);
      const at::Tensor row_grads = torch::randn({9}, dtype);
      at::Tensor logits = base.clone().requires_grad_();
      const at::Tensor rows = garden::kernels::sparse_cross_entropy_rows(logits, ids);
      (rows * row_grads).sum().backward();
      at::Tensor reference = base.to(torch::kDouble).requires_grad_();
      const at::Tensor expected = at::cross_entropy_loss(reference, ids.to(torch::kLong), {},
                                                         at::Reduction::None);
      (expected * row_grads.to(torch::kDouble)).sum().backward();
      EXPECT_EQ(rows.scalar_type(), dtype);
      const double tolerance = dtype == torch::kDouble ? 1e-12 : 2e-6;
      EXPECT_TRUE(torch::allclose(rows.to(torch::kDouble), expected, tolerance, tolerance));
      EXPECT_TRUE(
          torch::allclose(logits.grad().to(torch::kDouble), reference.grad(), tolerance, tolerance));
    }
  }
  const at::Tensor values = (torch::randn({5, 300}) * 2.0).to(torch::kBFloat16);
  const at::Tensor ids = torch::randint(0, 300, {5}, torch::kLong);
  at::Tensor half = values.clone().requires_grad_();
  garden::kernels::sparse_cross_entropy_rows(half, ids).sum().backward();
  at::Tensor full = values.to(torch::kFloat).requires_grad_();
  const at::Tensor want = garden::kernels::sparse_cross_entropy_rows(full, ids);
  want.sum().backward();
  EXPECT_EQ(half.grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(garden::kernels::sparse_cross_entropy_rows(values, ids).equal(want));
  EXPECT_TRUE(half.grad().equal(full.grad().to(torch::kBFloat16)));
}

TEST(SparseCrossEntropyRows, AnIdOutsideTheVocabularyOrAWrongShapeIsOneError) {
  const at::Tensor logits = torch::randn({3, 5});
  for (const int64_t wrong : {-1, 5}) {
    try {
      garden::kernels::sparse_cross_entropy_rows(logits, torch::tensor({int64_t{0}, wrong, int64_t{4}}));
      ADD_FAILURE() << wrong << " was taken";
    } catch (const garden::Error& e) {
      EXPECT_NE(std::string(e.what()).find("ids must lie in [0, 5)"), std::string::npos);
    }
  }
  EXPECT_THROW(garden::kernels::sparse_cross_entropy_rows(logits, torch::tensor({0, 1})),
               garden::Error);
  EXPECT_THROW(garden::kernels::sparse_cross_entropy_rows(logits.view({3, 5, 1}), torch::zeros({3})),
               garden::Error);
  EXPECT_THROW(garden::kernels::sparse_cross_entropy_rows(logits, torch::zeros({3})),
               garden::Error);  // float ids
}

}  // namespace
