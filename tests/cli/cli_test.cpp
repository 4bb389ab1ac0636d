// Tests of the `garden` command line as a user meets it: the real binary
// (GARDEN_CLI_PATH) run through the shell, its stdout and stderr captured in
// files, its exit status and the files it leaves behind checked.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"
#include "cli/cli_run.h"

namespace {

namespace fs = std::filesystem;

using namespace cli_run;  // NOLINT: the helpers every test here uses

// ---- garden experiments --------------------------------------------------------

TEST(CliExperiments, ListsBuiltinsWithDescriptions) {
  TempDir dir;
  const Result r = run_garden({"experiments"}, dir.path());
  ASSERT_EQ(r.status, 0) << r;
  std::map<std::string, std::string> described;
  for (const auto& line : lines_of(r.out)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const auto text = line.find_first_not_of(' ', space);
    described[line.substr(0, space)] = text == std::string::npos ? "" : line.substr(text);
  }
  for (const char* name : {"tabular/iris", "tabular/classification"}) {
    ASSERT_TRUE(described.count(name)) << name << " is not listed\n" << r;
    EXPECT_GE(described[name].size(), 10u) << name << " has no description\n" << r;
  }
  EXPECT_TRUE(contains(described["tabular/iris"], "iris")) << r;
}

// ---- garden config ---------------------------------------------------------------

TEST(CliConfig, PrintsParseableYaml) {
  TempDir dir;
  const Result r = run_garden({"config", "--experiment=tabular/iris"}, dir.path());
  ASSERT_EQ(r.status, 0) << r;
  YAML::Node node;
  ASSERT_NO_THROW(node = YAML::Load(r.out)) << r;
  ASSERT_TRUE(node.IsMap()) << r;
  EXPECT_EQ(node["task"]["train_data"]["global_batch_size"].as<int64_t>(), 16) << r;
  EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 400) << r;
  EXPECT_EQ(node["trainer"]["optimizer_config"]["optimizer"]["type"].as<std::string>(), "adam");
  EXPECT_TRUE(node["runtime"].IsMap()) << r;
}

TEST(CliConfig, ParamsOverrideApplies) {
  TempDir dir;
  const Result r =
      run_garden({"config", "--experiment=tabular/iris", "--params_override=trainer.train_steps=7"},
                 dir.path());
  ASSERT_EQ(r.status, 0) << r;
  const YAML::Node node = YAML::Load(r.out);
  EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 7) << r;
  EXPECT_EQ(node["task"]["train_data"]["global_batch_size"].as<int64_t>(), 16) << r;
}

TEST(CliLr, PrintsTheScheduleWithWarmupAtEachStep) {
  TempDir dir;
  const Result r = run_garden(
      {"lr", "--experiment=tabular/iris", "--steps=0:40:10",
       "--params_override=trainer.optimizer_config.learning_rate={type: polynomial, polynomial: "
       "{initial_learning_rate: 1.0, decay_steps: 40, end_learning_rate: 0.0}},"
       "trainer.optimizer_config.warmup={type: linear, linear: {warmup_steps: 20}}"},
      dir.path());
  ASSERT_EQ(r.status, 0) << r;
  // Warmup rises linearly to the base schedule's value at step 20 (0.5);
  // then the polynomial decay is read at the raw step.
  EXPECT_EQ(r.out, "0\t0\n10\t0.25\n20\t0.5\n30\t0.25\n40\t0\n") << r;
  const Result bad = run_garden({"lr", "--experiment=tabular/iris", "--steps=9:3"}, dir.path());
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(bad.err,
            "garden: error: --steps must be START:STOP[:STEP] with 0 <= START <= STOP, got "
            "'9:3'\n");
}

