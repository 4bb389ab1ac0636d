// Serving modules: found by the task's config type, and the one-line
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

void register_served_toy() {
  static bool done = false;
  if (done) return;
  garden::register_serving_module<ServedToyConfig, garden_test::ToyTask, ToyServing>(
      "test/served_toy");
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

TEST(ServingModuleTest, ATaskNameIsRegisteredOnce) {
  register_served_toy();
  EXPECT_NE(garden_test::error_of([] {
              garden::register_serving_module<ServedToyConfig, garden_test::ToyTask, ToyServing>(
                  "test/served_toy");
            }).find("serving_module 'test/served_toy' is already registered"),
            std::string::npos);
}

}  // namespace
