// The dynamic loss scaler against Keras LossScaleOptimizer's rules.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/config/config.h"
#include "garden/optim/loss_scaler.h"

namespace {

using garden::optim::LossScaler;
using garden::optim::NamedParameter;

// One parameter whose gradient is set to `gradient` before each check.
struct Problem {
  std::vector<NamedParameter> params{{"w", torch::zeros({2}).requires_grad_()}};
  bool check(LossScaler& scaler, float gradient) {
    params[0].tensor.mutable_grad() = torch::full({2}, gradient);
    return scaler.unscale_and_check(params);
  }
};

TEST(LossScalerTest, KerasDefaults) {
  const LossScaler scaler;
  EXPECT_EQ(scaler.current_scale(), 32768.0);
  EXPECT_TRUE(scaler.dynamic());
  const auto scaled = scaler.scale(torch::tensor(0.5f));
  EXPECT_EQ(scaled.item<float>(), 16384.0f);
  EXPECT_EQ(LossScaler::from_config(std::nullopt).current_scale(), 32768.0);
  EXPECT_TRUE(LossScaler::from_config(std::string("dynamic")).dynamic());
}

TEST(LossScalerTest, UnscalesGradientsInPlace) {
  LossScaler scaler(8.0);
  Problem problem;
  EXPECT_TRUE(problem.check(scaler, 4.0f));
  EXPECT_TRUE(torch::equal(problem.params[0].tensor.grad(), torch::full({2}, 0.5f)));
  EXPECT_EQ(scaler.good_steps(), 1);
}

TEST(LossScalerTest, BacksOffOnOverflowAndGrowsBack) {
  LossScaler scaler(1024.0, /*growth_steps=*/3);
  Problem problem;
  EXPECT_TRUE(problem.check(scaler, 1.0f));
  EXPECT_EQ(scaler.good_steps(), 1);
  // An injected inf: the step must be skipped, the scale halves, the run of
  // good steps restarts.
  EXPECT_FALSE(problem.check(scaler, std::numeric_limits<float>::infinity()));
  EXPECT_EQ(scaler.current_scale(), 512.0);
  EXPECT_EQ(scaler.good_steps(), 0);
  EXPECT_FALSE(problem.check(scaler, std::numeric_limits<float>::quiet_NaN()));
  EXPECT_EQ(scaler.current_scale(), 256.0);
  // growth_steps good steps in a row double it again.
  EXPECT_TRUE(problem.check(scaler, 1.0f));
  EXPECT_TRUE(problem.check(scaler, 1.0f));
  EXPECT_EQ(scaler.current_scale(), 256.0);
  EXPECT_TRUE(problem.check(scaler, 1.0f));
  EXPECT_EQ(scaler.current_scale(), 512.0);
  EXPECT_EQ(scaler.good_steps(), 0);
}

TEST(LossScalerTest, NeverBacksOffBelowOne) {
  LossScaler scaler(1.0);
  Problem problem;
  EXPECT_FALSE(problem.check(scaler, std::numeric_limits<float>::infinity()));
  EXPECT_EQ(scaler.current_scale(), 1.0);
}

TEST(LossScalerTest, FixedScaleNeverChangesButReportsOverflow) {
  LossScaler scaler = LossScaler::from_config(std::string("128"));
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.current_scale(), 128.0);
  Problem problem;
  EXPECT_FALSE(problem.check(scaler, std::numeric_limits<float>::infinity()));
  EXPECT_EQ(scaler.current_scale(), 128.0);
  LossScaler fast_growth(4.0, /*growth_steps=*/1, 2.0, /*dynamic=*/false);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(problem.check(fast_growth, 1.0f));
  EXPECT_EQ(fast_growth.current_scale(), 4.0);
  EXPECT_THROW(LossScaler::from_config(std::string("big")), garden::config::ConfigError);
  EXPECT_THROW(LossScaler::from_config(std::string("-2")), garden::config::ConfigError);
}

TEST(LossScalerTest, StateRoundTrip) {
  LossScaler first(64.0, /*growth_steps=*/4);
  Problem problem;
  problem.check(first, std::numeric_limits<float>::infinity());
  problem.check(first, 1.0f);
  problem.check(first, 1.0f);
  LossScaler second(64.0, /*growth_steps=*/4);
  second.restore(first.state());
  EXPECT_EQ(second.current_scale(), 32.0);
  EXPECT_EQ(second.good_steps(), 2);
  // Both grow at the same step.
  for (int i = 0; i < 2; ++i) {
    problem.check(first, 1.0f);
    problem.check(second, 1.0f);
  }
  EXPECT_EQ(first.current_scale(), 64.0);
  EXPECT_EQ(second.current_scale(), 64.0);
  // A fixed scale keeps its configured value; a broken state is refused.
  LossScaler fixed(8.0, 2000, 2.0, /*dynamic=*/false);
  fixed.restore(first.state());
  EXPECT_EQ(fixed.current_scale(), 8.0);
  EXPECT_THROW(second.restore(nlohmann::json::object()), garden::Error);
}

}  // namespace