TEST(CliConfig, ConfigFilesInOrderThenParamsOverrideLast) {
  TempDir dir;
  const fs::path first = dir / "first.yaml";
  const fs::path second = dir / "second.yaml";
  write_file(first,
             "trainer:\n  train_steps: 11\n  max_to_keep: 9\n"
             "task:\n  train_data:\n    global_batch_size: 8\n");
  write_file(second, "trainer:\n  train_steps: 22\n");
  {
    SCOPED_TRACE("the later config file wins; keys it does not set survive");
    const Result r =
        run_garden({"config", "--experiment=tabular/iris", "--config_file=" + first.string(),
                    "--config_file=" + second.string()},
                   dir.path());
    ASSERT_EQ(r.status, 0) << r;
    const YAML::Node node = YAML::Load(r.out);
    EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 22) << r;
    EXPECT_EQ(node["trainer"]["max_to_keep"].as<int64_t>(), 9) << r;
    EXPECT_EQ(node["task"]["train_data"]["global_batch_size"].as<int64_t>(), 8) << r;
  }
  {
    SCOPED_TRACE("file order is the command line's");
    const Result r =
        run_garden({"config", "--experiment=tabular/iris", "--config_file=" + second.string(),
                    "--config_file=" + first.string()},
                   dir.path());
    ASSERT_EQ(r.status, 0) << r;
    EXPECT_EQ(YAML::Load(r.out)["trainer"]["train_steps"].as<int64_t>(), 11) << r;
  }
  {
    SCOPED_TRACE("params_override comes last, wherever it is on the command line");
    const Result r = run_garden(
        {"config", "--experiment=tabular/iris", "--params_override=trainer.train_steps=7",
         "--config_file=" + first.string(), "--config_file=" + second.string()},
        dir.path());
    ASSERT_EQ(r.status, 0) << r;
    const YAML::Node node = YAML::Load(r.out);
    EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 7) << r;
    EXPECT_EQ(node["trainer"]["max_to_keep"].as<int64_t>(), 9) << r;
  }
}

// ---- errors ----------------------------------------------------------------------

TEST(CliErrors, UnknownExperimentListsRegisteredOnes) {
  expect_train_fails_cleanly({"train", "--experiment=tabular/no_such_thing"},
                             {"tabular/no_such_thing", "tabular/iris", "tabular/classification"});
  TempDir dir;
  expect_one_line_error(run_garden({"config", "--experiment=nope"}, dir.path()),
                        {"'nope'", "tabular/iris"});
}

TEST(CliErrors, UnknownKeyNamesFullPathAndNearestKey) {
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris",
       "--params_override=task.train_data.global_batch_sise=8"},
      {"task.train_data.global_batch_sise", "did you mean", "task.train_data.global_batch_size"});
}

TEST(CliErrors, WrongTypeNamesKeyValueAndType) {
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris", "--params_override=trainer.train_steps=lots"},
      {"trainer.train_steps", "lots", "int"});
}

TEST(CliErrors, MissingConfigFile) {
  TempDir dir;
  const std::string missing = (dir / "no_such_file.yaml").string();
  expect_train_fails_cleanly({"train", "--experiment=tabular/iris", "--config_file=" + missing},
                             {missing});
}

TEST(CliErrors, InvalidYamlInConfigFile) {
  TempDir dir;
  const fs::path bad = dir / "bad.yaml";
  write_file(bad, "trainer:\n  train_steps: [1, 2\n  max_to_keep: {\n");
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris", "--config_file=" + bad.string()},
      {bad.string(), "YAML"});
}

TEST(CliErrors, FailedValidation) {
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris", "--params_override=trainer.steps_per_loop=0"},
      {"steps_per_loop", ">= 1"});
}

TEST(CliErrors, UnknownMode) {
  expect_train_fails_cleanly({"train", "--experiment=tabular/iris", "--mode=trian"},
                             {"trian", "train_and_eval"});
}

TEST(CliErrors, MissingCsvInputPath) {
  TempDir dir;
  const std::string missing = (dir / "missing.csv").string();
  expect_train_fails_cleanly({"train", "--experiment=tabular/iris",
                              "--params_override=task.train_data.input_path=" + missing},
                             {missing});
}

