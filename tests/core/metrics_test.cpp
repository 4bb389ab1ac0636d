// Streaming metrics against values computed by hand.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "garden/core/metrics.h"

namespace {

TEST(MetricsTest, MeanIsWeightedAndStreams) {
  garden::Mean mean("loss");
  mean.update(torch::tensor({1.0, 2.0, 3.0}));
  mean.update(torch::tensor({10.0}), torch::tensor({2.0}));
  EXPECT_DOUBLE_EQ(mean.result(), (1 + 2 + 3 + 10 * 2) / 5.0);
  mean.update(4.0, 0.5);
  EXPECT_DOUBLE_EQ(mean.result(), (26 + 2) / 5.5);
  mean.reset();
  EXPECT_EQ(mean.result(), 0.0);
  EXPECT_EQ(mean.name(), "loss");
}

TEST(MetricsTest, SumAddsWeightedValues) {
  garden::Sum sum("tokens");
  sum.update_state({}, torch::tensor({1.0, 2.0}), torch::tensor({3.0, 0.5}));
  sum.update_state({}, torch::tensor({4.0}));
  EXPECT_DOUBLE_EQ(sum.result(), 3 + 1 + 4);
}

TEST(MetricsTest, AccuracyComparesEqualShapes) {
  garden::Accuracy accuracy("accuracy");
  accuracy.update_state(torch::tensor({1, 2, 3, 4}), torch::tensor({1, 0, 3, 0}));
  EXPECT_DOUBLE_EQ(accuracy.result(), 0.5);
  accuracy.update_state(torch::tensor({1, 1}), torch::tensor({1, 1}), torch::tensor({1.0, 3.0}));
  EXPECT_DOUBLE_EQ(accuracy.result(), (2 + 4) / 8.0);
  EXPECT_THROW(accuracy.update_state(torch::tensor({1}), torch::tensor({1, 2})), std::exception);
}

TEST(MetricsTest, SparseCategoricalAccuracyTakesTheArgmaxOfLogits) {
  garden::SparseCategoricalAccuracy accuracy("accuracy");
  const auto logits = torch::tensor({{0.1, 2.0, 0.3}, {5.0, 1.0, 0.0}, {0.0, 0.0, 1.0}});
  accuracy.update_state(torch::tensor({1, 2, 2}), logits);
  EXPECT_DOUBLE_EQ(accuracy.result(), 2.0 / 3.0);
  // Labels shaped [N, 1] as Keras allows, with weights.
  accuracy.reset();
  accuracy.update_state(torch::tensor({{1}, {0}, {0}}), logits, torch::tensor({1.0, 1.0, 2.0}));
  EXPECT_DOUBLE_EQ(accuracy.result(), 2.0 / 4.0);
}

}  // namespace
