// Optimizer updates, clipping and differential privacy against values
// computed by hand (plain double arithmetic, Keras's formulas).
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "device_util.h"
#include "garden/base/error.h"
#include "garden/base/torch_features.h"
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

std::string garden_test_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const garden::Error& e) {
    return e.what();
  }
  return "";
}

const std::vector<std::vector<double>> kGradients = {{0.5, -1.0}, {0.25, 2.0}, {-0.75, 0.5}};

TEST(OptimizerTest, PlainSgd) {
  const auto out = run_steps(constant("sgd", 0.1), {1.0, -2.0}, kGradients);
  EXPECT_DOUBLE_EQ(out[0], 1.0 - 0.1 * (0.5 + 0.25 - 0.75));
  EXPECT_DOUBLE_EQ(out[1], -2.0 - 0.1 * (-1.0 + 2.0 + 0.5));
}

// Layer-wise rates: each parameter's update at the rate times its factor
// (Adam's by the formula with that rate); wrong factors are one line each.
TEST(OptimizerTest, LearningRateScalesMultiplyEachParametersRate) {
  std::vector<garden::optim::NamedParameter> params;
  for (const double start : {1.0, -2.0, 0.5})
    params.push_back({"p" + std::to_string(params.size()),
                      torch::tensor({start}, torch::kDouble).requires_grad_()});
  auto optimizer = garden::optim::make_optimizer(constant("adam", 0.1), params);
  optimizer->set_learning_rate_scales({1.0, 0.25, 0.25});
  const std::vector<std::vector<double>> gradients = {{0.5, -1.0, 2.0}, {0.25, 2.0, -1.0}};
  for (const auto& step : gradients) {
    optimizer->zero_grad();
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i].tensor.mutable_grad() = torch::tensor({step[i]}, torch::kDouble);
    optimizer->step();
  }
  const std::vector<double> starts = {1.0, -2.0, 0.5}, factors = {1.0, 0.25, 0.25};
  for (std::size_t i = 0; i < params.size(); ++i) {
    // Keras's Adam: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t), epsilon outside the root.
    double p = starts[i], m = 0.0, v = 0.0;
    for (std::size_t t = 1; t <= gradients.size(); ++t) {
      const double g = gradients[t - 1][i];
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double lr_t = 0.1 * factors[i] * std::sqrt(1.0 - std::pow(0.999, t)) /
                          (1.0 - std::pow(0.9, t));
      p -= lr_t * m / (std::sqrt(v) + 1e-7);
    }
    EXPECT_NEAR(params[i].tensor.item<double>(), p, 1e-14) << "parameter " << i;
  }
  EXPECT_NE(garden_test_error([&] { optimizer->set_learning_rate_scales({1.0}); })
                .find("1 for 3 parameters"),
            std::string::npos);
  EXPECT_NE(garden_test_error([&] { optimizer->set_learning_rate_scales({1.0, 0.0, 1.0}); })
                .find("'p1'"),
            std::string::npos);
  EXPECT_NE(garden_test_error([&] { optimizer->set_learning_rate_scales({1.0, 1.0, NAN}); })
                .find("'p2'"),
            std::string::npos);
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

// AdamWeightDecay (rate 0.1, lr 0.01, "bias" excluded) over three steps of
// `grads` (grads[step * n + i]) in double: what float32 runs must reach.
at::Tensor adamw_formula(const at::Tensor& start, const std::vector<at::Tensor>& grads,
                         std::size_t i, std::size_t n, bool decays) {
  at::Tensor p = start.to(torch::kDouble), m = torch::zeros_like(p), v = torch::zeros_like(p);
  for (int t = 1; t <= 3; ++t) {
    const at::Tensor g = grads[(t - 1) * n + i].to(torch::kDouble);
    if (decays) p = p - 0.01 * 0.1 * p;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    const double lr_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    p = p - lr_t * m / (v.sqrt() + 1e-7);
  }
  return p.to(torch::kFloat);
}

OptimizationConfig adamw_config() {
  auto config = constant("adamw", 0.01);
  config.optimizer.adamw.weight_decay_rate = 0.1;
  config.optimizer.adamw.exclude_from_weight_decay = std::vector<std::string>{"bias"};
  config.optimizer.adamw.gradient_clip_norm = 0.0;
  return config;
}