TEST(CliErrors, MissingRequiredFlagIsUsageError) {
  TempDir dir;
  {
    SCOPED_TRACE("no --model_dir");
    expect_one_line_error(run_garden({"train", "--experiment=tabular/iris"}, dir.path()),
                          {"--model_dir"}, 2);
  }
  {
    SCOPED_TRACE("no --experiment");
    const fs::path model_dir = dir / "model";
    expect_one_line_error(run_garden({"train", "--model_dir=" + model_dir.string()}, dir.path()),
                          {"--experiment"}, 2);
    EXPECT_FALSE(fs::exists(model_dir));
  }
  {
    SCOPED_TRACE("config without --experiment");
    expect_one_line_error(run_garden({"config"}, dir.path()), {"--experiment"}, 2);
  }
  {
    SCOPED_TRACE("no subcommand");
    expect_one_line_error(run_garden({}, dir.path()), {}, 2);
  }
}

// ---- garden train ----------------------------------------------------------------

TEST(CliTrain, TrainAndEvalWritesModelDir) {
  TempDir dir;
  const fs::path model_dir = dir / "model";
  const Result r =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train_and_eval",
                  "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                 dir.path());
  ASSERT_EQ(r.status, 0) << r;
  const std::string absolute = fs::absolute(model_dir).string();
  bool saw_model_dir = false, saw_params = false, saw_summaries = false, saw_evaluation = false;
  for (const auto& line : lines_of(r.out)) {
    if (line.rfind("model_dir:", 0) == 0) saw_model_dir = contains(line, absolute);
    if (line.rfind("params.yaml:", 0) == 0)
      saw_params = contains(line, (fs::path(absolute) / "params.yaml").string());
    if (line.rfind("summaries:", 0) == 0)
      saw_summaries = contains(line, "tensorboard --logdir " + absolute);
    if (line.rfind("evaluation:", 0) == 0)
      saw_evaluation = contains(line, "accuracy") && contains(line, "validation_loss");
  }
  EXPECT_TRUE(saw_model_dir) << r;
  EXPECT_TRUE(saw_params) << r;
  EXPECT_TRUE(saw_summaries) << r;
  EXPECT_TRUE(saw_evaluation) << r;

  for (const char* name : {"params.yaml", "train.log", "ckpt-100", "checkpoint"})
    EXPECT_TRUE(fs::is_regular_file(model_dir / name)) << name << " is missing\n" << r;
  EXPECT_FALSE(glob_prefix(model_dir / "train", "events.out.tfevents.").empty()) << r;
  EXPECT_FALSE(glob_prefix(model_dir / "validation", "events.out.tfevents.").empty()) << r;
  EXPECT_TRUE(contains(read_file(model_dir / "checkpoint"), "ckpt-100"));

  // params.yaml is the resolved config, overrides included.
  const YAML::Node params = YAML::LoadFile((model_dir / "params.yaml").string());
  EXPECT_EQ(params["trainer"]["train_steps"].as<int64_t>(), 100);
  EXPECT_FALSE(read_file(model_dir / "train.log").empty());
}

TEST(CliTrain, RerunFromParamsYamlIsBitIdentical) {
  TempDir dir;
  const fs::path first = dir / "first";
  const fs::path second = dir / "second";
  const Result a = run_garden({"train", "--experiment=tabular/iris", "--mode=train_and_eval",
                               "--params_override=" + kQuickIris, "--model_dir=" + first.string()},
                              dir.path());
  ASSERT_EQ(a.status, 0) << a;
  ASSERT_TRUE(fs::is_regular_file(first / "ckpt-100")) << a;
  const Result b = run_garden(
      {"train", "--experiment=tabular/iris", "--mode=train_and_eval",
       "--config_file=" + (first / "params.yaml").string(), "--model_dir=" + second.string()},
      dir.path());
  ASSERT_EQ(b.status, 0) << b;
  ASSERT_TRUE(fs::is_regular_file(second / "ckpt-100")) << b;
  const std::string bytes_a = read_file(first / "ckpt-100");
  const std::string bytes_b = read_file(second / "ckpt-100");
  EXPECT_EQ(bytes_a.size(), bytes_b.size());
  EXPECT_TRUE(bytes_a == bytes_b) << "ckpt-100 differs between the run and its rerun from "
                                     "params.yaml";
  EXPECT_EQ(read_file(first / "params.yaml"), read_file(second / "params.yaml"));
}

