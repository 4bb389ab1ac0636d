// Model Garden's learning-rate schedules (stepwise, polynomial, exponential,
// cosine, power), offsets and warmups at their boundary steps, against values
// computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "garden/optim/lr_schedule.h"

namespace {

using garden::config::OptimizationConfig;

double lr_at(const OptimizationConfig& c, int64_t step) {
  return (*garden::optim::make_schedule(c.learning_rate, c.warmup))(step);
}

TEST(PowerScheduleTest, DirectPowerDecayStartsFromStepOne) {
  OptimizationConfig c;
  c.learning_rate.type = "power";
  c.learning_rate.power.initial_learning_rate = 2.0;
  EXPECT_EQ(c.learning_rate.power.name, "DirectPowerDecay");
  EXPECT_EQ(c.learning_rate.power.power, -0.5);
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 2.0);  // max(0, 1) = 1
  EXPECT_DOUBLE_EQ(lr_at(c, 1), 2.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 4), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 100), 0.2);
  c.learning_rate.power.power = 1.0;
  EXPECT_DOUBLE_EQ(lr_at(c, 3), 6.0);
}

TEST(PowerScheduleTest, PowerAndLinearDecayRampsToZeroOverTheLastFraction) {
  OptimizationConfig c;
  c.learning_rate.type = "power_linear";
  auto& p = c.learning_rate.power_linear;
  p.initial_learning_rate = 1.0;
  p.total_decay_steps = 100;
  EXPECT_EQ(p.name, "PowerAndLinearDecay");
  EXPECT_EQ(p.power, -0.5);
  EXPECT_EQ(p.linear_decay_fraction, 0.1);
  EXPECT_EQ(p.offset, 0);
  // The linear part covers the last 10 steps: (100 - step) / 10 once below 1.
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 1), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 89), 1.0 / std::sqrt(89.0));
  EXPECT_DOUBLE_EQ(lr_at(c, 90), 1.0 / std::sqrt(90.0));
  EXPECT_DOUBLE_EQ(lr_at(c, 91), 1.0 / std::sqrt(91.0) * 0.9);
  EXPECT_DOUBLE_EQ(lr_at(c, 99), 1.0 / std::sqrt(99.0) * 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 100), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 150), 0.0);  // negative ramp, clamped at zero

  // The offset shifts the whole schedule; before it the rate is the initial one.
  p.offset = 10;
  EXPECT_DOUBLE_EQ(lr_at(c, 5), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 11), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 14), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(c, 101), 1.0 / std::sqrt(91.0) * 0.9);
  EXPECT_DOUBLE_EQ(lr_at(c, 110), 0.0);

  // No linear fraction: pure power decay, never reaching zero.
  p.offset = 0;
  p.linear_decay_fraction = 0.0;
  EXPECT_DOUBLE_EQ(lr_at(c, 400), 0.05);
}

TEST(PowerScheduleTest, PowerDecayWithOffsetHoldsThenDecaysUnderTheCap) {
  OptimizationConfig c;
  c.learning_rate.type = "power_with_offset";
  auto& p = c.learning_rate.power_with_offset;
  p.initial_learning_rate = 1.0;
  EXPECT_EQ(p.name, "PowerDecayWithOffset");
  EXPECT_EQ(p.pre_offset_learning_rate, 1.0e6);
  p.offset = 10;
  p.pre_offset_learning_rate = 0.8;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.8);
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 0.8);  // not yet past the offset
  EXPECT_DOUBLE_EQ(lr_at(c, 11), 0.8);  // 1 * 1^-0.5 = 1, capped at 0.8
  EXPECT_DOUBLE_EQ(lr_at(c, 14), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(c, 110), 0.1);
}

TEST(PowerScheduleTest, MissingRequiredValuesNameTheKey) {
  OptimizationConfig c;
  c.learning_rate.type = "power_linear";
  c.learning_rate.power_linear.initial_learning_rate = 1.0;
  try {
    lr_at(c, 0);
    FAIL();
  } catch (const garden::config::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "trainer.optimizer_config.learning_rate.power_linear.total_decay_steps must be "
                 "set");
  }
  c.learning_rate.type = "power";
  try {
    lr_at(c, 0);
    FAIL();
  } catch (const garden::config::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "trainer.optimizer_config.learning_rate.power.initial_learning_rate must be set");
  }
}

TEST(OffsetScheduleTest, OffsetIsSubtractedBeforeTheFormula) {
  OptimizationConfig c;
  c.learning_rate.type = "stepwise";
  c.learning_rate.stepwise.boundaries = std::vector<int64_t>{10, 20};
  c.learning_rate.stepwise.values = std::vector<double>{1.0, 0.5, 0.1};
  c.learning_rate.stepwise.offset = 5;
  EXPECT_EQ(lr_at(c, 0), 1.0);
  EXPECT_EQ(lr_at(c, 15), 1.0);
  EXPECT_EQ(lr_at(c, 16), 0.5);
  EXPECT_EQ(lr_at(c, 25), 0.5);
  EXPECT_EQ(lr_at(c, 26), 0.1);

  // Model Garden evaluates the Keras formula at step - offset even when that
  // is negative: polynomial and exponential decay then exceed the initial rate.
  c.learning_rate.type = "polynomial";
  c.learning_rate.polynomial.initial_learning_rate = 1.0;
  c.learning_rate.polynomial.decay_steps = 100;
  c.learning_rate.polynomial.end_learning_rate = 0.0;
  c.learning_rate.polynomial.offset = 10;
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 60), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(c, 110), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 500), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.1);

  c.learning_rate.type = "exponential";
  c.learning_rate.exponential.initial_learning_rate = 1.0;
  c.learning_rate.exponential.decay_steps = 10;
  c.learning_rate.exponential.decay_rate = 0.5;
  c.learning_rate.exponential.offset = 5;
  EXPECT_DOUBLE_EQ(lr_at(c, 5), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 15), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(c, 0), std::sqrt(2.0));

  c.learning_rate.type = "cosine";
  c.learning_rate.cosine.initial_learning_rate = 1.0;
  c.learning_rate.cosine.decay_steps = 100;
  c.learning_rate.cosine.offset = 20;
  EXPECT_DOUBLE_EQ(lr_at(c, 20), 1.0);
  EXPECT_NEAR(lr_at(c, 70), 0.5, 1e-15);
  EXPECT_NEAR(lr_at(c, 120), 0.0, 1e-15);
  EXPECT_NEAR(lr_at(c, 200), 0.0, 1e-15);
}

