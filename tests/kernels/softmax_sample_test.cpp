// kernels::sample_from_softmax: the draws' frequencies against the softmax
// computed here in double, the disallowed id, reproducibility, the fallbacks
// and the errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "garden/kernels/sampling.h"

namespace garden::kernels {
namespace {

// Draws `draws` ids from one row of logits (every row the same) and checks
// each id's frequency against `p` within five binomial standard deviations.
void expect_frequencies(const at::Tensor& row, const std::vector<double>& p, int64_t draws,
                        const at::Tensor& disallow = {}) {
  const int64_t vocab = row.size(0);
  at::Tensor logits = row.view({1, 1, vocab}).expand({draws / 4, 4, vocab});
  at::Tensor ids = sample_from_softmax(logits, disallow);
  ASSERT_EQ(ids.sizes(), (std::vector<int64_t>{draws / 4, 4}));
  ASSERT_EQ(ids.scalar_type(), torch::kLong);
  at::Tensor counts = torch::bincount(ids.view({-1}), {}, vocab).to(torch::kDouble);
  for (int64_t v = 0; v < vocab; ++v) {
    const double frequency = counts[v].item<double>() / draws;
    const double tolerance = 5.0 * std::sqrt(p[v] * (1.0 - p[v]) / draws) + 1e-12;
    EXPECT_NEAR(frequency, p[v], tolerance) << "id " << v;
  }
}

// softmax(x) in double, with x[skip] lowered by 1000 (none for -1).
std::vector<double> softmax_of(const at::Tensor& x, int64_t skip = -1) {
  const at::Tensor d = x.to(torch::kDouble);
  std::vector<double> logits(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  if (skip >= 0) logits[skip] -= 1000.0;
  double top = -INFINITY, sum = 0;
  for (double v : logits) top = std::max(top, v);
  std::vector<double> p;
  for (double v : logits) p.push_back(std::exp(v - top));
  for (double v : p) sum += v;
  for (double& v : p) v /= sum;
  return p;
}

// 37 ids: two blocks of 16 and a short one, weights spread over all three.
TEST(SoftmaxSample, FrequenciesMatchTheSoftmaxAcrossBlocks) {
  torch::manual_seed(7);
  const at::Tensor row = torch::rand({37}) * 4.0 - 2.0;
  expect_frequencies(row, softmax_of(row), 40000);
}

TEST(SoftmaxSample, DoubleLogitsFollowModelGardensFormula) {
  torch::manual_seed(8);
  const at::Tensor row = (torch::rand({21}) * 4.0 - 2.0).to(torch::kDouble);
  expect_frequencies(row, softmax_of(row), 20000);
}

TEST(SoftmaxSample, TheDisallowedIdLosesItsWeight) {
  torch::manual_seed(9);
  at::Tensor row = torch::rand({40}) * 2.0;
  row[19] = 6.0;  // most of the mass, in the second block
  const at::Tensor disallow = torch::full({10000, 4}, 19, torch::kLong);
  expect_frequencies(row, softmax_of(row, 19), 40000, disallow);
  // The same with the ids in another block: nothing else changes.
  expect_frequencies(row, softmax_of(row, 3), 40000, torch::full({10000, 4}, 3, torch::kLong));
}

TEST(SoftmaxSample, ADisallowedIdWithTheOnlyWeightIsStillDrawn) {
  // Model Garden subtracts 1000 and takes the argmax of the noisy logits, so
  // the id is drawn when every other logit is -inf; here that id's weight,
  // e^-1000, is 0 in double and the call falls back to the formula.
  at::Tensor logits = torch::full({3, 5}, -INFINITY);
  logits.select(1, 2).fill_(4.0);
  at::Tensor ids = sample_from_softmax(logits, torch::full({3}, 2, torch::kLong));
  EXPECT_TRUE(ids.eq(2).all().item<bool>()) << ids;
}

TEST(SoftmaxSample, NegligibleWeightsAreNeverDrawn) {
  torch::manual_seed(10);
  at::Tensor logits = torch::full({64, 30522}, -800.0);  // e^-800 is 0 in double
  const at::Tensor hot = torch::randint(30522, {64}, torch::kLong);
  logits.scatter_(1, hot.unsqueeze(1), 0.0);
  EXPECT_TRUE(torch::equal(sample_from_softmax(logits), hot));
}

TEST(SoftmaxSample, TheSeedReproducesTheIdsWhateverTheThreadsAndLayout) {
  torch::manual_seed(11);
  const at::Tensor logits = torch::randn({3, 50, 300});
  const int threads = at::get_num_threads();
  torch::manual_seed(12);
  at::set_num_threads(1);
  const at::Tensor one = sample_from_softmax(logits);
  torch::manual_seed(12);
  at::set_num_threads(2);
  const at::Tensor two = sample_from_softmax(logits);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one, two));
  // A transposed view of the same logits draws the same ids.
  const at::Tensor transposed = logits.transpose(0, 1).contiguous().transpose(0, 1);
  ASSERT_FALSE(transposed.is_contiguous());
  torch::manual_seed(12);
  EXPECT_TRUE(torch::equal(sample_from_softmax(transposed), one));
  torch::manual_seed(13);
  EXPECT_FALSE(torch::equal(sample_from_softmax(logits), one));
}

// bfloat16 logits (ELECTRA's generator under CPU autocast) take the float32
// kernel on their widened values: the same ids for the same seed.
TEST(SoftmaxSample, Bfloat16LogitsAreDrawnFromAsTheirFloatValues) {
  torch::manual_seed(21);
  const at::Tensor logits = (torch::randn({6, 5, 300}) * 2).to(torch::kBFloat16);
  const at::Tensor disallow = torch::randint(0, 300, {6, 5}, torch::kLong);
  torch::manual_seed(22);
  const at::Tensor got = sample_from_softmax(logits, disallow);
  torch::manual_seed(22);
  const at::Tensor want = sample_from_softmax(logits.to(torch::kFloat), disallow);
  EXPECT_TRUE(torch::equal(got, want));
}

TEST(SoftmaxSample, ARowWithANaNTakesTheFormula) {
  torch::manual_seed(14);
  at::Tensor logits = torch::zeros({4, 6});
  logits[1][2] = NAN;
  logits.select(1, 5).fill_(50.0);  // e^50 against e^0: id 5 in every finite row
  const at::Tensor ids = sample_from_softmax(logits);
  ASSERT_EQ(ids.sizes(), (std::vector<int64_t>{4}));
  for (int64_t r : {0, 2, 3}) EXPECT_EQ(ids[r].item<int64_t>(), 5) << "row " << r;
}

TEST(SoftmaxSample, BadArgumentsAreNamed) {
  const at::Tensor logits = torch::zeros({2, 3, 5});
  EXPECT_THROW(sample_from_softmax(torch::zeros({2, 0})), std::invalid_argument);
  EXPECT_THROW(sample_from_softmax(logits, torch::zeros({2, 4}, torch::kLong)),
               std::invalid_argument);
  try {
    sample_from_softmax(logits, torch::full({2, 3}, 5, torch::kLong));
    FAIL() << "an id outside the vocabulary was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("outside [0, 5)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace garden::kernels
