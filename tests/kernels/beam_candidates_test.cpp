// kernels::top_log_prob_extensions: beam search's candidates, each example's best
// k of log_softmax(logits) + the beam's score (garden/kernels/beam_candidates.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "garden/kernels/beam_candidates.h"

namespace garden::kernels {
namespace {

// The definition, as beam search computed it before: LibTorch's log-softmax
// in double, the beams' scores added, topk over beams * V. The kernel takes
// each exponential in float and sums them in double: its scores are within
// kTolerance of these (float32's log-softmax, Model Garden's, is within
// about 1e-6), and its order is theirs wherever they are further apart.
constexpr double kTolerance = 1e-6;
std::tuple<at::Tensor, at::Tensor> definition(const at::Tensor& logits, const at::Tensor& alive,
                                              int64_t k) {
  const int64_t n = alive.size(0), beams = alive.size(1), vocab = logits.size(1);
  const at::Tensor log_probs =
      torch::log_softmax(logits.to(torch::kDouble), -1).view({n, beams, vocab}) +
      alive.unsqueeze(2);
  return log_probs.view({n, beams * vocab}).topk(k, 1);
}

TEST(BeamCandidatesTest, MatchesLogSoftmaxPlusScoresAndTopk) {
  torch::manual_seed(3);
  struct Shape {
    int64_t n, beams, vocab, k;
    double spread;
  };
  // Vocabularies off the 16-wide blocks and below one block; spreads that
  // push most e^(x - max) under e^-708 (the clamp) and keep them all near 1.
  for (const Shape s :
       {Shape{5, 4, 8000, 8, 3.0}, Shape{3, 4, 1003, 8, 1.0}, Shape{2, 3, 7, 6, 2.0},
        Shape{4, 1, 50, 1, 1000.0}, Shape{2, 2, 300, 4, 0.01}, Shape{1, 4, 33, 132, 5.0}}) {
    const at::Tensor logits = torch::randn({s.n * s.beams, s.vocab}) * s.spread;
    const at::Tensor alive = torch::randn({s.n, s.beams}, torch::kDouble) * 10.0;
    const auto [scores, indices] = top_log_prob_extensions(logits, alive, s.k);
    const auto [want_scores, want_indices] = definition(logits, alive, s.k);
    ASSERT_EQ(scores.scalar_type(), torch::kDouble);
    ASSERT_EQ(indices.scalar_type(), torch::kLong);
    EXPECT_TRUE(torch::equal(indices, want_indices)) << s.vocab;
    EXPECT_LT((scores - want_scores).abs().max().item<double>(), kTolerance) << s.vocab;
  }
}

TEST(BeamCandidatesTest, TiesGoToTheLowerIndexAndDeadBeamsComeLast) {
  // Every token equally likely in both beams, which have the same score:
  // the lowest (beam, token) indices win, in order.
  const at::Tensor flat = torch::zeros({2, 20});
  const auto [scores, indices] =
      top_log_prob_extensions(flat, torch::zeros({1, 2}, torch::kDouble), 4);
  EXPECT_TRUE(torch::equal(indices, torch::tensor({{0, 1, 2, 3}}, torch::kLong)));
  EXPECT_NEAR(scores[0][3].item<double>(), -std::log(20.0), 1e-15);

  // A dead beam (-inf, as at the first step) yields only -inf candidates,
  // after every live one.
  const at::Tensor logits = torch::randn({2, 3});
  const double inf = std::numeric_limits<double>::infinity();
  const auto [s2, i2] =
      top_log_prob_extensions(logits, torch::tensor({{0.0, -inf}}, torch::kDouble), 5);
  const auto [live, live_order] = torch::log_softmax(logits[0].to(torch::kDouble), 0).sort(0, true);
  EXPECT_TRUE(torch::equal(i2[0].slice(0, 0, 3), live_order));
  EXPECT_LT((s2[0].slice(0, 0, 3) - live).abs().max().item<double>(), kTolerance);
  EXPECT_TRUE(torch::equal(i2[0].slice(0, 3), torch::tensor({3, 4}, torch::kLong)));
  EXPECT_EQ(s2[0][4].item<double>(), -inf);
}

TEST(BeamCandidatesTest, NonFiniteLogitsAndDoublesTakeLibTorchsPath) {
  torch::manual_seed(4);
  at::Tensor logits = torch::randn({4, 40});
  logits[1][7] = std::numeric_limits<float>::infinity();
  logits[2][9] = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor alive = torch::randn({2, 2}, torch::kDouble);
  const auto [scores, indices] = top_log_prob_extensions(logits, alive, 3);
  const auto [want_scores, want_indices] = definition(logits, alive, 3);
  EXPECT_TRUE(torch::equal(indices, want_indices));
  EXPECT_TRUE(torch::allclose(scores, want_scores, 0, 0, /*equal_nan=*/true));

  // One non-finite value alone, in a 16-lane block or in the row's tail,
  // and a row of -inf: each is LibTorch's result.
  const float inf = std::numeric_limits<float>::infinity();
  for (const float value : {std::numeric_limits<float>::quiet_NaN(), inf, -inf}) {
    for (const int64_t at : {9, 37}) {
      at::Tensor one = torch::randn({4, 40});
      one[2][at] = value;
      if (value == -inf) one[3].fill_(-inf);
      const auto [got_scores, got_indices] = top_log_prob_extensions(one, alive, 3);
      const auto [one_scores, one_indices] = definition(one, alive, 3);
      EXPECT_TRUE(torch::allclose(got_scores, one_scores, 0, 0, /*equal_nan=*/true))
          << value << " at " << at;
      EXPECT_TRUE(torch::equal(got_indices, one_indices)) << value << " at " << at;
    }
  }

  const at::Tensor doubles = torch::randn({4, 40}, torch::kDouble);
  const auto [ds, di] = top_log_prob_extensions(doubles, alive, 3);
  const auto [want_ds, want_di] = definition(doubles, alive, 3);
  EXPECT_TRUE(torch::equal(ds, want_ds));
  EXPECT_TRUE(torch::equal(di, want_di));
}

// Logits on a few levels, so that many blocks of 16 hold values equal to
// the k-th best: a block is skipped only when none of its scores is above
// it, and equal scores go to the lower index. The reference orders every
// (beam, token) of LibTorch's log-softmax in double by score, then index.
TEST(BeamCandidatesTest, BlocksAtTheBarAreSkippedOnlyWhenNothingInThemBeatsIt) {
  torch::manual_seed(5);
  for (const int64_t vocab : {300, 2000}) {
    for (const double alive_spread : {0.0, 0.5}) {
      const int64_t n = 3, beams = 4, k = 8;
      const at::Tensor logits = torch::randint(-4, 3, {n * beams, vocab}).to(torch::kFloat) / 2.0;
      const at::Tensor alive = torch::randint(-2, 1, {n, beams}).to(torch::kDouble) * alive_spread;
      const auto [scores, indices] = top_log_prob_extensions(logits, alive, k);
      const at::Tensor all =
          (torch::log_softmax(logits.to(torch::kDouble), -1).view({n, beams, vocab}) +
           alive.unsqueeze(2))
              .view({n, beams * vocab});
      for (int64_t e = 0; e < n; ++e) {
        const auto row = all[e].contiguous();
        const double* p = row.data_ptr<double>();
        std::vector<int64_t> order(static_cast<std::size_t>(beams * vocab));
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return p[a] > p[b]; });
        for (int64_t j = 0; j < k; ++j) {
          SCOPED_TRACE(testing::Message() << "V " << vocab << " spread " << alive_spread
                                          << " example " << e << " rank " << j);
          EXPECT_EQ(indices[e][j].item<int64_t>(), order[static_cast<std::size_t>(j)]);
          EXPECT_NEAR(scores[e][j].item<double>(), p[order[static_cast<std::size_t>(j)]],
                      kTolerance);
        }
      }
    }
  }
}

TEST(BeamCandidatesTest, RefusesShapesThatDoNotMatch) {
  const at::Tensor alive = torch::zeros({2, 3}, torch::kDouble);
  EXPECT_THROW(top_log_prob_extensions(torch::zeros({5, 10}), alive, 2), std::invalid_argument);
  EXPECT_THROW(top_log_prob_extensions(torch::zeros({6, 10}), alive, 0), std::invalid_argument);
  EXPECT_THROW(top_log_prob_extensions(torch::zeros({6, 10}), alive, 31), std::invalid_argument);
  EXPECT_THROW(top_log_prob_extensions(torch::zeros({6}), alive, 2), std::invalid_argument);
}

}  // namespace
}  // namespace garden::kernels