TEST(WarmupTest, PolynomialWarmupStartsFromStepOne) {
  OptimizationConfig c;
  c.learning_rate.type = "constant";
  c.learning_rate.constant.learning_rate = 1.0;
  c.warmup.type = "polynomial";
  c.warmup.polynomial.warmup_steps = 10;
  c.warmup.polynomial.power = 2.0;
  // Model Garden: max(step, 1) / warmup_steps, so step 0 already has a rate.
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.01);
  EXPECT_DOUBLE_EQ(lr_at(c, 1), 0.01);
  EXPECT_DOUBLE_EQ(lr_at(c, 9), 0.81);
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 1.0);
}

TEST(WarmupTest, PowerDecayIsEvaluatedAtTheRawStepAfterWarmup) {
  OptimizationConfig c;
  c.learning_rate.type = "power";
  c.learning_rate.power.initial_learning_rate = 1.0;
  c.warmup.type = "linear";
  c.warmup.linear.warmup_steps = 16;
  // Warmup rises to the base rate at step 16 (1/4), then the base schedule
  // continues at the raw step (not step - 16).
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 8), 0.125);
  EXPECT_DOUBLE_EQ(lr_at(c, 15), 0.25 * 15.0 / 16.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 16), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(c, 64), 0.125);
}

TEST(ScheduleTest, StepwiseChangesAfterEachBoundary) {
  OptimizationConfig c;
  c.learning_rate.type = "stepwise";
  c.learning_rate.stepwise.boundaries = std::vector<int64_t>{10, 20};
  c.learning_rate.stepwise.values = std::vector<double>{1.0, 0.5, 0.1};
  EXPECT_EQ(lr_at(c, 0), 1.0);
  EXPECT_EQ(lr_at(c, 10), 1.0);
  EXPECT_EQ(lr_at(c, 11), 0.5);
  EXPECT_EQ(lr_at(c, 20), 0.5);
  EXPECT_EQ(lr_at(c, 21), 0.1);
}

TEST(ScheduleTest, PolynomialExponentialAndCosine) {
  OptimizationConfig c;
  c.learning_rate.type = "polynomial";
  c.learning_rate.polynomial.initial_learning_rate = 1.0;
  c.learning_rate.polynomial.decay_steps = 100;
  c.learning_rate.polynomial.end_learning_rate = 0.1;
  c.learning_rate.polynomial.power = 2.0;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 50), 0.9 * 0.25 + 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 100), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 500), 0.1);

  c.learning_rate.type = "exponential";
  c.learning_rate.exponential.initial_learning_rate = 2.0;
  c.learning_rate.exponential.decay_steps = 10;
  c.learning_rate.exponential.decay_rate = 0.5;
  EXPECT_DOUBLE_EQ(lr_at(c, 15), 2.0 * std::pow(0.5, 1.5));
  c.learning_rate.exponential.staircase = true;
  EXPECT_DOUBLE_EQ(lr_at(c, 15), 1.0);

  c.learning_rate.type = "cosine";
  c.learning_rate.cosine.initial_learning_rate = 1.0;
  c.learning_rate.cosine.decay_steps = 100;
  c.learning_rate.cosine.alpha = 0.2;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.0);
  EXPECT_NEAR(lr_at(c, 50), 0.8 * 0.5 + 0.2, 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(c, 100), 0.2);
}

TEST(ScheduleTest, LinearWarmupRisesToTheBaseScheduleAtWarmupSteps) {
  OptimizationConfig c;
  c.learning_rate.type = "polynomial";
  c.learning_rate.polynomial.initial_learning_rate = 1.0;
  c.learning_rate.polynomial.decay_steps = 100;
  c.learning_rate.polynomial.end_learning_rate = 0.0;
  c.warmup.type = "linear";
  c.warmup.linear.warmup_steps = 10;
  c.warmup.linear.warmup_learning_rate = 0.0;
  // The target is the base schedule at step 10 (0.9); the base is evaluated
  // at the raw step afterwards.
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 5), 0.45);
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 0.9);
  EXPECT_DOUBLE_EQ(lr_at(c, 20), 0.8);
  c.warmup.type = "polynomial";
  c.warmup.polynomial.warmup_steps = 10;
  c.warmup.polynomial.power = 2.0;
  EXPECT_DOUBLE_EQ(lr_at(c, 5), 0.9 * 0.25);
}

TEST(ScheduleTest, MissingRequiredValuesNameTheKey) {
  OptimizationConfig c;
  c.learning_rate.type = "cosine";
  try {
    lr_at(c, 0);
    FAIL();
  } catch (const garden::config::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate must be set");
  }
}

}  // namespace
