// The step belongs to the framework, the loss to the task: named loss parts
// reach the logs and the event files, validation losses are weighted by what
// they average, metrics read their inputs by name and merge, an init
// checkpoint maps names, and optimizers and schedules come from registries a
// user's project can add to.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "device_util.h"
#include "event_files.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/core/trainer.h"
#include "garden/optim/lr_schedule.h"
#include "garden/optim/optimizer.h"
#include "toy_task.h"

namespace fs = std::filesystem;

namespace {

class StepTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { garden_test::register_toy_task(); }
  void SetUp() override {
    garden::set_quiet(true);
    root_ = fs::path(::testing::TempDir()) /
            ("garden_step_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override {
    garden::set_quiet(false);
    fs::remove_all(root_);
  }
  static std::shared_ptr<garden::config::ExperimentConfig> experiment(
      const std::string& overrides) {
    auto params = garden::config::get_experiment_config("test/core_toy");
    if (!overrides.empty()) garden::config::apply_override(*params, overrides);
    garden::finalize_config(*params);
    return params;
  }
  garden::Logs run(const std::string& mode, const std::string& dir, const std::string& overrides) {
    garden::RunOptions options;
    options.mode = mode;
    options.model_dir = (root_ / dir).string();
    return garden::run_experiment(experiment(overrides), options);
  }
  fs::path root_;
};

double value(const garden::Logs& logs, const std::string& key) {
  const auto it = logs.find(key);
  if (it == logs.end()) throw std::runtime_error("no log '" + key + "'");
  return garden::to_double(it->second);
}

TEST_F(StepTest, ThreeNamedLossPartsReachTheLogsAndTheEventFiles) {
  const auto logs = run("train_and_eval", "three", "task.three_parts=true");
  using garden_test::events::scalars_in;
  const auto train = scalars_in(root_ / "three" / "train");
  const auto validation = scalars_in(root_ / "three" / "validation");
  for (const char* part : {"mse", "mae", "weight_penalty"}) {
    ASSERT_TRUE(train.count(part)) << part << " is missing from the training summaries";
    EXPECT_EQ(train.at(part).size(), 4u) << part << ": one value per loop of 10 steps";
    ASSERT_TRUE(validation.count(part)) << part << " is missing from the validation summaries";
    EXPECT_EQ(validation.at(part).size(), 2u) << part << ": one value per evaluation";
  }
  ASSERT_TRUE(train.count("training_loss"));
  ASSERT_TRUE(validation.count("validation_loss"));
  // The total is the weighted sum of its parts.
  EXPECT_NEAR(value(logs, "validation_loss"),
              value(logs, "mse") + 0.5 * value(logs, "mae") + 0.01 * value(logs, "weight_penalty"),
              1e-6);
  EXPECT_FLOAT_EQ(validation.at("mse").at(40), static_cast<float>(value(logs, "mse")));
  // Each training loop's total is the mean of its steps' totals; the parts
  // are read back from the same loop.
  const int64_t step = 40;
  EXPECT_NEAR(train.at("training_loss").at(step),
              train.at("mse").at(step) + 0.5 * train.at("mae").at(step) +
                  0.01 * train.at("weight_penalty").at(step),
              1e-5);
}

TEST_F(StepTest, ALoopLogsTheMeanOfItsStepsValues) {
  // The steps' values are kept where they were computed and read once per
  // loop: a loop of 10 steps logs the mean of what 10 loops of one step
  // log, part by part, for the same training.
  const std::string common = "task.three_parts=true,trainer.train_steps=20,";
  run("train", "by_one", common + "trainer.steps_per_loop=1,trainer.summary_interval=1");
  run("train", "by_ten", common + "trainer.steps_per_loop=10,trainer.summary_interval=10");
  using garden_test::events::scalars_in;
  const auto one = scalars_in(root_ / "by_one" / "train");
  const auto ten = scalars_in(root_ / "by_ten" / "train");
  for (const char* key : {"training_loss", "mse", "mae", "weight_penalty"}) {
    ASSERT_TRUE(one.count(key) && ten.count(key)) << key;
    ASSERT_EQ(one.at(key).size(), 20u) << key;
    ASSERT_EQ(ten.at(key).size(), 2u) << key;
    for (const int64_t end : {10, 20}) {
      double sum = 0.0;
      for (int64_t step = end - 9; step <= end; ++step) sum += one.at(key).at(step);
      EXPECT_NEAR(ten.at(key).at(end), sum / 10.0, 1e-6 * std::abs(sum / 10.0))
          << key << " " << end;
    }
    // The steps differ, so a loop that logged one of them would be caught.
    EXPECT_NE(one.at(key).at(1), one.at(key).at(10)) << key;
  }
}

TEST_F(StepTest, ValidationLossIsWeightedByWhatItAveragesNotByBatches) {
  // 10 validation rows: batches of 4 give 4 + 4 + 2 rows, whose mean of
  // batch means differs from the mean over rows; batches of 10 give one.
  run("train", "m", "task.three_parts=true");
  const auto by_4 =
      run("eval", "m", "task.three_parts=true,task.validation_data.global_batch_size=4");
  const auto by_10 =
      run("eval", "m", "task.three_parts=true,task.validation_data.global_batch_size=10");
  const auto by_3 =
      run("eval", "m", "task.three_parts=true,task.validation_data.global_batch_size=3");
  for (const char* key :
       {"validation_loss", "mse", "mae", "weight_penalty", "mean_absolute_error"}) {
    EXPECT_NEAR(value(by_4, key), value(by_10, key), 1e-6 * std::abs(value(by_10, key))) << key;
    EXPECT_NEAR(value(by_3, key), value(by_10, key), 1e-6 * std::abs(value(by_10, key))) << key;
  }
  // The guard: the batch means of 4 + 4 + 2 rows do differ from the rows' mean.
  auto task = garden::get_task(experiment("task.three_parts=true")->task);
  auto model = task->build_model();
  garden::load_model_state(*model,
                           garden::read_checkpoint_file((root_ / "m" / "ckpt-40").string()).tensors,
                           "model/", true);
  auto params = experiment("task.three_parts=true");
  auto data = task->build_inputs(params->task->validation_data_config(), {});
  double sum_of_means = 0;
  int batches = 0;
  while (auto batch = data->next()) {
    sum_of_means += task->build_losses(*batch, task->inference_step(*batch, *model))
                        .parts()[0]
                        .mean.item<double>();
    ++batches;
  }
  ASSERT_EQ(batches, 3);
  EXPECT_GT(std::abs(sum_of_means / batches - value(by_10, "mse")), 1e-4);
}

// Device-parameterized, as CTranslate2's tests are: the CPU always, CUDA
// when a GPU is present (skipped with a message otherwise).
class StepDeviceTest : public StepTest, public ::testing::WithParamInterface<std::string> {
 protected:
  using Run = garden_test::DeviceRun;
  // One loop of `steps` steps of the toy task, clipped by global norm and
  // accumulated over two halves of each batch, on `device`, no host wait
  // after the first step (which makes what is made once: the metrics' state
  // on the device, the libraries' handles). The loss has one part: an
  // accumulated loss of several parts reads its counts to the host once per
  // step, by design (gpu.md).
  static Run train_on(const c10::Device& device, int steps, bool clip = true) {
    auto params =
        experiment(std::string("trainer.gradient_accumulation_steps=2,") +
                   (clip ? "trainer.optimizer_config.optimizer.sgd.global_clipnorm=0.05," : "") +
                   "runtime.device=" + device.str());
    return garden_test::train_loop_on(device, params, garden::get_task(params->task), steps, 7);
  }
};

TEST_P(StepDeviceTest, StepsWaitForNothingAndEndWhereTheCpuEnds) {
  const c10::Device device(GetParam());
  if (const auto why = garden_test::unavailable(device); !why.empty()) GTEST_SKIP() << why;
  const Run here = train_on(device, 6);
  const Run cpu = train_on(c10::Device("cpu"), 6);
  ASSERT_EQ(here.weights.size(), 4u);
  for (const auto& [name, tensor] : cpu.weights)
    EXPECT_TRUE(torch::allclose(here.weights.at(name), tensor, 1e-5, 1e-6))
        << name << " on " << device << " differs by "
        << (here.weights.at(name) - tensor).abs().max().item<double>();
  for (const char* key : {"training_loss", "mean_absolute_error"})
    EXPECT_NEAR(value(here.logs, key), value(cpu.logs, key), 1e-5 * std::abs(value(cpu.logs, key)))
        << key << " on " << device;
  // The clipping took effect: without it the weights end elsewhere.
  const Run unclipped = train_on(c10::Device("cpu"), 6, /*clip=*/false);
  EXPECT_FALSE(torch::allclose(unclipped.weights.at("head.weight"), cpu.weights.at("head.weight"),
                               1e-3, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Devices, StepDeviceTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_F(StepTest, AnEvaluationThatSeesNoBatchFailsAtStart) {
  try {
    run("train_and_eval", "empty", "task.validation_rows=0");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gives no batch"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root_ / "empty")) << "a run that failed at start leaves no model_dir";
}

TEST_F(StepTest, AMisspelledBestCheckpointMetricIsRefusedAtStart) {
  try {
    run("train_and_eval", "best",
        "trainer.best_checkpoint_export_subdir=best,trainer.best_checkpoint_eval_metric=mean_"
        "absolut_error,"
        "trainer.best_checkpoint_metric_comp=lower");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("did you mean 'mean_absolute_error'"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(root_ / "best"));
  // A loss part is a valid choice too.
  run("train_and_eval", "part",
      "task.three_parts=true,trainer.best_checkpoint_export_subdir=best,"
      "trainer.best_checkpoint_eval_metric=mae,trainer.best_checkpoint_metric_comp=lower");
  EXPECT_TRUE(fs::exists(root_ / "part" / "best" / "best_ckpt"));
}

// ---- metrics ----------------------------------------------------------------

template <class MetricT>
void expect_halves_merge_into_the_whole(const at::Tensor& y_true, const at::Tensor& y_pred,
                                        const at::Tensor& weight) {
  MetricT whole("m"), first("m"), second("m");
  const int64_t n = y_true.size(0), half = n / 2;
  whole.update_state(y_true, y_pred, weight);
  first.update_state(y_true.slice(0, 0, half), y_pred.slice(0, 0, half),
                     weight.defined() ? weight.slice(0, 0, half) : weight);
  second.update_state(y_true.slice(0, half, n), y_pred.slice(0, half, n),
                      weight.defined() ? weight.slice(0, half, n) : weight);
  first.merge_state(second);
  EXPECT_NEAR(first.result(), whole.result(), 1e-12) << typeid(MetricT).name();
  for (std::size_t i = 0; i < whole.variables().size(); ++i)
    EXPECT_NEAR(first.variables()[i].value.template item<double>(),
                whole.variables()[i].value.template item<double>(), 1e-9)
        << whole.variables()[i].name;
}

TEST(MetricStateTest, TwoHalvesOfABatchMergedEqualTheWhole) {
  torch::manual_seed(0);
  const at::Tensor labels = torch::randint(0, 3, {10});
  const at::Tensor logits = torch::randn({10, 3});
  const at::Tensor weights = torch::rand({10});
  const at::Tensor y = torch::randn({10});
  const at::Tensor y_hat = torch::randn({10});
  for (const at::Tensor& w : {at::Tensor(), weights}) {
    expect_halves_merge_into_the_whole<garden::SparseCategoricalAccuracy>(labels, logits, w);
    expect_halves_merge_into_the_whole<garden::Accuracy>(labels, logits.argmax(-1), w);
    expect_halves_merge_into_the_whole<garden::Mean>(y, y_hat, w);
    expect_halves_merge_into_the_whole<garden::Sum>(y, y_hat, w);
    expect_halves_merge_into_the_whole<garden::MeanAbsoluteError>(y, y_hat, w);
    expect_halves_merge_into_the_whole<garden::MeanSquaredError>(y, y_hat, w);
  }
}

// A metric whose state reduces by max: the largest absolute error.
class MaxError : public garden::Metric {
 public:
  explicit MaxError(std::string name) : Metric(std::move(name), {"y", "predictions", ""}) {
    max_ = add_variable("max", garden::Reduction::kMax, 0.0);
  }
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor&) override {
    const at::Tensor largest = (y_pred - y_true).abs().max().to(at::kDouble);
    at::Tensor& v = variable(max_, largest.device());
    v = at::maximum(v, largest);
  }
  double result() const override { return value(max_); }

 private:
  std::size_t max_;
};

TEST(MetricStateTest, DeclaredReductionsMergeAndInputsAreReadByName) {
  MaxError a("max_error"), b("max_error"), whole("max_error");
  const garden::Batch first_labels{{"y", torch::tensor({0.0, 1.0})}};
  const garden::Batch first_outputs{{"predictions", torch::tensor({0.5, 4.0})}};
  const garden::Batch second_labels{{"y", torch::tensor({2.0})}};
  const garden::Batch second_outputs{{"predictions", torch::tensor({1.0})}};
  a.update(first_labels, first_outputs);
  b.update(second_labels, second_outputs);
  whole.update(first_labels, first_outputs);
  whole.update(second_labels, second_outputs);
  b.merge_state(a);
  EXPECT_DOUBLE_EQ(b.result(), 3.0);
  EXPECT_DOUBLE_EQ(b.result(), whole.result());
  EXPECT_EQ(a.variables()[0].reduction, garden::Reduction::kMax);
  a.reset();
  EXPECT_DOUBLE_EQ(a.result(), 0.0);
  // A missing input names the metric and the key.
  try {
    a.update({{"label", torch::tensor({1.0})}}, first_outputs);
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'max_error'"), std::string::npos) << what;
    EXPECT_NE(what.find("'y'"), std::string::npos) << what;
  }
  garden::Mean other("m");
  EXPECT_THROW(a.merge_state(other), garden::Error) << "another kind of metric";
}

// ---- init checkpoint mapping -------------------------------------------------

TEST_F(StepTest, InitCheckpointRestoresARenamedSubModuleOnly) {
  // Another task's checkpoint: its encoder lives under discriminator.encoder.
  torch::manual_seed(5);
  garden::CheckpointData other;
  const at::Tensor weight = torch::randn({4, 3}), bias = torch::randn({4});
  other.tensors["model/discriminator.encoder.weight"] = weight;
  other.tensors["model/discriminator.encoder.bias"] = bias;
  other.tensors["model/discriminator.head.weight"] = torch::randn({1, 4});
  other.tensors["model/generator.embedding"] = torch::randn({7, 2});
  fs::create_directories(root_);
  const std::string path = (root_ / "electra-ckpt").string();
  garden::write_checkpoint_file(path, other);

  auto params =
      experiment("task.init_checkpoint=" + path + ",task.init_checkpoint_modules=encoder");
  auto with_rename = garden::config::get_experiment_config("test/core_toy");
  garden::config::apply_override(
      *with_rename, "{task: {init_checkpoint: '" + path +
                        "', init_checkpoint_modules: [encoder], init_checkpoint_rename: "
                        "{'discriminator.encoder.': 'encoder.'}}}");
  garden::finalize_config(*with_rename);
  auto task = garden::get_task(with_rename->task);
  auto model = task->build_model();
  const auto head_before = model->named_parameters()["head.weight"].clone();
  task->initialize(*model);
  auto parameters = model->named_parameters();
  EXPECT_TRUE(torch::equal(parameters["encoder.weight"], weight));
  EXPECT_TRUE(torch::equal(parameters["encoder.bias"], bias));
  EXPECT_TRUE(torch::equal(parameters["head.weight"], head_before))
      << "a module outside init_checkpoint_modules keeps its initialization";

  // Without the rename, the encoder is not in the checkpoint: one clear line.
  auto task2 = garden::get_task(params->task);
  auto model2 = task2->build_model();
  try {
    task2->initialize(*model2);
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("init_checkpoint_modules names 'encoder'"), std::string::npos) << what;
  }
  // The checkpoint names its discriminator.encoder as the item "encoder"
  // (Model Garden's checkpoint_items): the encoder restores without a rename.
  garden::CheckpointData with_items = other;
  with_items.meta["checkpoint_items"] = {{"encoder", "discriminator.encoder"}};
  const std::string items_path = (root_ / "electra-items-ckpt").string();
  garden::write_checkpoint_file(items_path, with_items);
  auto by_item =
      experiment("task.init_checkpoint=" + items_path + ",task.init_checkpoint_modules=encoder");
  auto task3 = garden::get_task(by_item->task);
  auto model3 = task3->build_model();
  const auto head3 = model3->named_parameters()["head.weight"].clone();
  task3->initialize(*model3);
  EXPECT_TRUE(torch::equal(model3->named_parameters()["encoder.weight"], weight));
  EXPECT_TRUE(torch::equal(model3->named_parameters()["encoder.bias"], bias));
  EXPECT_TRUE(torch::equal(model3->named_parameters()["head.weight"], head3));
  // A checkpoint that holds "encoder." itself is read as it is.
  with_items.tensors["model/encoder.weight"] = torch::zeros({4, 3});
  with_items.tensors["model/encoder.bias"] = torch::zeros({4});
  garden::write_checkpoint_file(items_path, with_items);
  auto task4 = garden::get_task(by_item->task);
  auto model4 = task4->build_model();
  task4->initialize(*model4);
  EXPECT_EQ(model4->named_parameters()["encoder.weight"].abs().sum().item<double>(), 0.0);

  // The mapping alone, as a function.
  const auto mapped = garden::map_init_checkpoint(
      other.tensors, {{}, {{"discriminator.", ""}, {"discriminator.encoder.", "encoder."}}});
  EXPECT_TRUE(mapped.count("encoder.weight")) << "the longest prefix wins";
  EXPECT_TRUE(mapped.count("head.weight"));
  EXPECT_TRUE(mapped.count("generator.embedding"));
}

// ---- registries --------------------------------------------------------------

// An optimizer of a user's own: plain SGD that also counts its steps.
struct CountingSgdConfig : garden::config::BaseOptimizerConfig {
  double scale = 1.0;
  void visit(garden::config::Visitor& v) override {
    garden::config::BaseOptimizerConfig::visit(v);
    v("scale", scale, "Multiplies the learning rate.");
  }
};
class CountingSgd : public garden::optim::Optimizer {
 public:
  CountingSgd(std::vector<garden::optim::NamedParameter> p, garden::optim::SchedulePtr s,
              garden::optim::ClipOptions c, double scale)
      : Optimizer(std::move(p), std::move(s), c), scale_(scale) {}
  static inline int updates = 0;

 protected:
  void update(std::size_t, at::Tensor& parameter, const at::Tensor& gradient, double lr) override {
    parameter.sub_(gradient, lr * scale_);
    ++updates;
  }

 private:
  double scale_;
};

struct HalvingLrConfig : garden::config::Config {
  double initial = 1.0;
  int64_t every = 10;
  void visit(garden::config::Visitor& v) override {
    v("initial", initial, "Rate at step 0.");
    v("every", every, "Steps between halvings.");
  }
};

TEST_F(StepTest, AUserRegisteredOptimizerAndScheduleAreConfiguredAndUsed) {
  static bool registered = false;
  if (!registered) {
    garden::optim::register_optimizer<CountingSgdConfig>(
        "counting_sgd", [](const CountingSgdConfig& c, std::vector<garden::optim::NamedParameter> p,
                           garden::optim::SchedulePtr s, garden::optim::ClipOptions clip) {
          return std::make_unique<CountingSgd>(std::move(p), std::move(s), clip, c.scale);
        });
    garden::optim::register_schedule<HalvingLrConfig>(
        "halving", [](const HalvingLrConfig& c) -> garden::optim::SchedulePtr {
          class Halving : public garden::optim::LearningRateSchedule {
           public:
            Halving(double initial, int64_t every) : initial_(initial), every_(every) {}
            double operator()(int64_t step) const override {
              return initial_ * std::pow(0.5, static_cast<double>(step / every_));
            }

           private:
            double initial_;
            int64_t every_;
          };
          return std::make_shared<Halving>(c.initial, c.every);
        });
    registered = true;
  }
  EXPECT_THROW(garden::optim::register_schedule<HalvingLrConfig>(
                   "halving", [](const HalvingLrConfig&) { return garden::optim::SchedulePtr(); }),
               garden::config::ConfigError)
      << "a name is registered once";
  CountingSgd::updates = 0;
  const auto logs = run("train", "mine",
                        "trainer.optimizer_config.optimizer.type=counting_sgd,"
                        "trainer.optimizer_config.optimizer.counting_sgd.scale=0.5,"
                        "trainer.optimizer_config.learning_rate.type=halving,"
                        "trainer.optimizer_config.learning_rate.halving.initial=0.2");
  EXPECT_EQ(CountingSgd::updates, 40 * 4) << "40 steps, 4 parameters";
  std::ifstream in(root_ / "mine" / "params.yaml");
  const std::string params((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(params.find("counting_sgd:"), std::string::npos) << params;
  EXPECT_NE(params.find("scale: 0.5"), std::string::npos) << params;
  // The schedule is the user's: 0.2 halved every 10 steps, 0.025 at step 30.
  auto resolved = experiment(
      "trainer.optimizer_config.learning_rate.type=halving,"
      "trainer.optimizer_config.learning_rate.halving.initial=0.2");
  const auto schedule = garden::optim::make_schedule(
      resolved->trainer.optimizer_config.learning_rate, resolved->trainer.optimizer_config.warmup);
  EXPECT_DOUBLE_EQ((*schedule)(30), 0.025);
  // A copied config keeps the registered subsection's values.
  const garden::config::OptimizationConfig copy = resolved->trainer.optimizer_config;
  EXPECT_EQ(garden::config::to_yaml_string(const_cast<garden::config::OptimizationConfig&>(copy)),
            garden::config::to_yaml_string(resolved->trainer.optimizer_config));
}

// The model's weights in model_dir's checkpoint at `step`.
std::map<std::string, at::Tensor> weights_at(const fs::path& model_dir, int step) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, tensor] :
       garden::read_checkpoint_file((model_dir / ("ckpt-" + std::to_string(step))).string())
           .tensors)
    if (name.rfind("model/", 0) == 0) out[name] = tensor;
  return out;
}

TEST_F(StepTest, GradientAccumulationGivesTheUpdateOfTheWholeBatch) {
  // Batches of 8 rows. One loss part split 4+4 or 3+3+2 (the uneven split
  // needs the rescale by the step's true count: a mean of the parts' means
  // would differ), and three parts split 4+4 or 2+2+2+2.
  struct Case {
    bool three_parts;
    int parts;
  };
  for (const Case c : {Case{false, 2}, Case{false, 3}, Case{true, 2}, Case{true, 4}}) {
    const std::string common =
        std::string("task.three_parts=") + (c.three_parts ? "true" : "false");
    const std::string whole = "whole" + std::to_string(c.three_parts);
    if (!fs::exists(root_ / whole)) run("train", whole, common);
    const std::string dir = whole + "_in" + std::to_string(c.parts);
    run("train", dir, common + ",trainer.gradient_accumulation_steps=" + std::to_string(c.parts));
    const auto a = weights_at(root_ / whole, 40), b = weights_at(root_ / dir, 40);
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, tensor] : a)
      EXPECT_TRUE(torch::allclose(tensor, b.at(name), 1e-5, 1e-6))
          << dir << " " << name << " differs by "
          << (tensor - b.at(name)).abs().max().item<double>();
    // The logged loss is the whole batch's, not a mean of the parts'.
    using garden_test::events::scalars_in;
    const auto expected = scalars_in(root_ / whole / "train").at("training_loss");
    const auto logged = scalars_in(root_ / dir / "train").at("training_loss");
    ASSERT_EQ(logged.size(), 4u) << dir;
    for (const auto& [step, loss] : expected)
      EXPECT_NEAR(logged.at(step), loss, 1e-5 * std::max(1.0f, loss)) << dir << " step " << step;
  }
}

TEST_F(StepTest, GradientAccumulationNeedsARowForEveryPart) {
  try {
    run("train", "too_many", "trainer.gradient_accumulation_steps=9");
    FAIL() << "nine parts of an 8-row batch were accepted";
  } catch (const garden::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "trainer.gradient_accumulation_steps=9 needs at least as many rows in each batch, "
            "but one has 8"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(experiment("trainer.gradient_accumulation_steps=0"), garden::config::ConfigError);
}

}  // namespace

namespace {

TEST_P(StepDeviceTest, ACheckpointWrittenHereResumesOnTheCpu) {
  const c10::Device device(GetParam());
  if (const auto why = garden_test::unavailable(device); !why.empty()) GTEST_SKIP() << why;
  // 20 steps here (a checkpoint at 20), 20 more on the CPU from it, against
  // 40 on the CPU: checkpoints hold CPU tensors whatever wrote them.
  const std::string common =
      "task.three_parts=true,trainer.optimizer_config.optimizer.sgd.momentum=0.9,";
  run("train", "moved", common + "trainer.train_steps=20,runtime.device=" + device.str());
  run("train", "moved", common + "trainer.train_steps=40,runtime.device=cpu");
  run("train", "cpu", common + "trainer.train_steps=40,runtime.device=cpu");
  const auto moved = weights_at(root_ / "moved", 40), cpu = weights_at(root_ / "cpu", 40);
  ASSERT_EQ(moved.size(), 4u);
  if (device.is_cpu()) {
    for (const auto& [name, tensor] : cpu)
      EXPECT_TRUE(torch::equal(moved.at(name), tensor)) << name << ": a CPU resume is exact";
    return;
  }
  // Another device rounds its sums in another order, and 40 steps with
  // momentum amplify that (3e-4 on an H100, 2026-11-26). The yardstick is 40
  // steps on the device alone: the moved run may be no farther from the CPU's
  // than three times what that one is, and a resume that lost the momentum,
  // the step or the data position lands much farther.
  run("train", "device", common + "trainer.train_steps=40,runtime.device=" + device.str());
  const auto on_device = weights_at(root_ / "device", 40);
  for (const auto& [name, tensor] : cpu) {
    const double moved_off = (moved.at(name) - tensor).abs().max().item<double>();
    const double device_off = (on_device.at(name) - tensor).abs().max().item<double>();
    EXPECT_LE(moved_off, 3.0 * device_off + 1e-6)
        << name << ": the resumed run is " << moved_off << " from the CPU's, 40 steps on " << device
        << " " << device_off;
  }
}

}  // namespace
