// Training actions: recovery from a NaN or too-large loss, best-checkpoint
// export, and a checkpoint on SIGTERM that a later run resumes exactly.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "garden/base/logging.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/actions.h"
#include "garden/core/checkpoint.h"
#include "garden/core/controller.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/core/trainer.h"
#include "garden/platform/stop_signals.h"

namespace fs = std::filesystem;

namespace {

using garden::config::Visitor;

// A one-weight regression whose data can be poisoned at one position.
struct ToyModelConfig : garden::config::Config {
  int64_t width = 1;
  void visit(Visitor& v) override { v("width", width, "Input width."); }
};

struct ToyTaskConfig : garden::config::TaskConfigWith<ToyModelConfig> {
  int64_t poison_at = -1;     // batch index whose inputs are replaced
  double poison_value = NAN;  // by this value
  void visit_task_fields(Visitor& v) override {
    v("poison_at", poison_at, "Batch index to poison; -1 for none.");
    v("poison_value", poison_value, "The poison.");
  }
};

class ToyDataset : public garden::Dataset {
 public:
  ToyDataset(int64_t poison_at, double poison_value)
      : poison_at_(poison_at), poison_value_(poison_value) {}
  std::optional<garden::Batch> next() override {
    const auto x = torch::linspace(-1, 1, 8).reshape({8, 1}) + 0.01 * (position_ % 7);
    const auto y = 3 * x + 1;
    garden::Batch batch{{"x", position_ == poison_at_ ? torch::full_like(x, poison_value_) : x},
                        {"y", y}};
    ++position_;
    return batch;
  }
  void reset() override { position_ = 0; }
  nlohmann::json state() const override { return {{"position", position_}}; }
  void restore(const nlohmann::json& s) override { position_ = s.at("position"); }

 private:
  int64_t poison_at_;
  double poison_value_;
  int64_t position_ = 0;
};

class ToyTask : public garden::Task {
 public:
  ToyTask(std::shared_ptr<const ToyTaskConfig> params, std::string dir)
      : Task(params, std::move(dir)), config_(*params) {}
  garden::DatasetPtr build_inputs(const garden::config::DataConfig& params,
                                  const garden::InputContext&) override {
    const bool training = params.is_training.value_or(false);
    return std::make_shared<ToyDataset>(training ? config_.poison_at : -1, config_.poison_value);
  }
  garden::ModelPtr build_model() override {
    return std::make_shared<torch::nn::LinearImpl>(config_.model.width, 1);
  }
  garden::Batch call_model(garden::Model& model, const garden::Batch& inputs, bool) override {
    return {{"y", model.as<torch::nn::LinearImpl>()->forward(inputs.at("x"))}};
  }
  garden::Losses build_losses(const garden::Batch& labels, const garden::Batch& outputs,
                              const at::Tensor&) override {
    return garden::Losses(torch::mse_loss(outputs.at("y"), labels.at("y")));
  }

 private:
  const ToyTaskConfig& config_;
};

std::shared_ptr<garden::config::ExperimentConfig> toy_experiment() {
  auto e = std::make_shared<garden::config::ExperimentConfig>();
  auto task = std::make_shared<ToyTaskConfig>();
  task->train_data.is_training = true;
  // What ToyDataset yields (a batch size must be set to be valid).
  task->train_data.global_batch_size = 8;
  task->validation_data.global_batch_size = 8;
  e->task = task;
  e->trainer.train_steps = 100;
  e->trainer.steps_per_loop = 10;
  e->trainer.summary_interval = 10;
  e->trainer.checkpoint_interval = 10;
  e->trainer.validation_interval = 50;
  e->trainer.validation_steps = 2;
  e->trainer.optimizer_config.optimizer.type = "sgd";
  e->trainer.optimizer_config.learning_rate.constant.learning_rate = 0.1;
  e->runtime.seed = 1;
  return e;
}

class ActionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static bool registered = false;
    if (!registered) {
      garden::register_task<ToyTaskConfig, ToyTask>("test/toy");
      garden::config::register_experiment("test/toy", "regression with injectable bad data",
                                          toy_experiment);
      registered = true;
    }
  }
  void SetUp() override {
    garden::set_quiet(true);
    root_ = fs::path(::testing::TempDir()) /
            ("garden_actions_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override {
    fs::remove_all(root_);
    garden::set_quiet(false);
  }

  garden::Logs run(const std::string& dir, const std::string& overrides,
                   const std::string& experiment = "test/toy", const std::string& mode = "train") {
    auto params = garden::config::get_experiment_config(experiment);
    garden::config::apply_override(*params, overrides);
    garden::finalize_config(*params);
    garden::RunOptions options;
    options.mode = mode;
    options.model_dir = (root_ / dir).string();
    return garden::run_experiment(params, options);
  }

  static at::Tensor weight(const fs::path& checkpoint) {
    return garden::read_checkpoint_file(checkpoint.string()).tensors.at("model/weight");
  }

  fs::path root_;
};