// Three AdamWeightDecay steps of float32 parameters made by `make` from
// `start`, on `device`; the parameters after them, on the CPU.
std::vector<at::Tensor> adamw_steps(const std::vector<at::Tensor>& start,
                                    const std::vector<at::Tensor>& grads,
                                    const std::vector<std::string>& names,
                                    const std::function<at::Tensor(const at::Tensor&)>& make,
                                    const c10::Device& device = c10::Device("cpu"),
                                    bool capturable = false) {
  std::vector<garden::optim::NamedParameter> params;
  for (std::size_t i = 0; i < start.size(); ++i)
    params.push_back({names[i], make(start[i].to(device)).requires_grad_()});
  auto optimizer = garden::optim::make_optimizer(adamw_config(), params);
  if (capturable) optimizer->set_capturable(true);
  for (std::size_t step = 0; step < 3; ++step) {
    optimizer->prepare_step();
    optimizer->zero_grad();
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i].tensor.mutable_grad() = grads[step * start.size() + i].to(device);
    optimizer->step();
  }
  std::vector<at::Tensor> out;
  for (auto& p : params) out.push_back(p.tensor.detach().cpu().contiguous());
  return out;
}

struct AdamCase {
  std::vector<at::Tensor> start, grads;
  std::vector<std::string> names = {"dense.kernel", "dense.bias", "other.kernel"};
  // Sizes that end inside a vector, and a parameter of one row.
  AdamCase() {
    torch::manual_seed(3);
    const std::vector<int64_t> rows = {37, 1, 64};
    for (int64_t r : rows) start.push_back(torch::randn({r, 19}));
    for (int step = 0; step < 3; ++step)
      for (int64_t r : rows) grads.push_back(torch::randn({r, 19}));
  }
};

// float32 parameters take Adam's one-pass kernel (contiguous) or LibTorch's
// multi-tensor ops (any other layout). Both against the formulas in double,
// and against each other, with decay excluded for one parameter.
TEST(OptimizerTest, Float32AdamWeightDecayMatchesTheFormulaInEitherLayout) {
  const AdamCase c;
  const auto fused =
      adamw_steps(c.start, c.grads, c.names, [](const at::Tensor& t) { return t.clone(); });
  // transposed: each parameter a non-contiguous view.
  const auto ops = adamw_steps(c.start, c.grads, c.names, [](const at::Tensor& t) {
    at::Tensor p = t.clone().t().contiguous().t();
    EXPECT_EQ(p.is_contiguous(), t.size(0) == 1);
    return p;
  });
  for (std::size_t i = 0; i < c.start.size(); ++i) {
    const at::Tensor expected = adamw_formula(c.start[i], c.grads, i, c.start.size(), i != 1);
    EXPECT_TRUE(torch::allclose(fused[i], expected, 1e-6, 1e-6)) << c.names[i];
    EXPECT_TRUE(torch::allclose(ops[i], expected, 1e-6, 1e-6)) << c.names[i];
    // A few units in the last place apart (multiply-adds contracted or not).
    EXPECT_TRUE(torch::allclose(fused[i], ops[i], 0, 2e-6)) << c.names[i];
    EXPECT_FALSE(torch::equal(fused[i], c.start[i])) << c.names[i];
  }
}

// A parameter of 210,000 floats, which the one-pass kernel splits over the
// threads in blocks of 65,536: the same bits with one thread and two, and
// the formula's values.
TEST(OptimizerTest, Float32AdamGivesTheSameBitsWithAnyThreads) {
  torch::manual_seed(4);
  const std::vector<at::Tensor> start = {torch::randn({700, 300})};
  std::vector<at::Tensor> grads;
  for (int step = 0; step < 3; ++step) grads.push_back(torch::randn({700, 300}));
  const std::vector<std::string> names = {"dense.kernel"};
  const int threads = at::get_num_threads();
  std::vector<std::vector<at::Tensor>> runs;
  for (const int n : {1, 2}) {
    at::set_num_threads(n);
    runs.push_back(adamw_steps(start, grads, names, [](const at::Tensor& t) { return t.clone(); }));
  }
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(runs[0][0], runs[1][0]));
  EXPECT_TRUE(torch::allclose(runs[1][0], adamw_formula(start[0], grads, 0, 1, true), 1e-6, 1e-6));
}

