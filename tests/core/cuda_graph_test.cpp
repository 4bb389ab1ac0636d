// CUDA graphs of the training step (garden/core/cuda_graph.h,
// runtime.cuda_graphs): what every build refuses, and, on a GPU, that
// replayed steps read their new inputs, keep updating state in place, draw
// new dropout masks, and end where eager steps end.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_util.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/config.h"
#include "garden/config/yaml_io.h"
#include "garden/core/cuda_graph.h"
#include "garden/core/metrics.h"
#include "garden/core/runtime.h"
#include "garden/core/trainer.h"
#include "toy_task.h"

namespace {

const c10::Device kCuda("cuda");

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(StepGraphsTest, ACpuDeviceIsRefusedWithOneLine) {
  const std::string what = what_of([] { garden::StepGraphs graphs(c10::Device("cpu")); });
  EXPECT_NE(what.find("cpu"), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

TEST(StepGraphsTest, ABuildWithoutThemSaysWhatItNeeds) {
  if (garden::StepGraphs::available()) GTEST_SKIP() << "this build has CUDA graphs";
  const std::string what = what_of([] { garden::StepGraphs graphs(kCuda); });
  EXPECT_NE(what.find("CUDA LibTorch 2.1"), std::string::npos) << what;
}

TEST(MetricStateTest, ResetKeepsTheSameTensors) {
  garden::MeanAbsoluteError metric("mae", garden::MetricInputs{"y", "p", ""});
  metric.update_state(torch::ones({3}), torch::zeros({3}));
  std::vector<const void*> before;
  for (const auto& v : metric.variables()) before.push_back(v.value.data_ptr());
  metric.reset();
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(metric.variables()[i].value.data_ptr(), before[i]) << metric.variables()[i].name;
    EXPECT_EQ(metric.variables()[i].value.item<double>(), metric.variables()[i].initial_value);
  }
}

class CudaGraphTrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { garden_test::register_toy_task(); }
  void SetUp() override { garden::set_quiet(true); }
  void TearDown() override { garden::set_quiet(false); }
  static std::shared_ptr<garden::config::ExperimentConfig> experiment(const std::string& overrides) {
    auto params = garden::config::get_experiment_config("test/core_toy");
    garden::config::apply_override(*params, overrides);
    garden::finalize_config(*params);
    return params;
  }
  // The Trainer's constructor's error with `overrides` ("" when none).
  static std::string refusal(const std::string& overrides) {
    auto params = experiment(overrides);
    auto task = garden::get_task(params->task);
    auto model = task->build_model();
    std::shared_ptr<garden::optim::Optimizer> optimizer =
        garden::Task::create_optimizer(params->trainer.optimizer_config, params->runtime,
                                       params->task->differential_privacy_config, *model);
    return what_of([&] { garden::Trainer trainer(params, task, model, optimizer, garden::TrainerMode::kTrain); });
  }
};

TEST_F(CudaGraphTrainerTest, WhatCannotBeCapturedIsRefusedAtStart) {
  std::string what = refusal("runtime.cuda_graphs=true");
  EXPECT_NE(what.find("runtime.cuda_graphs: needs runtime.device=cuda"), std::string::npos) << what;
  if (!torch::cuda::is_available()) return;  // the rest needs a CUDA device
  what = refusal("runtime.cuda_graphs=true,runtime.device=cuda");  // the toy's sgd
  EXPECT_NE(what.find("runtime.cuda_graphs: this optimizer's step cannot be captured"),
            std::string::npos)
      << what;
  what = refusal(
      "runtime.cuda_graphs=true,runtime.device=cuda,trainer.optimizer_config.optimizer.type=adam,"
      "trainer.gradient_accumulation_steps=2");
  EXPECT_NE(what.find("gradient_accumulation_steps"), std::string::npos) << what;
}

// ---- on a GPU ---------------------------------------------------------------

TEST(StepGraphsTest, ReplaysReadNewInputsPerShapeAndUpdateStateInPlace) {
  if (const auto why = garden_test::unavailable(kCuda); !why.empty()) GTEST_SKIP() << why;
  const auto cuda = torch::TensorOptions().device(kCuda);
  at::Tensor state = torch::zeros({4}, cuda);
  at::Tensor expected = torch::zeros({4});
  garden::StepGraphs graphs(kCuda, /*warmup=*/1);
  int host_runs = 0;
  const garden::StepGraphs::Step step = [&](const std::vector<at::Tensor>& in) {
    ++host_runs;
    state.add_(in[0].sum(0));
    return std::vector<at::Tensor>{state * 2};
  };
  torch::manual_seed(5);
  for (int i = 0; i < 12; ++i) {
    // Two shapes, alternating, new values every time.
    const at::Tensor x = torch::randn({i % 2 == 0 ? 2 : 3, 4});
    expected += x.sum(0);
    const auto result = graphs.run({x.to(kCuda)}, step);
    EXPECT_EQ(result.replayed, i >= 4) << i;
    ASSERT_TRUE(torch::allclose(result.outputs[0].cpu(), expected * 2, 1e-5, 1e-5)) << i;
  }
  EXPECT_EQ(graphs.graphs(), 2);
  EXPECT_EQ(graphs.replays(), 10);  // the two capturing runs and eight replays
  EXPECT_EQ(host_runs, 4);          // per shape: one eager run, one capture
  EXPECT_TRUE(torch::allclose(state.cpu(), expected, 1e-5, 1e-5));
}

TEST(StepGraphsTest, DropoutDrawsNewMasksAtEachReplay) {
  if (const auto why = garden_test::unavailable(kCuda); !why.empty()) GTEST_SKIP() << why;
  const at::Tensor x = torch::ones({256}, torch::TensorOptions().device(kCuda));
  garden::StepGraphs graphs(kCuda);
  std::vector<at::Tensor> masks;
  for (int i = 0; i < 6; ++i) {
    const auto result = graphs.run(
        {x}, [](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{at::dropout(in[0], 0.5, /*train=*/true)};
        });
    masks.push_back(result.outputs[0].cpu().clone());
  }
  for (int i = 3; i < 6; ++i) {
    EXPECT_FALSE(torch::equal(masks[i], masks[i - 1])) << "replay " << i;
    const double kept = (masks[i] > 0).sum().item<double>();
    EXPECT_GT(kept, 80);
    EXPECT_LT(kept, 176);
  }
}

// The toy task through the Trainer with AdamW (a warmup schedule, so the
// rate changes every step, and global-norm clipping): eight steps captured
// and replayed end where eight eager steps on the GPU end, with the same
// logs and metric; the replays wait for nothing.
TEST_F(CudaGraphTrainerTest, ReplayedTrainerStepsEndWhereEagerStepsEnd) {
  if (const auto why = garden_test::unavailable(kCuda); !why.empty()) GTEST_SKIP() << why;
  const auto train = [&](bool graphs) {
    auto params = experiment(
        std::string("runtime.device=cuda,trainer.optimizer_config.optimizer.type=adamw,"
                    "trainer.optimizer_config.optimizer.adamw.weight_decay_rate=0.01,"
                    "trainer.optimizer_config.optimizer.adamw.global_clipnorm=0.5,"
                    "trainer.optimizer_config.learning_rate.constant.learning_rate=0.05,"
                    "trainer.optimizer_config.warmup.type=linear,"
                    "trainer.optimizer_config.warmup.linear.warmup_steps=5") +
        (graphs ? ",runtime.cuda_graphs=true" : ""));
    auto task = garden::get_task(params->task);
    torch::manual_seed(11);
    auto model = task->build_model();
    model->to(kCuda);
    std::shared_ptr<garden::optim::Optimizer> optimizer =
        garden::Task::create_optimizer(params->trainer.optimizer_config, params->runtime,
                                       params->task->differential_privacy_config, *model);
    garden::Trainer trainer(params, task, model, optimizer, garden::TrainerMode::kTrain);
    trainer.train_loop_begin();
    for (int i = 0; i < 8; ++i) {
      std::optional<garden_test::NoHostWait> guard;
      if (i >= 4) guard.emplace(kCuda);  // after the capture
      trainer.train_step(trainer.next_train_inputs());
    }
    garden_test::DeviceRun run;
    run.logs = trainer.train_loop_end();
    EXPECT_EQ(optimizer->iterations(), 8);
    for (const auto& [name, tensor] : garden::model_state(*model))
      run.weights[name] = tensor.detach().cpu();
    return run;
  };
  const auto graphed = train(true);
  const auto eager = train(false);
  for (const auto& [name, tensor] : eager.weights)
    EXPECT_TRUE(torch::allclose(graphed.weights.at(name), tensor, 1e-5, 1e-6))
        << name << " differs by " << (graphed.weights.at(name) - tensor).abs().max().item<double>();
  for (const char* key : {"training_loss", "mean_absolute_error"}) {
    const double a = garden::to_double(graphed.logs.at(key));
    const double b = garden::to_double(eager.logs.at(key));
    EXPECT_NEAR(a, b, 1e-5 * std::abs(b)) << key;
  }
}

}  // namespace