TEST_F(ActionsTest, NanLossWithoutRecoveriesFailsNamingStepAndValue) {
  try {
    run("nan", "task.poison_at=25");
    FAIL() << "expected the run to fail";
  } catch (const garden::Error& e) {
    EXPECT_STREQ(e.what(),
                 "training diverged: training_loss nan at step 30; recovery_max_trials (0) "
                 "recoveries used up");
  }
  // The diverged loop's weights were never checkpointed.
  EXPECT_TRUE(fs::exists(root_ / "nan" / "ckpt-20"));
  EXPECT_FALSE(fs::exists(root_ / "nan" / "ckpt-30"));
  EXPECT_TRUE(torch::isfinite(weight(root_ / "nan" / "ckpt-20")).all().item<bool>());
}

TEST_F(ActionsTest, NanLossIsRecoveredFromTheLastCheckpoint) {
  run("recovered", "task.poison_at=25,trainer.recovery_max_trials=1");
  const auto w = weight(root_ / "recovered" / "ckpt-100");
  EXPECT_TRUE(torch::isfinite(w).all().item<bool>());
  EXPECT_NEAR(w.item<float>(), 3.0f, 0.05f) << "training went on after the recovery";
}

TEST_F(ActionsTest, LossUpperBoundAppliesFromRecoveryBeginSteps) {
  // A batch of huge inputs makes a huge but finite loss.
  const std::string poison = "task.poison_at=45,task.poison_value=1e4,trainer.loss_upper_bound=1e3";
  try {
    run("bound", poison);
    FAIL() << "expected the run to fail";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("at step 50 is above loss_upper_bound 1000"),
              std::string::npos)
        << e.what();
  }
  // Before recovery_begin_steps a large loss is tolerated (only NaN is not).
  EXPECT_NO_THROW(run("late", poison + ",trainer.recovery_begin_steps=60,"
                                       "trainer.optimizer_config.learning_rate.constant."
                                       "learning_rate=0.0"));
}

TEST_F(ActionsTest, BestCheckpointIsExportedOnlyWhenStrictlyBetter) {
  run("best", "trainer.train_steps=10");
  auto params = garden::config::get_experiment_config("test/toy");
  garden::finalize_config(*params);
  auto task = garden::get_task(params->task);
  auto model = task->build_model();
  garden::Trainer trainer(params, task, model, nullptr, garden::TrainerMode::kEvaluate);
  const auto dir = (root_ / "best" / "best_ckpt").string();
  garden::BestCheckpointExporter exporter(dir, "accuracy", "higher");
  auto logs = [](double accuracy) { return garden::Logs{{"accuracy", accuracy}, {"loss", 1.0}}; };
  auto info_step = [&] {
    std::ifstream in(fs::path(dir) / "info.json");
    return nlohmann::json::parse(in).at("best_ckpt_global_step").get<int64_t>();
  };
  exporter.maybe_export_checkpoint(trainer, logs(0.5), 1);
  EXPECT_EQ(info_step(), 1);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "best_ckpt"));
  exporter.maybe_export_checkpoint(trainer, logs(0.4), 2);
  exporter.maybe_export_checkpoint(trainer, logs(0.5), 3);  // equal is not better
  EXPECT_EQ(info_step(), 1);
  exporter.maybe_export_checkpoint(trainer, logs(0.7), 4);
  EXPECT_EQ(info_step(), 4);

  // A restarted run reads info.json and keeps comparing.
  garden::BestCheckpointExporter again(dir, "accuracy", "higher");
  EXPECT_EQ(again.best(), 0.7);
  again.maybe_export_checkpoint(trainer, logs(0.6), 5);
  EXPECT_EQ(info_step(), 4);

  garden::BestCheckpointExporter lower((root_ / "low").string(), "loss", "lower");
  lower.maybe_export_checkpoint(trainer, {{"loss", 2.0}}, 1);
  lower.maybe_export_checkpoint(trainer, {{"loss", 1.0}}, 2);
  EXPECT_EQ(lower.best(), 1.0);
  try {
    lower.maybe_export_checkpoint(trainer, {{"accuracy", 1.0}}, 3);
    FAIL();
  } catch (const garden::Error& e) {
    EXPECT_STREQ(e.what(),
                 "best_checkpoint_eval_metric 'loss' is not in the evaluation logs; they have: "
                 "accuracy");
  }
}