// Device-parameterized: on a GPU the parameters are updated together by the
// multi-tensor ops; the result is the formula's, as on the CPU.
class OptimizerDeviceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerDeviceTest, AdamWeightDecayMatchesTheFormula) {
  const c10::Device device(GetParam());
  if (const auto why = garden_test::unavailable(device); !why.empty()) GTEST_SKIP() << why;
  const AdamCase c;
  const auto out = adamw_steps(
      c.start, c.grads, c.names, [](const at::Tensor& t) { return t.clone(); }, device);
  for (std::size_t i = 0; i < c.start.size(); ++i)
    EXPECT_TRUE(torch::allclose(
        out[i], adamw_formula(c.start[i], c.grads, i, c.start.size(), i != 1), 1e-6, 1e-6))
        << c.names[i] << " on " << device;
}

// Capturable (for CUDA graphs): the rate, the bias correction and the decay
// read from device tensors that prepare_step() writes; the same formula.
TEST_P(OptimizerDeviceTest, CapturableAdamWeightDecayMatchesTheFormula) {
  const c10::Device device(GetParam());
  if (const auto why = garden_test::unavailable(device); !why.empty()) GTEST_SKIP() << why;
#if !GARDEN_HAS_FOREACH_TENSOR_FACTOR
  GTEST_SKIP() << "LibTorch " TORCH_VERSION " has no multi-tensor ops with a tensor factor (2.1)";
#endif
  const AdamCase c;
  const auto out = adamw_steps(
      c.start, c.grads, c.names, [](const at::Tensor& t) { return t.clone(); }, device,
      /*capturable=*/true);
  for (std::size_t i = 0; i < c.start.size(); ++i)
    EXPECT_TRUE(torch::allclose(
        out[i], adamw_formula(c.start[i], c.grads, i, c.start.size(), i != 1), 1e-6, 1e-6))
        << c.names[i] << " on " << device;
}

