// Optimizer updates and learning-rate schedules against values computed by
// hand (plain double arithmetic, Keras's formulas).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>

#include "garden/optim/lr_schedule.h"
#include "garden/optim/optimizer.h"

namespace {

using garden::config::OptimizationConfig;

// Runs `steps` updates on two scalar parameters with fixed gradients and
// returns their final values.
std::vector<double> run_steps(const OptimizationConfig& config, std::vector<double> start,
                              const std::vector<std::vector<double>>& gradients,
                              std::vector<std::string> names = {"a", "b"}) {
  std::vector<garden::optim::NamedParameter> params;
  for (std::size_t i = 0; i < start.size(); ++i)
    params.push_back({names[i], torch::tensor({start[i]}, torch::kDouble).requires_grad_()});
  auto optimizer = garden::optim::make_optimizer(config, params);
  for (const auto& step : gradients) {
    optimizer->zero_grad();
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i].tensor.mutable_grad() = torch::tensor({step[i]}, torch::kDouble);
    optimizer->step();
  }
  std::vector<double> out;
  for (auto& p : params) out.push_back(p.tensor.item<double>());
  return out;
}

OptimizationConfig constant(const std::string& type, double lr) {
  OptimizationConfig c;
  c.optimizer.type = type;
  c.learning_rate.type = "constant";
  c.learning_rate.constant.learning_rate = lr;
  return c;
}

const std::vector<std::vector<double>> kGradients = {{0.5, -1.0}, {0.25, 2.0}, {-0.75, 0.5}};

TEST(OptimizerTest, PlainSgd) {
  const auto out = run_steps(constant("sgd", 0.1), {1.0, -2.0}, kGradients);
  EXPECT_DOUBLE_EQ(out[0], 1.0 - 0.1 * (0.5 + 0.25 - 0.75));
  EXPECT_DOUBLE_EQ(out[1], -2.0 - 0.1 * (-1.0 + 2.0 + 0.5));
}

TEST(OptimizerTest, SgdWithMomentumAndNesterov) {
  for (bool nesterov : {false, true}) {
    auto config = constant("sgd", 0.1);
    config.optimizer.sgd.momentum = 0.9;
    config.optimizer.sgd.nesterov = nesterov;
    const auto out = run_steps(config, {1.0, -2.0}, kGradients);
    for (int i = 0; i < 2; ++i) {
      double p = i == 0 ? 1.0 : -2.0, v = 0.0;
      for (const auto& g : kGradients) {
        v = 0.9 * v - 0.1 * g[i];
        p += nesterov ? 0.9 * v - 0.1 * g[i] : v;
      }
      EXPECT_NEAR(out[i], p, 1e-15) << "nesterov=" << nesterov << " param " << i;
    }
  }
}

TEST(OptimizerTest, AdamUsesKerasEpsilonPlacement) {
  auto config = constant("adam", 0.01);
  config.optimizer.adam.epsilon = 0.1;  // large, so its placement shows
  const auto out = run_steps(config, {1.0, -2.0}, kGradients);
  for (int i = 0; i < 2; ++i) {
    double p = i == 0 ? 1.0 : -2.0, m = 0, v = 0;
    int t = 0;
    for (const auto& g : kGradients) {
      ++t;
      m = 0.9 * m + 0.1 * g[i];
      v = 0.999 * v + 0.001 * g[i] * g[i];
      const double lr_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      p -= lr_t * m / (std::sqrt(v) + 0.1);
    }
    EXPECT_NEAR(out[i], p, 1e-14) << "param " << i;
  }
}

TEST(OptimizerTest, AdamWeightDecayDecaysOnlySelectedParameters) {
  auto config = constant("adamw", 0.01);
  config.optimizer.adamw.weight_decay_rate = 0.5;
  config.optimizer.adamw.exclude_from_weight_decay = std::vector<std::string>{"bias"};
  config.optimizer.adamw.gradient_clip_norm = 0.0;
  const auto out = run_steps(config, {1.0, -2.0}, kGradients, {"dense.kernel", "dense.bias"});
  for (int i = 0; i < 2; ++i) {
    double p = i == 0 ? 1.0 : -2.0, m = 0, v = 0;
    int t = 0;
    for (const auto& g : kGradients) {
      ++t;
      if (i == 0) p -= 0.01 * 0.5 * p;  // decay before the Adam update
      m = 0.9 * m + 0.1 * g[i];
      v = 0.999 * v + 0.001 * g[i] * g[i];
      const double lr_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      p -= lr_t * m / (std::sqrt(v) + 1e-7);
    }
    EXPECT_NEAR(out[i], p, 1e-14) << "param " << i;
  }
}

TEST(OptimizerTest, GlobalClipnormScalesAllGradientsTogether) {
  auto config = constant("sgd", 1.0);
  config.optimizer.sgd.global_clipnorm = 1.0;
  // Gradient (3, 4) has norm 5: clipped to (0.6, 0.8).
  const auto out = run_steps(config, {0.0, 0.0}, {{3.0, 4.0}});
  EXPECT_NEAR(out[0], -0.6, 1e-15);
  EXPECT_NEAR(out[1], -0.8, 1e-15);
  auto by_value = constant("sgd", 1.0);
  by_value.optimizer.sgd.clipvalue = 0.5;
  const auto clipped = run_steps(by_value, {0.0, 0.0}, {{3.0, -0.25}});
  EXPECT_DOUBLE_EQ(clipped[0], -0.5);
  EXPECT_DOUBLE_EQ(clipped[1], 0.25);
}

TEST(OptimizerTest, StateRoundTripContinuesIdentically) {
  auto config = constant("adam", 0.01);
  std::vector<garden::optim::NamedParameter> a{{"w", torch::ones({3}).requires_grad_()}};
  auto first = garden::optim::make_optimizer(config, a);
  for (int i = 0; i < 3; ++i) {
    a[0].tensor.mutable_grad() = torch::full({3}, 0.1f * (i + 1));
    first->step();
  }
  std::vector<garden::optim::NamedParameter> b{{"w", a[0].tensor.detach().clone().requires_grad_()}};
  auto second = garden::optim::make_optimizer(config, b);
  const auto saved = first->state_tensors();
  std::map<std::string, at::Tensor> slots(saved.begin(), saved.end());
  second->load_state(slots, first->state_meta());
  EXPECT_EQ(second->iterations(), 3);
  a[0].tensor.mutable_grad() = torch::full({3}, -0.2f);
  b[0].tensor.mutable_grad() = torch::full({3}, -0.2f);
  first->step();
  second->step();
  EXPECT_TRUE(torch::equal(a[0].tensor, b[0].tensor));
  slots["x/m"] = torch::zeros({3});
  EXPECT_THROW(second->load_state(slots, first->state_meta()), std::exception);
}

double lr_at(const OptimizationConfig& c, int64_t step) {
  return (*garden::optim::make_schedule(c.learning_rate, c.warmup))(step);
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