TEST_F(ActionsTest, TrainAndEvalExportsTheBestEvaluation) {
  run("exported",
      "trainer.best_checkpoint_export_subdir=best,trainer.best_checkpoint_eval_metric="
      "validation_loss,trainer.best_checkpoint_metric_comp=lower,trainer.validation_interval=20",
      "test/toy", "train_and_eval");
  std::ifstream in(root_ / "exported" / "best" / "info.json");
  const auto info = nlohmann::json::parse(in);
  // The loss falls steadily, so the last evaluation is the best.
  EXPECT_EQ(info.at("best_ckpt_global_step"), 100);
  EXPECT_TRUE(info.contains("validation_loss"));
  EXPECT_TRUE(fs::exists(root_ / "exported" / "best" / "best_ckpt"));
}

TEST_F(ActionsTest, SigtermWritesACheckpointThatResumesExactly) {
  const std::string common =
      "trainer.steps_per_loop=1000,trainer.summary_interval=1000,"
      "trainer.checkpoint_interval=1000000,trainer.validation_interval=1000000";
  std::thread signaller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(::getpid(), SIGTERM);
  });
  int64_t stopped_at = -1;
  try {
    run("preempted", common + ",trainer.train_steps=100000000");
    FAIL() << "expected Preempted";
  } catch (const garden::Preempted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    const auto latest = garden::latest_checkpoint((root_ / "preempted").string());
    ASSERT_TRUE(latest.has_value());
    stopped_at = garden::CheckpointManager::step_of(*latest);
    EXPECT_NE(std::string(e.what()).find("received SIGTERM at step " + std::to_string(stopped_at) +
                                         "; saved "),
              std::string::npos)
        << e.what();
  }
  signaller.join();
  ASSERT_GT(stopped_at, 0);

  const std::string target = ",trainer.train_steps=" + std::to_string(stopped_at + 50);
  run("preempted", common + target);
  run("straight", common + target);
  const auto name = "ckpt-" + std::to_string(stopped_at + 50);
  EXPECT_TRUE(torch::equal(weight(root_ / "preempted" / name), weight(root_ / "straight" / name)));
}

// A caller that trains in parts (TensorFX's ModelTrainer calls train() once
// per log interval): a stop signal that arrives between two calls saves the
// steps this run made; it is not "before the first step of this run".
TEST_F(ActionsTest, AStopBetweenTwoTrainCallsSavesTheStepsThisRunMade) {
  auto params = garden::config::get_experiment_config("test/toy");
  garden::finalize_config(*params);
  auto task = garden::get_task(params->task);
  auto model = task->build_model();
  std::shared_ptr<garden::optim::Optimizer> optimizer =
      garden::Task::create_optimizer(params->trainer.optimizer_config, params->runtime,
                                     params->task->differential_privacy_config, *model);
  garden::Trainer trainer(params, task, model, optimizer, garden::TrainerMode::kTrain);
  garden::CheckpointManager manager((root_ / "parts").string(), 3);
  garden::ControllerOptions options;
  options.steps_per_loop = 10;
  options.summary_interval = 0;
  options.checkpoint_interval = 1000000;
  options.checkpoint_on_preemption = true;
  options.log_progress = false;
  garden::Controller controller(&trainer, nullptr, &manager, options);
  controller.restore_checkpoint();
  garden::StopSignals::clear();
  garden::GracefulStop graceful;
  controller.train(20, /*checkpoint_at_completion=*/false);
  ::kill(::getpid(), SIGTERM);
  ASSERT_TRUE(garden::StopSignals::wait_for(std::chrono::seconds(10)));
  std::string message = "(no stop)";
  try {
    controller.train(40, /*checkpoint_at_completion=*/false);
  } catch (const garden::Preempted& e) {
    message = e.what();
  }
  garden::StopSignals::clear();
  EXPECT_EQ(message, "received SIGTERM at step 20; saved " +
                         (root_ / "parts" / "ckpt-20").string() +
                         "; run the same command to resume");
  EXPECT_TRUE(fs::exists(root_ / "parts" / "ckpt-20"));
}