INSTANTIATE_TEST_SUITE_P(Devices, OptimizerDeviceTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// A table whose only gradients were sparse lookups' holds a sparse .grad
// (kernels::embedding_rows): the step makes it dense and updates as with the
// dense gradient of the same lookups.
TEST(OptimizerTest, ASparseGradientIsMadeDenseAndUpdatesAsTheDenseOne) {
  const at::Tensor ids = torch::tensor({{1, 4, 4}, {0, 1, 4}}, at::kLong);
  const at::Tensor start = torch::randn({6, 3});
  std::vector<at::Tensor> after;
  for (const bool sparse : {true, false}) {
    std::vector<garden::optim::NamedParameter> params = {{"table", start.clone().requires_grad_()}};
    auto optimizer = garden::optim::make_optimizer(constant("adam", 0.1), params);
    (at::embedding(params[0].tensor, ids, -1, false, sparse) * 2).sum().backward();
    EXPECT_EQ(params[0].tensor.grad().is_sparse(), sparse);
    optimizer->step();
    EXPECT_FALSE(params[0].tensor.grad().is_sparse());
    after.push_back(params[0].tensor.detach());
  }
  EXPECT_TRUE(after[0].equal(after[1]));
  EXPECT_FALSE(after[0].equal(start));
}

// As with LibTorch's in-place ops, a graph that saved a parameter before the
// one-pass update refuses to run backward after it.
TEST(OptimizerTest, Float32AdamRaisesTheParameterVersion) {
  std::vector<garden::optim::NamedParameter> params = {{"w", torch::ones({4, 3}).requires_grad_()}};
  auto optimizer = garden::optim::make_optimizer(constant("adam", 0.1), params);
  const at::Tensor loss = (params[0].tensor * params[0].tensor).sum();
  params[0].tensor.mutable_grad() = torch::ones({4, 3});
  const int64_t before = params[0].tensor._version();
  optimizer->step();
  EXPECT_GT(params[0].tensor._version(), before);
  EXPECT_THROW(loss.backward(), c10::Error);
}

std::string capture_refusal(garden::optim::Optimizer& optimizer) {
  try {
    optimizer.set_capturable(true);
  } catch (const garden::Error& e) {
    return e.what();
  }
  return "";
}

TEST(OptimizerTest, OnlyAdamWithoutWrappersCanBeCaptured) {
  std::vector<garden::optim::NamedParameter> params = {{"w", torch::ones({3}).requires_grad_()}};
  const std::string prefix = "this optimizer's step cannot be captured: ";
  for (const char* type : {"sgd", "lamb", "rmsprop", "adagrad"}) {
    auto optimizer = garden::optim::make_optimizer(constant(type, 0.1), params);
    EXPECT_EQ(capture_refusal(*optimizer), prefix + "its update passes numbers to the kernels")
        << type;
    EXPECT_FALSE(optimizer->capturable());
  }
  auto amsgrad = constant("adam", 0.1);
  amsgrad.optimizer.adam.amsgrad = true;
  EXPECT_EQ(capture_refusal(*garden::optim::make_optimizer(amsgrad, params)),
            prefix + "amsgrad's maximum is kept per parameter");
  auto scaled = garden::optim::make_optimizer(constant("adam", 0.1), params);
  scaled->set_loss_scaler(std::make_unique<garden::optim::LossScaler>(
      garden::optim::LossScaler::from_config(std::nullopt)));
  EXPECT_NE(capture_refusal(*scaled).find("loss scaler"), std::string::npos);
  auto noisy = garden::optim::make_optimizer(constant("sgd", 0.1), params,
                                             garden::config::DifferentialPrivacyConfig{});
  EXPECT_NE(capture_refusal(*noisy).find(prefix), std::string::npos);
  auto adam = garden::optim::make_optimizer(constant("adam", 0.1), params);
#if GARDEN_HAS_FOREACH_TENSOR_FACTOR
  EXPECT_EQ(capture_refusal(*adam), "");
  EXPECT_TRUE(adam->capturable());
  // Its numbers come from prepare_step(): a step without one is refused.
  params[0].tensor.mutable_grad() = torch::ones({3});
  EXPECT_THROW(adam->step(), garden::Error);
  adam->prepare_step();
  adam->step();
  EXPECT_TRUE(torch::allclose(params[0].tensor.detach(), torch::full({3}, 0.9), 1e-6, 1e-6));
#else
  EXPECT_NE(capture_refusal(*adam).find("2.1"), std::string::npos);
#endif
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

TEST(OptimizerTest, ClipByGlobalNormReturnsTheNormAndLeavesANonFiniteOneAlone) {
  // (3, 4) and (12): norm 13. Clipped to 6.5: every entry halved; to 20:
  // untouched, bit for bit; an inf anywhere: untouched too (tf's
  // clip_by_global_norm would make them all NaN; the step's loss says why).
  std::vector<at::Tensor> g = {torch::tensor({3.0f, 4.0f}), at::Tensor(), torch::tensor({12.0f})};
  const at::Tensor norm = garden::optim::clip_by_global_norm(g, 6.5);
  EXPECT_EQ(norm.scalar_type(), at::kDouble);
  EXPECT_DOUBLE_EQ(norm.item<double>(), 13.0);
  EXPECT_TRUE(torch::equal(g[0], torch::tensor({1.5f, 2.0f})));
  EXPECT_FALSE(g[1].defined());
  EXPECT_TRUE(torch::equal(g[2], torch::tensor({6.0f})));

  std::vector<at::Tensor> small = {torch::tensor({0.1f, -0.7f}), torch::tensor({1e-30f})};
  const std::vector<at::Tensor> before = {small[0].clone(), small[1].clone()};
  EXPECT_NEAR(garden::optim::clip_by_global_norm(small, 20.0).item<double>(),
              std::sqrt(0.1 * 0.1 + 0.7 * 0.7), 1e-7);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(small[i], before[i])) << i;

  std::vector<at::Tensor> overflow = {torch::tensor({3.0f, INFINITY}), torch::tensor({12.0f})};
  EXPECT_TRUE(std::isinf(garden::optim::clip_by_global_norm(overflow, 1.0).item<double>()));
  EXPECT_TRUE(torch::equal(overflow[1], torch::tensor({12.0f})));
  EXPECT_EQ(overflow[0][0].item<float>(), 3.0f);

  std::vector<at::Tensor> none = {at::Tensor()};
  EXPECT_EQ(garden::optim::clip_by_global_norm(none, 1.0).item<double>(), 0.0);
}

TEST(OptimizerTest, StateRoundTripContinuesIdentically) {
  auto config = constant("adam", 0.01);
  std::vector<garden::optim::NamedParameter> a{{"w", torch::ones({3}).requires_grad_()}};
  auto first = garden::optim::make_optimizer(config, a);
  for (int i = 0; i < 3; ++i) {
    a[0].tensor.mutable_grad() = torch::full({3}, 0.1f * (i + 1));
    first->step();
  }
  std::vector<garden::optim::NamedParameter> b{
      {"w", a[0].tensor.detach().clone().requires_grad_()}};
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

// A restore in the middle of a run (NaN recovery) fills the slots that exist
// in place: a step captured as a CUDA graph keeps updating those tensors.
TEST(OptimizerTest, LoadStateFillsExistingSlotsInPlace) {
  auto config = constant("adam", 0.01);
  std::vector<garden::optim::NamedParameter> a{{"w", torch::ones({3}).requires_grad_()}};
  auto optimizer = garden::optim::make_optimizer(config, a);
  a[0].tensor.mutable_grad() = torch::full({3}, 0.5f);
  optimizer->step();
  const auto saved = optimizer->state_tensors();  // after one step
  std::map<std::string, at::Tensor> slots;
  for (const auto& [name, tensor] : saved) slots[name] = tensor.clone();
  std::map<std::string, const void*> where;
  for (const auto& [name, tensor] : saved) where[name] = tensor.data_ptr();
  optimizer->step();
  optimizer->load_state(slots, {{"iterations", 1}});
  for (const auto& [name, tensor] : optimizer->state_tensors()) {
    EXPECT_EQ(tensor.data_ptr(), where.at(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, slots.at(name))) << name;
    EXPECT_FALSE(tensor.is_same(slots.at(name))) << name << " aliases the caller's tensor";
  }
#if GARDEN_HAS_FOREACH_TENSOR_FACTOR
  // Capturable, a slot the state lacks is zeroed where it is.
  optimizer->set_capturable(true);
  optimizer->load_state({}, {{"iterations", 0}});
  for (const auto& [name, tensor] : optimizer->state_tensors()) {
    EXPECT_EQ(tensor.data_ptr(), where.at(name)) << name;
    EXPECT_EQ(tensor.abs().sum().item<double>(), 0.0) << name;
  }
#endif
}

// ---- vector parameters: norms and per-gradient clipping need more than one element

using Vector = std::vector<double>;

struct VectorRun {
  std::vector<Vector> values;  // final parameter values
  int64_t iterations = 0;
};

// Runs one step per entry of `gradients` (gradients[step][parameter]) on
// double parameters starting at `start`.
VectorRun run_vector_steps(
    const OptimizationConfig& config, const std::vector<Vector>& start,
    const std::vector<std::vector<Vector>>& gradients, const std::vector<std::string>& names,
    const std::optional<garden::config::DifferentialPrivacyConfig>& dp = std::nullopt) {
  std::vector<garden::optim::NamedParameter> params;
  for (std::size_t i = 0; i < start.size(); ++i)
    params.push_back({names[i], torch::tensor(start[i], torch::kDouble).requires_grad_()});
  auto optimizer = garden::optim::make_optimizer(config, params, dp);
  for (const auto& step : gradients) {
    optimizer->zero_grad();
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i].tensor.mutable_grad() = torch::tensor(step[i], torch::kDouble);
    optimizer->step();
  }
  VectorRun run;
  for (auto& p : params) {
    auto flat = p.tensor.detach().contiguous();
    run.values.emplace_back(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  }
  run.iterations = optimizer->iterations();
  return run;
}

double l2_norm(const Vector& x) {
  double sum = 0;
  for (double v : x) sum += v * v;
  return std::sqrt(sum);
}

void expect_near(const Vector& actual, const Vector& expected, double tolerance,
                 const std::string& what) {
  // Non-fatal like its name: a fatal ASSERT would only leave this helper.
  EXPECT_EQ(actual.size(), expected.size()) << what;
  if (actual.size() != expected.size()) return;
  for (std::size_t k = 0; k < actual.size(); ++k)
    EXPECT_NEAR(actual[k], expected[k], tolerance) << what << " element " << k;
}

// A kernel and a bias, each of two elements, over three steps.
const std::vector<Vector> kStart = {{0.5, -1.5}, {0.0, 0.0}};
const std::vector<std::vector<Vector>> kVectorGradients = {
    {{0.3, -0.2}, {1.0, 0.5}}, {{-0.1, 0.4}, {0.25, -0.75}}, {{0.2, 0.2}, {-0.5, 1.0}}};
const std::vector<std::string> kNames = {"dense.kernel", "dense.bias"};

// LAMB by hand: Adam-style moments with bias correction, decay added to the
// update, then the trust ratio ||p|| / ||update||.
std::vector<Vector> lamb_by_hand(double lr, double weight_decay, std::vector<bool> decays,
                                 std::vector<bool> adapts) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-6;
  std::vector<Vector> p = kStart, m(2, Vector(2, 0.0)), v(2, Vector(2, 0.0));
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < 2; ++i) {
      Vector update(2);
      for (int k = 0; k < 2; ++k) {
        const double g = kVectorGradients[t - 1][i][k];
        m[i][k] = b1 * m[i][k] + (1 - b1) * g;
        v[i][k] = b2 * v[i][k] + (1 - b2) * g * g;
        const double m_hat = m[i][k] / (1 - std::pow(b1, t));
        const double v_hat = v[i][k] / (1 - std::pow(b2, t));
        update[k] = m_hat / (std::sqrt(v_hat) + eps);
        if (decays[i]) update[k] += weight_decay * p[i][k];
      }
      double ratio = 1.0;
      const double w_norm = l2_norm(p[i]), u_norm = l2_norm(update);
      if (adapts[i] && w_norm > 0 && u_norm > 0) ratio = w_norm / u_norm;
      for (int k = 0; k < 2; ++k) p[i][k] -= lr * ratio * update[k];
    }
  }
  return p;
}

