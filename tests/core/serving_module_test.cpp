// Serving modules: found by the task's config type, one call from
// instances to answers (several rows per instance too), and the one-line
// refusals of a task that registered none.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/core/serving_module.h"
#include "test_util.h"
#include "toy_task.h"

namespace {

using json = nlohmann::json;

// A config type of its own, so that only this suite's toy task is served.
struct ServedToyConfig : garden_test::ToyTaskConfig {};

// "x", three numbers -> "y", one.
class ToyServing : public garden::ServingModule {
 public:
  explicit ToyServing(garden_test::ToyTask& task) : ServingModule(task) {}
  garden::ServingSignature signature() override {
    return {{{"x", {"DT_FLOAT", {3}}}}, {{"y", {"DT_FLOAT", {}}}}};
  }
  garden::Batch inputs(const std::vector<json>& instances) override {
    std::vector<float> values;
    for (const auto& instance : instances)
      for (const auto& value : instance.at("x")) values.push_back(value.get<float>());
    return {{"x", torch::tensor(values).reshape({static_cast<int64_t>(instances.size()), 3})}};
  }
  std::vector<json> outputs(const garden::Batch& outputs, std::size_t count) override {
    std::vector<json> rows;
    for (std::size_t i = 0; i < count; ++i)
      rows.push_back({{"y", outputs.at("predictions")[static_cast<int64_t>(i)][0].item<double>()}});
    return rows;
  }
};

// A config type of its own for a module whose instance is several rows.
struct RowsToyConfig : garden_test::ToyTaskConfig {};

// "xs", any number of rows of three numbers -> "sum", their predictions'
// sum: its rows are not its instances, so it answers in predict().
class RowsServing : public garden::ServingModule {
 public:
  explicit RowsServing(garden_test::ToyTask& task) : ServingModule(task) {}
  garden::ServingSignature signature() override {
    return {{{"xs", {"DT_FLOAT", {-1, 3}}}}, {{"sum", {"DT_FLOAT", {}}}}};
  }
  garden::Batch inputs(const std::vector<json>& instances) override {
    std::vector<float> values;
    for (const auto& instance : instances)
      for (const auto& row : instance.at("xs"))
        for (const auto& value : row) values.push_back(value.get<float>());
    return {{"x", torch::tensor(values).reshape({-1, 3})}};
  }
  std::vector<json> outputs(const garden::Batch&, std::size_t) override {
    throw garden::Error("rows are not instances");
  }
  std::vector<json> predict(const std::vector<json>& instances,
                            const RunModel& run_model) override {
    const at::Tensor predictions = run_model(inputs(instances)).at("predictions");
    std::vector<json> answers;
    int64_t row = 0;
    for (const auto& instance : instances) {
      double sum = 0;
      for (std::size_t k = 0; k < instance.at("xs").size(); ++k)
        sum += predictions[row++][0].item<double>();
      answers.push_back({{"sum", sum}});
    }
    return answers;
  }
};

void register_served_toy() {
  static bool done = false;
  if (done) return;
  garden::register_serving_module<ServedToyConfig, garden_test::ToyTask, ToyServing>(
      "test/served_toy");
  garden::register_serving_module<RowsToyConfig, garden_test::ToyTask, RowsServing>(
      "test/rows_toy");
  done = true;
}

template <class Config>
std::shared_ptr<garden_test::ToyTask> toy_task() {
  auto config = std::make_shared<Config>();
  config->name = "toy";
  return std::make_shared<garden_test::ToyTask>(config, "");
}

TEST(ServingModuleTest, ATaskWithoutAModuleIsRefusedInOneLine) {
  auto task = toy_task<garden_test::ToyTaskConfig>();
  const auto serving = garden::get_serving_module(*task);
  EXPECT_EQ(&serving->task(), task.get());
  // What export asks before the signature works: no assets, the metadata
  // restored.
  EXPECT_TRUE(serving->assets().empty());
  serving->prepare(json::object(), {});
  EXPECT_EQ(garden_test::error_of([&] { serving->signature(); }),
            "task 'toy' cannot be served yet: it declares no serving signature");
  EXPECT_EQ(garden_test::error_of([&] { serving->inputs({}); }),
            "task 'toy' cannot be served yet: it has no serving_inputs");
  EXPECT_EQ(garden_test::error_of([&] { serving->outputs({}, 0); }),
            "task 'toy' cannot be served yet: it has no serving_outputs");
  auto model = task->build_model();
  EXPECT_EQ(garden_test::error_of([&] { serving->use_int8(*model); }),
            "--int8: task 'toy' has no int8 inference (the translation task has)");
}

TEST(ServingModuleTest, TheModuleRegisteredForTheTasksConfigServesIt) {
  register_served_toy();
  auto task = toy_task<ServedToyConfig>();
  const auto serving = garden::get_serving_module(*task);
  ASSERT_NE(dynamic_cast<ToyServing*>(serving.get()), nullptr);
  EXPECT_EQ(serving->signature().inputs.at(0).first, "x");
  auto model = task->build_model();
  const std::vector<json> instances = {{{"x", {0.1, 0.2, 0.3}}}, {{"x", {1.0, -1.0, 0.5}}}};
  const auto rows = serving->outputs(task->inference_step(serving->inputs(instances), *model), 2);
  ASSERT_EQ(rows.size(), 2u);
  const auto expected =
      task->inference_step({{"x", torch::tensor({1.0f, -1.0f, 0.5f}).reshape({1, 3})}}, *model);
  EXPECT_NEAR(rows[1].at("y").get<double>(), expected.at("predictions")[0][0].item<double>(), 1e-6);
  // The unserved toy task is still refused: modules go by config type.
  const auto unserved = toy_task<garden_test::ToyTaskConfig>();
  EXPECT_EQ(dynamic_cast<ToyServing*>(garden::get_serving_module(*unserved).get()), nullptr);
}

TEST(ServingModuleTest, PredictRunsTheModelOnceAndMapsSeveralRowsBackToTheirInstance) {
  register_served_toy();
  auto task = toy_task<ServedToyConfig>();
  auto model = task->build_model();
  int passes = 0;
  const auto run = [&](const garden::Batch& inputs) {
    ++passes;
    return task->inference_step(inputs, *model);
  };
  // The default: outputs() of the model on inputs(), one row per instance.
  const auto served = garden::get_serving_module(*task);
  const std::vector<json> one_row = {{{"x", {0.1, 0.2, 0.3}}}, {{"x", {1.0, -1.0, 0.5}}}};
  EXPECT_EQ(served->predict(one_row, run),
            served->outputs(task->inference_step(served->inputs(one_row), *model), 2));
  EXPECT_EQ(passes, 1);
  // A module whose instances are 2 and 1 rows: one pass of 3 rows, each
  // instance's sum of its own rows' predictions.
  auto rows_task = toy_task<RowsToyConfig>();
  const auto rows = garden::get_serving_module(*rows_task);
  ASSERT_NE(dynamic_cast<RowsServing*>(rows.get()), nullptr);
  const std::vector<json> instances = {{{"xs", {{0.1, 0.2, 0.3}, {1.0, -1.0, 0.5}}}},
                                       {{"xs", {{0.4, 0.0, -0.2}}}}};
  const auto answers = rows->predict(instances, run);
  EXPECT_EQ(passes, 2);
  ASSERT_EQ(answers.size(), 2u);
  const auto alone = [&](std::vector<float> x) {
    return task->inference_step({{"x", torch::tensor(x).reshape({1, 3})}}, *model)
        .at("predictions")[0][0]
        .item<double>();
  };
  EXPECT_NEAR(answers[0].at("sum").get<double>(),
              alone({0.1f, 0.2f, 0.3f}) + alone({1.0f, -1.0f, 0.5f}), 1e-5);
  EXPECT_NEAR(answers[1].at("sum").get<double>(), alone({0.4f, 0.0f, -0.2f}), 1e-5);
}

TEST(ServingModuleTest, ATaskNameIsRegisteredOnce) {
  register_served_toy();
  EXPECT_NE(garden_test::error_of([] {
              garden::register_serving_module<ServedToyConfig, garden_test::ToyTask, ToyServing>(
                  "test/served_toy");
            }).find("serving_module 'test/served_toy' is already registered"),
            std::string::npos);
}

}  // namespace