// Resuming with a config whose model does not fit the checkpoint fails; the
// run it would have resumed must be left as it was (its params.yaml still
// describes its checkpoints).
// DISABLED: run_experiment (src/core/train_lib.cpp) writes params.yaml and
// opens train.log before restoring the checkpoint, so today the failed resume
// overwrites params.yaml with the incompatible config. Enable once fixed.
TEST(CliTrain, IncompatibleResumeLeavesModelDirUnchanged) {
  TempDir dir;
  const fs::path model_dir = dir / "model";
  const Result t =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                  "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                 dir.path());
  ASSERT_EQ(t.status, 0) << t;
  const auto before = snapshot(model_dir);
  const Result r =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                  "--params_override=trainer.train_steps=200,task.model.hidden_layer_sizes=[8]",
                  "--model_dir=" + model_dir.string()},
                 dir.path());
  expect_one_line_error(r, {"has shape"});
  EXPECT_EQ(changes(before, snapshot(model_dir)), "") << "the failed resume changed model_dir\n"
                                                      << r;
}

// A damaged newest checkpoint (cut short by a full disk, a bit flipped on
// the way) is passed over with one line naming it: the run resumes from the
// one before, and ends where an undisturbed run ends, bit for bit.
TEST(CliTrain, ResumesFromTheNewestIntactCheckpointAndSaysSo) {
  TempDir dir;
  const std::string every50 = "trainer.checkpoint_interval=50,trainer.steps_per_loop=50,";
  auto train = [&](const fs::path& model_dir, int steps) {
    return run_garden(
        {"train", "--experiment=tabular/iris", "--mode=train",
         "--params_override=" + every50 + "trainer.train_steps=" + std::to_string(steps),
         "--model_dir=" + model_dir.string()},
        dir.path());
  };
  const fs::path damaged = dir / "damaged", whole = dir / "whole";
  ASSERT_EQ(train(damaged, 100).status, 0);
  fs::resize_file(damaged / "ckpt-100", fs::file_size(damaged / "ckpt-100") / 2);
  const Result r = train(damaged, 150);
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(contains(r.err, "checkpoint '" + (damaged / "ckpt-100").string() + "' is truncated"))
      << r;
  EXPECT_TRUE(contains(r.err, "resuming from the older " + (damaged / "ckpt-50").string())) << r;
  const Result u = train(whole, 150);
  ASSERT_EQ(u.status, 0) << u;
  EXPECT_TRUE(read_file(damaged / "ckpt-150") == read_file(whole / "ckpt-150"))
      << "the resumed run ended elsewhere than an undisturbed one";
}

// ---- garden train --mode=eval --------------------------------------------------------

TEST(CliEval, NeedsACheckpointThenEvaluates) {
  TempDir dir;
  const fs::path model_dir = dir / "model";
  fs::create_directories(model_dir);
  {
    SCOPED_TRACE("empty model_dir");
    const Result r = run_garden(
        {"train", "--experiment=tabular/iris", "--mode=eval", "--model_dir=" + model_dir.string()},
        dir.path());
    expect_one_line_error(r, {"no checkpoint"});
    EXPECT_EQ(changes({}, snapshot(model_dir)), "") << "eval wrote into model_dir\n" << r;
  }
  const Result t =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                  "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                 dir.path());
  ASSERT_EQ(t.status, 0) << t;
  {
    SCOPED_TRACE("after training");
    const Result r =
        run_garden({"train", "--experiment=tabular/iris", "--mode=eval",
                    "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                   dir.path());
    ASSERT_EQ(r.status, 0) << r;
    bool evaluated = false;
    for (const auto& line : lines_of(r.out))
      if (line.rfind("evaluation:", 0) == 0)
        evaluated = contains(line, "accuracy") && contains(line, "validation_loss");
    EXPECT_TRUE(evaluated) << r;
    EXPECT_TRUE(fs::is_regular_file(model_dir / "ckpt-100")) << r;
  }
}

}  // namespace