TEST(OptimizerTest, LambAppliesTheTrustRatioExceptWhereExcluded) {
  auto config = constant("lamb", 0.01);
  config.optimizer.lamb.weight_decay_rate = 0.1;
  config.optimizer.lamb.exclude_from_weight_decay = std::vector<std::string>{"bias"};
  // exclude_from_layer_adaptation unset: it falls back to the weight-decay
  // exclusions, so the bias gets neither decay nor a trust ratio.
  auto run = run_vector_steps(config, kStart, kVectorGradients, kNames);
  auto expected = lamb_by_hand(0.01, 0.1, {true, false}, {true, false});
  expect_near(run.values[0], expected[0], 1e-14, "kernel");
  expect_near(run.values[1], expected[1], 1e-14, "bias");

  // Explicit layer-adaptation exclusions replace the fallback. The bias
  // starts at zero: its first trust ratio is 1 (||p|| = 0), later ones are not.
  config.optimizer.lamb.exclude_from_layer_adaptation = std::vector<std::string>{"kernel"};
  run = run_vector_steps(config, kStart, kVectorGradients, kNames);
  expected = lamb_by_hand(0.01, 0.1, {true, false}, {false, true});
  expect_near(run.values[0], expected[0], 1e-14, "kernel, no adaptation");
  expect_near(run.values[1], expected[1], 1e-14, "bias, adapted");
  // The trust ratio matters: without it the bias would end elsewhere.
  const auto unadapted = lamb_by_hand(0.01, 0.1, {true, false}, {false, false});
  EXPECT_GT(std::abs(run.values[1][0] - unadapted[1][0]), 1e-4);
}

