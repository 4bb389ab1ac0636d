// The exponential moving average against Model Garden's decay rule, computed
// by hand in plain double arithmetic.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/optim/ema.h"

namespace {

using garden::config::EMAConfig;
using garden::optim::ExponentialMovingAverage;
using garden::optim::NamedParameter;

// The weights a training run would leave after steps 1, 2, 3, 4.
const std::vector<std::vector<double>> kWeightsAfterStep = {
    {1.0, -2.0}, {1.5, -1.0}, {0.5, 0.0}, {2.0, 3.0}};

std::vector<double> values(const at::Tensor& t) {
  auto flat = t.detach().to(torch::kDouble).contiguous();
  return {flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()};
}

// Runs update(1..4) with the weights set as above and checks the decay and
// the averages after each update against the hand-computed ones.
void expect_average_follows(const EMAConfig& config, const std::vector<double>& expected_decays) {
  std::vector<NamedParameter> params{{"w", torch::zeros({2}, torch::kDouble).requires_grad_()}};
  ExponentialMovingAverage ema(config, params);
  std::vector<double> average = {0.0, 0.0};  // Model Garden's slots start at zero
  for (int64_t step = 1; step <= 4; ++step) {
    const auto& weights = kWeightsAfterStep[step - 1];
    {
      torch::NoGradGuard no_grad;
      params[0].tensor.copy_(torch::tensor(weights, torch::kDouble));
    }
    const double decay = expected_decays[step - 1];
    EXPECT_DOUBLE_EQ(ema.decay(step), decay) << "step " << step;
    ema.update(step);
    for (int k = 0; k < 2; ++k) average[k] -= (1.0 - decay) * (average[k] - weights[k]);
    const auto actual = values(ema.averaged_weights().at("w"));
    for (int k = 0; k < 2; ++k)
      EXPECT_NEAR(actual[k], average[k], 1e-15) << "step " << step << " element " << k;
  }
}

TEST(EmaTest, DynamicDecayGrowsWithTheStep) {
  EMAConfig config;
  EXPECT_EQ(config.name, "ExponentialMovingAverage");
  EXPECT_TRUE(config.trainable_weights_only);
  EXPECT_EQ(config.average_decay, 0.99);
  EXPECT_EQ(config.start_step, 0);
  EXPECT_TRUE(config.dynamic_decay);
  // min(0.99, (1 + s) / (10 + s)) with s = step.
  expect_average_follows(config, {2.0 / 11.0, 3.0 / 12.0, 4.0 / 13.0, 5.0 / 14.0});
  config.average_decay = 0.25;  // the cap takes over from step 3
  expect_average_follows(config, {2.0 / 11.0, 0.25, 0.25, 0.25});
}

TEST(EmaTest, FixedDecayAndStartStep) {
  EMAConfig config;
  config.dynamic_decay = false;
  config.average_decay = 0.9;
  config.start_step = 3;
  // Decay 0 (a plain copy) before start_step, then the fixed decay.
  expect_average_follows(config, {0.0, 0.0, 0.9, 0.9});
  config.dynamic_decay = true;
  // Dynamic from start_step: s = step - 3.
  expect_average_follows(config, {0.0, 0.0, 1.0 / 10.0, 2.0 / 11.0});
}

TEST(EmaTest, SwapTwiceRestoresBoth) {
  std::vector<NamedParameter> params{{"a", torch::tensor({1.0f, 2.0f}).requires_grad_()},
                                     {"b", torch::tensor({-3.0f}).requires_grad_()}};
  EMAConfig config;
  config.dynamic_decay = false;
  config.average_decay = 0.5;
  ExponentialMovingAverage ema(config, params);
  ema.update(1);  // averages: half the weights
  const auto live_a = params[0].tensor.detach().clone();
  const auto average_a = ema.averaged_weights().at("a");
  EXPECT_TRUE(torch::equal(average_a, torch::tensor({0.5f, 1.0f})));

  ema.swap_weights();
  EXPECT_TRUE(torch::equal(params[0].tensor, average_a));
  EXPECT_TRUE(torch::equal(ema.averaged_weights().at("a"), live_a));
  EXPECT_TRUE(params[0].tensor.requires_grad());  // still the model's leaf
  ema.swap_weights();
  EXPECT_TRUE(torch::equal(params[0].tensor, live_a));
  EXPECT_TRUE(torch::equal(params[1].tensor, torch::tensor({-3.0f})));
  EXPECT_TRUE(torch::equal(ema.averaged_weights().at("a"), average_a));
}

TEST(EmaTest, StateRoundTripCopies) {
  std::vector<NamedParameter> params{{"w", torch::tensor({1.0, 2.0}).requires_grad_()}};
  EMAConfig config;
  ExponentialMovingAverage first(config, params);
  first.update(1);
  first.update(2);
  const auto saved = first.state_tensors();
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].first, "w");
  std::map<std::string, at::Tensor> tensors(saved.begin(), saved.end());
  std::map<std::string, at::Tensor> loaded_from;
  for (const auto& [name, tensor] : tensors) loaded_from[name] = tensor.clone();

  ExponentialMovingAverage second(config, params);
  second.load_state(loaded_from);
  EXPECT_TRUE(torch::equal(second.averaged_weights().at("w"), first.averaged_weights().at("w")));
  // A copy, not an alias of the caller's tensor.
  loaded_from["w"].fill_(100.0);
  EXPECT_TRUE(torch::equal(second.averaged_weights().at("w"), first.averaged_weights().at("w")));
  // Both continue identically.
  first.update(3);
  second.update(3);
  EXPECT_TRUE(torch::equal(second.averaged_weights().at("w"), first.averaged_weights().at("w")));

  std::map<std::string, at::Tensor> wrong_shape{{"w", torch::zeros({3})}};
  EXPECT_THROW(second.load_state(wrong_shape), garden::Error);
  std::map<std::string, at::Tensor> unknown{{"w", torch::zeros({2})}, {"v", torch::zeros({2})}};
  EXPECT_THROW(second.load_state(unknown), garden::Error);
  EXPECT_THROW(second.load_state({}), garden::Error);
}

TEST(EmaTest, BuffersOnlyWhenNotTrainableWeightsOnly) {
  std::vector<NamedParameter> params{{"w", torch::ones({2}).requires_grad_()}};
  std::vector<NamedParameter> buffers{{"bn.running_mean", torch::ones({2})},
                                      {"bn.num_batches_tracked", torch::tensor(int64_t{7})}};
  EMAConfig config;
  ExponentialMovingAverage trainable_only(config, params, buffers);
  EXPECT_EQ(trainable_only.averaged_weights().size(), 1u);
  config.trainable_weights_only = false;
  ExponentialMovingAverage all(config, params, buffers);
  const auto averaged = all.averaged_weights();
  EXPECT_EQ(averaged.size(), 2u);  // the integer counter is not averaged
  EXPECT_TRUE(averaged.count("bn.running_mean"));
}

}  // namespace