// ---- optimizer wrappers through a whole run ---------------------------------

// The validation loss of the toy task with the weights in `checkpoint`.
double toy_validation_loss(const fs::path& checkpoint) {
  auto params = garden::config::get_experiment_config("test/toy");
  garden::finalize_config(*params);
  auto task = garden::get_task(params->task);
  auto model = task->build_model();
  garden::load_model_state(*model, garden::read_checkpoint_file(checkpoint.string()).tensors,
                           "model/", true);
  auto data = task->build_inputs(params->task->validation_data_config(), {});
  garden::Mean loss("loss");
  for (int i = 0; i < 2; ++i) {  // validation_steps 2
    const auto batch = *data->next();
    loss.update(
        task->build_losses(batch, task->inference_step(batch, *model)).total().item<double>());
  }
  return loss.result();
}

TEST_F(ActionsTest, EmaWeightsAreEvaluatedAndCheckpointed) {
  const std::string ema =
      "trainer.optimizer_config.ema={average_decay: 0.9, dynamic_decay: false},"
      "trainer.validation_interval=100";
  const auto logs = run("ema", ema, "test/toy", "train_and_eval");
  const auto live = root_ / "ema" / "ckpt-100";
  const auto averaged = root_ / "ema" / "ema_checkpoints" / "ckpt-100";
  ASSERT_TRUE(fs::exists(averaged));
  EXPECT_FALSE(torch::equal(weight(live), weight(averaged)));
  // The evaluation saw the averages, not the live weights...
  const double evaluated = garden::to_double(logs.at("validation_loss"));
  EXPECT_NEAR(evaluated, toy_validation_loss(averaged), 1e-6);
  EXPECT_GT(std::fabs(evaluated - toy_validation_loss(live)), 1e-6);
  // ...and the live weights were put back: the checkpoint holds them, and
  // the averages travel in it for a resumed run.
  const auto checkpoint = garden::read_checkpoint_file(live.string());
  EXPECT_TRUE(checkpoint.tensors.count("optimizer/ema/weight"));
  EXPECT_TRUE(torch::equal(checkpoint.tensors.at("optimizer/ema/weight"), weight(averaged)));
  // An eval-only run restores the averages and evaluates them the same way.
  const auto again = run("ema", ema, "test/toy", "eval");
  EXPECT_DOUBLE_EQ(garden::to_double(again.at("validation_loss")), evaluated);
}

TEST_F(ActionsTest, Float16LossScalingSkipsAnOverflowingStepAndBacksOff) {
  // Inputs of 1e17 give a loss near 1e35: finite, but times the initial
  // scale 2^15 it overflows float32, so that step's gradients are inf.
  const std::string fp16 =
      "runtime.mixed_precision_dtype=float16,task.poison_at=25,task.poison_value=1e17,"
      "trainer.loss_upper_bound=1e38";
  run("fp16", fp16);
  const auto checkpoint = garden::read_checkpoint_file((root_ / "fp16" / "ckpt-100").string());
  const auto& scale = checkpoint.meta.at("optimizer").at("loss_scale");
  EXPECT_EQ(scale.at("current_scale").get<double>(), 16384.0) << "one back-off from 2^15";
  EXPECT_EQ(scale.at("good_steps").get<int64_t>(), 100 - 26);
  EXPECT_EQ(checkpoint.meta.at("optimizer").at("iterations"), 100)
      << "a skipped step still counts, as in Keras";
  EXPECT_NEAR(weight(root_ / "fp16" / "ckpt-100").item<float>(), 3.0f, 0.05f);

  // Without loss scaling the same batch is applied and ruins the weights.
  EXPECT_THROW(run("fp32", "task.poison_at=25,task.poison_value=1e17"), garden::Error);
}

TEST_F(ActionsTest, DifferentialPrivacyConfigTrainsWithClippedNoisyGradients) {
  run("dp", "task.differential_privacy_config={clipping_norm: 0.5, noise_multiplier: 0.1}");
  const float w = weight(root_ / "dp" / "ckpt-100").item<float>();
  EXPECT_TRUE(std::isfinite(w));
  run("plain", "");
  EXPECT_NE(w, weight(root_ / "plain" / "ckpt-100").item<float>());
}

}  // namespace
