// The config system: reading, writing, overriding, strict errors, one-ofs,
// validation, locking and the registries.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/task.h"
#include "garden/tabular/classification.h"
#include "test_util.h"

namespace {

using garden::config::ConfigError;
using garden::config::Visitor;

struct InnerConfig : garden::config::Config {
  int64_t width = 8;
  std::vector<double> scales = {1.0, 2.0};
  void visit(Visitor& v) override {
    v("width", width, "Width.");
    v("scales", scales, "Scales.");
  }
  void validate() const override {
    if (width < 1) throw ConfigError("width must be >= 1");
  }
};

struct ChoiceA : garden::config::Config {
  double rate = 0.5;
  void visit(Visitor& v) override { v("rate", rate, "Rate."); }
};
struct ChoiceB : garden::config::Config {
  std::string label = "b";
  void visit(Visitor& v) override { v("label", label, "Label."); }
};
struct Choice : garden::config::OneOfConfig {
  ChoiceA a;
  ChoiceB b;
  void visit(Visitor& v) override {
    v("type", type, "a or b.");
    v("a", a, "A.");
    v("b", b, "B.");
  }
};

struct SampleConfig : garden::config::Config {
  bool flag = false;
  int64_t count = 3;
  double ratio = 0.25;
  std::string name = "sample";
  std::optional<int64_t> maybe;
  std::vector<std::string> tags;
  InnerConfig inner;
  std::optional<InnerConfig> optional_inner;
  Choice choice;
  void visit(Visitor& v) override {
    v("flag", flag, "A bool.");
    v("count", count, "An int.");
    v("ratio", ratio, "A float.");
    v("name", name, "A string.");
    v("maybe", maybe, "An optional int.");
    v("tags", tags, "A list.");
    v("inner", inner, "Nested.");
    v("optional_inner", optional_inner, "Optional nested.");
    v("choice", choice, "One-of.");
  }
};

using garden_test::error_of;

TEST(ConfigTest, DefaultsAreWrittenAndReadBackUnchanged) {
  SampleConfig a;
  a.maybe = 7;
  a.tags = {"x", "y z"};
  a.ratio = 0.1;  // not exactly representable: must round-trip exactly
  a.optional_inner.emplace();
  a.optional_inner->width = 99;
  a.choice.type = "b";
  a.choice.b.label = "hello";
  const std::string text = garden::config::to_yaml_string(a);
  SampleConfig b;
  garden::config::read_config(b, YAML::Load(text));
  EXPECT_EQ(b.maybe, 7);
  EXPECT_EQ(b.tags, (std::vector<std::string>{"x", "y z"}));
  EXPECT_EQ(b.ratio, 0.1);
  ASSERT_TRUE(b.optional_inner.has_value());
  EXPECT_EQ(b.optional_inner->width, 99);
  EXPECT_EQ(b.choice.type, "b");
  EXPECT_EQ(b.choice.b.label, "hello");
  EXPECT_EQ(garden::config::to_yaml_string(b), text);
}

TEST(ConfigTest, YamlAppliesOnlyTheKeysItHas) {
  SampleConfig c;
  garden::config::read_config(c, YAML::Load("count: 10\ninner: {width: 4}"));
  EXPECT_EQ(c.count, 10);
  EXPECT_EQ(c.inner.width, 4);
  EXPECT_EQ(c.inner.scales, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(c.name, "sample");
}

TEST(ConfigTest, NullsClearOptionalsAndEmptyStrings) {
  SampleConfig c;
  c.maybe = 3;
  c.optional_inner.emplace();
  garden::config::read_config(c, YAML::Load("maybe: null\noptional_inner: ~\nname: null"));
  EXPECT_FALSE(c.maybe.has_value());
  EXPECT_FALSE(c.optional_inner.has_value());
  EXPECT_EQ(c.name, "");
}

TEST(ConfigTest, UnknownKeyNamesFullPathAndNearestKey) {
  SampleConfig c;
  const std::string message =
      error_of([&] { garden::config::read_config(c, YAML::Load("inner: {widht: 3}")); });
  EXPECT_NE(message.find("'inner.widht'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'inner.width'"), std::string::npos) << message;
}

TEST(ConfigTest, UnknownKeyFarFromAnyListsTheValidKeys) {
  SampleConfig c;
  const std::string message =
      error_of([&] { garden::config::read_config(c, YAML::Load("zzzzzzzzzzzz: 1")); });
  EXPECT_NE(message.find("valid keys here: flag, count"), std::string::npos) << message;
}

TEST(ConfigTest, WrongTypesNameKeyValueAndExpectedType) {
  struct Case {
    const char* yaml;
    const char* expected;
  };
  const Case cases[] = {
      {"count: abc", "config key 'count': expected int, got 'abc'"},
      {"count: 1.5", "config key 'count': expected int, got '1.5'"},
      {"ratio: fast", "config key 'ratio': expected float, got 'fast'"},
      {"flag: maybe", "config key 'flag': expected bool (true or false), got 'maybe'"},
      {"name: [1, 2]", "config key 'name': expected string, got a list"},
      {"tags: x", "config key 'tags': expected list of string, got 'x'"},
      {"inner: 3", "config key 'inner': expected a mapping, got '3'"},
      {"inner: {scales: [1, two]}", "config key 'inner.scales[1]': expected float, got 'two'"},
      {"count: null", "config key 'count': expected int, got null"},
  };
  for (const auto& c : cases) {
    SampleConfig config;
    EXPECT_EQ(error_of([&] { garden::config::read_config(config, YAML::Load(c.yaml)); }),
              c.expected)
        << c.yaml;
  }
}

TEST(ConfigTest, IntegralFloatsAndScientificIntsAreAccepted) {
  SampleConfig c;
  garden::config::read_config(c, YAML::Load("count: 1e3\nratio: 2"));
  EXPECT_EQ(c.count, 1000);
  EXPECT_EQ(c.ratio, 2.0);
}

TEST(ConfigTest, OverrideStringsInEveryForm) {
  SampleConfig c;
  garden::config::apply_override(
      c, "count=5, name='a,b', inner.scales=[3, 4.5], choice.type=a,choice.a.rate=0.75");
  EXPECT_EQ(c.count, 5);
  EXPECT_EQ(c.name, "a,b");
  EXPECT_EQ(c.inner.scales, (std::vector<double>{3.0, 4.5}));
  EXPECT_EQ(c.choice.type, "a");
  EXPECT_EQ(c.choice.a.rate, 0.75);

  garden::config::apply_override(c, "{inner: {width: 12}, flag: true}");
  EXPECT_EQ(c.inner.width, 12);
  EXPECT_TRUE(c.flag);
  garden::config::apply_override(c, R"({"count": 9, "tags": ["p"]})");
  EXPECT_EQ(c.count, 9);
  EXPECT_EQ(c.tags, std::vector<std::string>{"p"});
}

TEST(ConfigTest, OverrideErrorsSayWhatIsWrong) {
  SampleConfig c;
  EXPECT_NE(error_of([&] {
              garden::config::apply_override(c, "inner.wdth=3");
            }).find("unknown config key 'inner.wdth'; did you mean 'inner.width'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { garden::config::apply_override(c, "count=[1"); }).find("unbalanced"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { garden::config::apply_override(c, "- 1\n- 2"); }).find("params_override"),
      std::string::npos);
}

TEST(ConfigTest, OneOfChoicesAndValidation) {
  SampleConfig c;
  EXPECT_EQ(c.choice.get(), nullptr);
  c.choice.type = "a";
  EXPECT_EQ(c.choice.get(), &c.choice.a);
  EXPECT_EQ(c.choice.choices(), (std::vector<std::string>{"a", "b"}));
  c.choice.type = "c";
  EXPECT_EQ(error_of([&] { garden::config::validate_config(c); }),
            "choice: type 'c' is not one of: a, b");
}

TEST(ConfigTest, ValidationErrorsCarryTheNestedPath) {
  SampleConfig c;
  c.inner.width = 0;
  EXPECT_EQ(error_of([&] { garden::config::validate_config(c); }), "inner: width must be >= 1");
}

TEST(ConfigTest, LockedConfigRefusesOverrides) {
  SampleConfig c;
  c.lock();
  EXPECT_NE(error_of([&] { garden::config::apply_override(c, "count=1"); }).find("locked"),
            std::string::npos);
  EXPECT_EQ(c.count, 3);
}

TEST(ConfigTest, FilesApplyInOrderAndErrorsNameTheFile) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "garden_config_files";
  std::filesystem::create_directories(dir);
  const auto first = (dir / "first.yaml").string();
  const auto second = (dir / "second.yaml").string();
  const auto broken = (dir / "broken.yaml").string();
  std::ofstream(first) << "count: 1\nname: first\n";
  std::ofstream(second) << "count: 2\n";
  std::ofstream(broken) << "count: [1\n";
  SampleConfig c;
  garden::config::apply_file(c, first);
  garden::config::apply_file(c, second);
  EXPECT_EQ(c.count, 2);
  EXPECT_EQ(c.name, "first");
  EXPECT_NE(error_of([&] { garden::config::apply_file(c, broken); }).find(broken),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              garden::config::apply_file(c, (dir / "none.yaml").string());
            }).find("cannot read config file"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(ConfigTest, FieldPathsListEveryLeaf) {
  SampleConfig c;
  const auto paths = garden::config::field_paths(c);
  EXPECT_NE(std::find(paths.begin(), paths.end(), "inner.width"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "choice.a.rate"), paths.end());
  // An absent optional section has no leaves yet; it is one leaf itself.
  EXPECT_NE(std::find(paths.begin(), paths.end(), "optional_inner"), paths.end());
}

TEST(ConfigTest, ModelGardenDefaultsAndKeyNames) {
  garden::config::TrainerConfig trainer;
  EXPECT_EQ(trainer.steps_per_loop, 1000);
  EXPECT_EQ(trainer.summary_interval, 1000);
  EXPECT_EQ(trainer.checkpoint_interval, 1000);
  EXPECT_EQ(trainer.max_to_keep, 5);
  EXPECT_EQ(trainer.continuous_eval_timeout, 3600);
  EXPECT_EQ(trainer.validation_steps, -1);
  EXPECT_EQ(trainer.best_checkpoint_metric_comp, "higher");
  EXPECT_EQ(trainer.loss_upper_bound, 1e6);
  EXPECT_EQ(trainer.validation_summary_subdir, "validation");
  garden::config::DataConfig data;
  EXPECT_TRUE(data.drop_remainder);
  EXPECT_EQ(data.shuffle_buffer_size, 100);
  EXPECT_EQ(data.block_length, 1);
  garden::config::RuntimeConfig runtime;
  EXPECT_EQ(runtime.distribution_strategy, "mirrored");
  EXPECT_EQ(runtime.task_index, -1);
  garden::config::AdamConfig adam;
  EXPECT_EQ(adam.epsilon, 1e-07);
  const auto trainer_keys = garden::config::field_paths(trainer);
  for (const char* key :
       {"optimizer_config.optimizer.type", "optimizer_config.learning_rate.polynomial.power",
        "optimizer_config.warmup.linear.warmup_steps", "train_steps", "validation_interval",
        "best_checkpoint_export_subdir", "recovery_max_trials", "preemption_on_demand_checkpoint"})
    EXPECT_NE(std::find(trainer_keys.begin(), trainer_keys.end(), key), trainer_keys.end()) << key;
}

TEST(ConfigTest, TrainerRestrictions) {
  garden::config::TrainerConfig trainer;
  trainer.steps_per_loop = 100;
  trainer.summary_interval = 150;
  EXPECT_NE(error_of([&] {
              garden::config::validate_config(trainer);
            }).find("summary_interval: 150 must be a multiple of steps_per_loop (100)"),
            std::string::npos);
  trainer.summary_interval = 200;
  trainer.best_checkpoint_metric_comp = "bigger";
  EXPECT_NE(error_of([&] {
              garden::config::validate_config(trainer);
            }).find("best_checkpoint_metric_comp"),
            std::string::npos);
}

TEST(RegistryTest, ExperimentsAreFoundByHierarchicalName) {
  const auto config = garden::config::get_experiment_config("tabular/iris");
  ASSERT_TRUE(config->task);
  EXPECT_EQ(config->trainer.train_steps, 400);
  // Each call returns a fresh config.
  EXPECT_NE(garden::config::get_experiment_config("tabular/iris").get(), config.get());
}

TEST(RegistryTest, UnknownExperimentListsTheRegisteredOnes) {
  const std::string message =
      error_of([] { garden::config::get_experiment_config("tabular/irs"); });
  EXPECT_NE(message.find("unknown experiment 'tabular/irs'; did you mean 'tabular/iris'? "
                         "registered: "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("wmt_transformer/demo"), std::string::npos) << message;
  // Nothing near: no suggestion, the list still.
  const std::string far = error_of([] { garden::config::get_experiment_config("zzzzzzzz"); });
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(far.find("registered: "), std::string::npos) << far;
}

TEST(RegistryTest, DuplicateAndMalformedNamesAreRefused) {
  EXPECT_THROW(garden::config::register_experiment(
                   "tabular/iris", "again",
                   [] { return garden::config::get_experiment_config("tabular/iris"); }),
               ConfigError);
  for (const char* bad : {"", "/a", "a/", "a//b", "a b", "a/b?"})
    EXPECT_THROW(garden::config::check_registry_name(bad, "experiment"), ConfigError) << bad;
  EXPECT_NO_THROW(garden::config::check_registry_name("wmt_transformer/large-2.0", "experiment"));
}

TEST(RegistryTest, TaskIsFoundByConfigTypeAndUnknownTypesAreNamed) {
  auto config = garden::config::get_experiment_config("tabular/iris");
  auto task = garden::get_task(config->task);
  EXPECT_NE(dynamic_cast<garden::tabular::TabularClassificationTask*>(task.get()), nullptr);

  struct Unregistered : garden::config::TaskConfigWith<InnerConfig> {};
  try {
    garden::get_task(std::make_shared<Unregistered>());
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("registered tasks: "), std::string::npos) << message;
    EXPECT_NE(message.find("tabular/classification"), std::string::npos) << message;
    EXPECT_NE(message.find("register_task"), std::string::npos) << message;
  }
}

}  // namespace