// RMSprop by hand, with Keras's two epsilon placements.
std::vector<Vector> rmsprop_by_hand(double lr, double rho, double momentum, double eps,
                                    bool centered) {
  std::vector<Vector> p = kStart, rms(2, Vector(2, 0.0)), mg = rms, mom = rms;
  for (const auto& step : kVectorGradients)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k) {
        const double g = step[i][k];
        rms[i][k] = rho * rms[i][k] + (1 - rho) * g * g;
        double denominator = rms[i][k];
        if (centered) {
          mg[i][k] = rho * mg[i][k] + (1 - rho) * g;
          denominator -= mg[i][k] * mg[i][k];
        }
        if (momentum > 0) {
          mom[i][k] = momentum * mom[i][k] + lr * g / std::sqrt(denominator + eps);
          p[i][k] -= mom[i][k];
        } else {
          p[i][k] -= lr * g / (std::sqrt(denominator) + eps);
        }
      }
  return p;
}

TEST(OptimizerTest, RmspropPlacesEpsilonLikeKeras) {
  for (const double momentum : {0.0, 0.9}) {
    for (const bool centered : {false, true}) {
      auto config = constant("rmsprop", 0.01);
      config.optimizer.rmsprop.momentum = momentum;
      config.optimizer.rmsprop.centered = centered;
      config.optimizer.rmsprop.epsilon = 0.1;  // large, so its placement shows
      const auto run = run_vector_steps(config, kStart, kVectorGradients, kNames);
      const auto expected = rmsprop_by_hand(0.01, 0.9, momentum, 0.1, centered);
      const std::string what =
          "momentum=" + std::to_string(momentum) + " centered=" + std::to_string(centered);
      expect_near(run.values[0], expected[0], 1e-14, what + " kernel");
      expect_near(run.values[1], expected[1], 1e-14, what + " bias");
    }
  }
}

TEST(OptimizerTest, AdagradStartsFromTheInitialAccumulator) {
  auto config = constant("adagrad", 0.1);
  config.optimizer.adagrad.epsilon = 0.1;
  EXPECT_EQ(config.optimizer.adagrad.initial_accumulator_value, 0.1);
  const auto run = run_vector_steps(config, kStart, kVectorGradients, kNames);
  for (int i = 0; i < 2; ++i) {
    Vector p = kStart[i], accumulator(2, 0.1);
    for (const auto& step : kVectorGradients)
      for (int k = 0; k < 2; ++k) {
        accumulator[k] += step[i][k] * step[i][k];
        p[k] -= 0.1 * step[i][k] / (std::sqrt(accumulator[k]) + 0.1);
      }
    expect_near(run.values[i], p, 1e-14, kNames[i]);
  }
}

TEST(OptimizerTest, ClippingFollowsKerasOrder) {
  // Keras clips by value, then by norm: (3, 4) -> (2, 2) -> (2, 2) / sqrt(8).
  auto config = constant("sgd", 1.0);
  config.optimizer.sgd.clipvalue = 2.0;
  config.optimizer.sgd.clipnorm = 1.0;
  const auto run = run_vector_steps(config, {{0.0, 0.0}}, {{{3.0, 4.0}}}, {"w"});
  expect_near(run.values[0], {-2.0 / std::sqrt(8.0), -2.0 / std::sqrt(8.0)}, 1e-15, "w");

  // AdamWeightDecay's gradient_clip_norm comes before Keras's clipvalue.
  auto adamw = constant("adamw", 0.01);
  adamw.optimizer.adamw.gradient_clip_norm = 1.0;
  adamw.optimizer.adamw.clipvalue = 0.7;
  adamw.optimizer.adamw.epsilon = 0.1;
  const auto adamw_run = run_vector_steps(adamw, {{0.0}, {0.0}}, {{{3.0}, {4.0}}}, {"a", "b"});
  const Vector clipped = {0.6, 0.7};  // (0.6, 0.8) by global norm, then 0.8 -> 0.7
  for (int i = 0; i < 2; ++i) {
    const double m = 0.1 * clipped[i], v = 0.001 * clipped[i] * clipped[i];
    const double lr_t = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
    EXPECT_NEAR(adamw_run.values[i][0], -lr_t * m / (std::sqrt(v) + 0.1), 1e-15) << i;
  }
}

TEST(OptimizerTest, ClipnormScalesEachGradientByItsOwnNorm) {
  // Keras clipnorm: (3, 4) has norm 5 -> (0.6, 0.8); (0.3) is under 1, kept.
  auto config = constant("sgd", 1.0);
  config.optimizer.sgd.clipnorm = 1.0;
  const auto run = run_vector_steps(config, {{0.0, 0.0}, {0.0}}, {{{3.0, 4.0}, {0.3}}}, {"a", "b"});
  expect_near(run.values[0], {-0.6, -0.8}, 1e-15, "a");
  expect_near(run.values[1], {-0.3}, 1e-15, "b");
}

TEST(OptimizerTest, KerasRefusesConflictingClipOptions) {
  auto config = constant("rmsprop", 0.1);
  config.optimizer.rmsprop.clipnorm = 1.0;
  config.optimizer.rmsprop.global_clipnorm = 1.0;
  std::vector<garden::optim::NamedParameter> params{{"w", torch::zeros({2}).requires_grad_()}};
  EXPECT_THROW(garden::optim::make_optimizer(config, params), garden::config::ConfigError);
  config.optimizer.rmsprop.global_clipnorm.reset();
  EXPECT_NO_THROW(garden::optim::make_optimizer(config, params));
  // Differential privacy brings its own clipping; Keras refuses both.
  EXPECT_THROW(
      garden::optim::make_optimizer(config, params, garden::config::DifferentialPrivacyConfig{}),
      garden::config::ConfigError);
}

TEST(OptimizerTest, SkipStepCountsTheIterationOnly) {
  std::vector<garden::optim::NamedParameter> params{{"w", torch::ones({2}).requires_grad_()}};
  auto optimizer = garden::optim::make_optimizer(constant("sgd", 0.1), params);
  params[0].tensor.mutable_grad() = torch::ones({2});
  optimizer->skip_step();
  EXPECT_EQ(optimizer->iterations(), 1);
  EXPECT_TRUE(torch::equal(params[0].tensor, torch::ones({2})));
}

// ---- differential privacy (Model Garden's per-batch clip and noise)

TEST(DifferentialPrivacyTest, WithoutNoiseItIsClipByGlobalNormSgd) {
  garden::config::DifferentialPrivacyConfig dp;
  dp.clipping_norm = 1.0;
  dp.noise_multiplier = 0.0;
  const auto run = run_vector_steps(constant("sgd", 0.1), kStart, kVectorGradients, kNames, dp);
  std::vector<Vector> p = kStart;
  for (const auto& step : kVectorGradients) {
    double sum_squares = 0;
    for (const auto& g : step)
      for (double x : g) sum_squares += x * x;
    const double norm = std::sqrt(sum_squares);
    const double scale = norm > 1.0 ? 1.0 / norm : 1.0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k) p[i][k] -= 0.1 * step[i][k] * scale;
  }
  expect_near(run.values[0], p[0], 1e-15, "kernel");
  expect_near(run.values[1], p[1], 1e-15, "bias");
}

TEST(DifferentialPrivacyTest, NoiseIsReproducibleAndHasTheConfiguredScale) {
  garden::config::DifferentialPrivacyConfig dp;
  dp.clipping_norm = 2.0;
  dp.noise_multiplier = 0.5;  // stddev 1.0
  const auto config = constant("sgd", 1.0);
  // One large parameter with a zero gradient: after one step at lr 1 it
  // holds minus the noise.
  const int64_t n = 200000;
  auto noise_after_step = [&](uint64_t seed) {
    torch::manual_seed(seed);
    std::vector<garden::optim::NamedParameter> params{
        {"w", torch::zeros({n}, torch::kFloat).requires_grad_()}};
    auto optimizer = garden::optim::make_optimizer(config, params, dp);
    params[0].tensor.mutable_grad() = torch::zeros({n}, torch::kFloat);
    optimizer->step();
    return params[0].tensor.detach().neg();
  };
  const at::Tensor first = noise_after_step(42);
  EXPECT_TRUE(torch::equal(first, noise_after_step(42)));
  EXPECT_FALSE(torch::equal(first, noise_after_step(43)));
  // The sample std of 200000 normal draws is within about 0.0016 of the
  // true one (one standard error); allow ten.
  EXPECT_NEAR(first.to(torch::kDouble).std().item<double>(), 2.0 * 0.5, 0.016);
  EXPECT_NEAR(first.to(torch::kDouble).mean().item<double>(), 0.0, 0.023);
}

}  // namespace
