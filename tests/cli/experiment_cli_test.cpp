// Flags of the experiment commands (`garden lr`, `config`, `train`) that a
// user can get wrong: refused at once with one line, never a hang.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliRun;
using garden_test::expect_one_error_line;
using garden_test::slurp;
using garden_test::spit;

using garden_test::lines_of;

class ExperimentCliTest : public garden_test::CliFixture {
 protected:
  CliRun lr(const std::string& steps) {
    return garden("lr --experiment=tabular/iris '--steps=" + steps + "'");
  }
};

// Steps near INT64_MAX: the loop once stepped past STOP, wrapped negative
// and never ended.
TEST_F(ExperimentCliTest, LrStepsNearTheLargestStepEnd) {
  const CliRun run = lr("0:9223372036854775807:1000000000000000000");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 10u) << run.out.substr(0, 2000);
  EXPECT_EQ(lines.front().rfind("0\t", 0), 0u) << lines.front();
  EXPECT_EQ(lines.back().rfind("9000000000000000000\t", 0), 0u) << lines.back();

  const CliRun last = lr("9223372036854775807:9223372036854775807");
  ASSERT_EQ(last.status, 0) << last.err;
  EXPECT_EQ(lines_of(last.out).size(), 1u) << last.out;
}

// More lines than anyone reads (a STEP left out) are refused before the
// first, with the cap in the message; ranges under it still print.
TEST_F(ExperimentCliTest, LrRefusesRangesPastTheLineCap) {
  for (const std::string& steps :
       std::vector<std::string>{"0:9223372036854775807", "0:2000000", "5:3000005:2"}) {
    SCOPED_TRACE(steps);
    expect_one_error_line(lr(steps), {"--steps '" + steps + "'", "at most 1000000"});
  }
  const CliRun run = lr("0:999999");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines_of(run.out).size(), 1000000u);
}

// What is not START:STOP[:STEP] of whole numbers is refused, not half-read.
TEST_F(ExperimentCliTest, LrRefusesMalformedSteps) {
  for (const char* steps :
       {"0:10:2x", "0:10:", "0:10:0", "-5:10", "0", "0:1:2:3", "a:b", "0:99999999999999999999"}) {
    SCOPED_TRACE(steps);
    expect_one_error_line(lr(steps), {"--steps"});
  }
}

// A directory given as --config_file is one line naming the flag and the
// path, for every command that reads config files; a file as --model_dir is
// refused before training, and stays as it was.
TEST_F(ExperimentCliTest, ConfigFileAndModelDirAreChecked) {
  const fs::path dir = dir_ / "configs";
  fs::create_directories(dir);
  for (const std::string& command :
       std::vector<std::string>{"config", "lr --steps=0:10", "train --model_dir=" + path("m")}) {
    SCOPED_TRACE(command);
    expect_one_error_line(
        garden(command + " --experiment=tabular/iris --config_file='" + dir.string() + "'"),
        {"--config_file '" + dir.string() + "' is a directory"});
  }
  EXPECT_FALSE(fs::exists(path("m")));
  spit(path("notes.txt"), "mine\n");
  expect_one_error_line(garden("train --experiment=tabular/iris --model_dir='" + path("notes.txt") +
                               "' --params_override=trainer.train_steps=1"),
                        {"--model_dir '" + path("notes.txt") + "' is a file"});
  EXPECT_EQ(slurp(path("notes.txt")), "mine\n");
}

// The rate garden lr prints at `step` (its only line).
double rate_at(const CliRun& run, int64_t step) {
  const auto lines = lines_of(run.out);
  EXPECT_EQ(lines.size(), 1u) << run.out << run.err;
  const std::string prefix = std::to_string(step) + "\t";
  if (lines.size() != 1u || lines[0].rfind(prefix, 0) != 0) return -1.0;
  return std::stod(lines[0].substr(prefix.size()));
}

// bert/sentence_prediction_tiny decays its rate to 0 over its own 300
// steps. A user who trains it for 2,000 (issue 78's fine-tuning) gets a
// schedule over 2,000, said in one line, whether the steps come from
// --params_override or a config file; one who also sets decay_steps keeps
// it and is warned, once, that the last steps run at rate 0. Rates from the
// schedule's definition: 3e-4 * (1 - step / decay_steps) after 30 warmup steps.
// A misspelt command, mode or experiment is one line with the nearest name.
TEST_F(ExperimentCliTest, AMisspeltNameSuggestsTheNearestOne) {
  CliRun run = garden("trian --experiment=tabular/iris");
  EXPECT_EQ(run.status, 2);
  EXPECT_EQ(run.err,
            "garden: error: unknown command 'trian'; did you mean 'train'? (see garden --help)\n");
  run = garden("zzzzzz");
  EXPECT_EQ(run.status, 2);
  EXPECT_EQ(run.err, "garden: error: unknown command 'zzzzzz' (see garden --help)\n");
  expect_one_error_line(
      garden("train --experiment=tabular/iris --mode=trian --model_dir='" + path("m") + "'"),
      {"unknown mode 'trian'; did you mean 'train'? modes: train, eval"});
  expect_one_error_line(garden("config --experiment=tabular/irs"),
                        {"unknown experiment 'tabular/irs'; did you mean 'tabular/iris'?"});
  EXPECT_FALSE(fs::exists(path("m")));
  EXPECT_EQ(garden("experiments").status, 0);
}

// An empty input path names which of the task's data it is: the data layers
// see one DataConfig, and the Trainer says where that stands in the config.
TEST_F(ExperimentCliTest, AnEmptyInputPathNamesWhichDataItIs) {
  expect_one_error_line(
      garden("train --experiment=bert/sentence_prediction_tiny --model_dir='" + path("a") + "'"),
      {"task.train_data.input_path: is empty", "create_finetuning_data"});
  expect_one_error_line(
      garden("train --experiment=electra/tiny --mode=eval --model_dir='" + path("b") + "'"),
      {"task.validation_data.input_path: is empty", "pretraining TFRecord files"});
  expect_one_error_line(
      garden("train --experiment=bert/squad_tiny --mode=train --model_dir='" + path("c") + "'"),
      {"task.train_data.input_path: is empty"});
  // A CSV experiment shows before its path is set, and refuses to train without it.
  EXPECT_EQ(garden("config --experiment=tabular/classification").status, 0);
  expect_one_error_line(
      garden("train --experiment=tabular/classification --model_dir='" + path("d") + "'"),
      {"task.train_data.input_path: is empty; it must name a CSV file"});
  for (const char* dir : {"a", "b", "c", "d"}) EXPECT_FALSE(fs::exists(path(dir))) << dir;
}

TEST_F(ExperimentCliTest, AScheduleOverTheTrainingFollowsTheTrainStepsAUserSets) {
  const std::string experiment = "--experiment=bert/sentence_prediction_tiny --steps=1000:1000";
  const std::string decay = "trainer.optimizer_config.learning_rate.polynomial.decay_steps";

  const CliRun shipped = garden("lr " + experiment);
  ASSERT_EQ(shipped.status, 0) << shipped.err;
  EXPECT_EQ(rate_at(shipped, 1000), 0.0);  // past its 300 steps

  const CliRun longer = garden("lr " + experiment + " --params_override=trainer.train_steps=2000");
  ASSERT_EQ(longer.status, 0) << longer.err;
  EXPECT_NEAR(rate_at(longer, 1000), 3e-4 * (1.0 - 1000.0 / 2000.0), 1e-12);
  EXPECT_NE(longer.err.find(decay + " follows trainer.train_steps 2000 (set by --params_override)"),
            std::string::npos)
      << longer.err;
  EXPECT_EQ(longer.err.find("is 0"), std::string::npos) << longer.err;

  spit(path("steps.yaml"), "trainer:\n  train_steps: 4000\n");
  const CliRun from_file =
      garden("lr " + experiment + " --config_file='" + path("steps.yaml") + "'");
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  EXPECT_NEAR(rate_at(from_file, 1000), 3e-4 * (1.0 - 1000.0 / 4000.0), 1e-12);
  EXPECT_NE(from_file.err.find("(set by --config_file " + path("steps.yaml") + ")"),
            std::string::npos)
      << from_file.err;

  const CliRun kept =
      garden("lr " + experiment + " --params_override=trainer.train_steps=2000," + decay + "=500");
  ASSERT_EQ(kept.status, 0) << kept.err;
  EXPECT_EQ(rate_at(kept, 1000), 0.0);
  EXPECT_EQ(kept.err.find("follows"), std::string::npos) << kept.err;
  EXPECT_NE(kept.err.find("trainer.optimizer_config.learning_rate (polynomial, with its warmup) "
                          "is 0 from step 501 of trainer.train_steps 2000: the last 1500 steps "
                          "run at rate 0"),
            std::string::npos)
      << kept.err;

  // Steps within the warmup (30) keep the experiment's schedule: following
  // them would leave no rate to warm up to.
  const CliRun shorter = garden(
      "lr --experiment=bert/sentence_prediction_tiny --steps=10:10 "
      "--params_override=trainer.train_steps=20");
  ASSERT_EQ(shorter.status, 0) << shorter.err;
  EXPECT_EQ(shorter.err.find("follows"), std::string::npos) << shorter.err;
  EXPECT_EQ(shorter.err.find("is 0"), std::string::npos) << shorter.err;
  EXPECT_GT(rate_at(shorter, 10), 0.0);

  // A schedule without a length (tabular/iris's constant rate) is left alone.
  const CliRun constant = garden(
      "lr --experiment=tabular/iris --steps=1000:1000 --params_override=trainer.train_steps=2000");
  ASSERT_EQ(constant.status, 0) << constant.err;
  EXPECT_EQ(constant.err.find("follows"), std::string::npos) << constant.err;
}

}  // namespace

namespace {

std::string runtime_seed_of(const std::string& params_yaml) {
  std::istringstream in(slurp(params_yaml));
  bool runtime = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("runtime:", 0) == 0) runtime = true;
    if (runtime && line.rfind("  seed: ", 0) == 0) return line.substr(8);
  }
  return "";
}

}  // namespace

// An experiment that leaves runtime.seed null (vision/*, electra/tiny,
// tabular/classification, as Model Garden's) draws one per run; the command
// that resumes its model_dir takes the checkpoint's instead of refusing its
// data order ("the checkpoint's data seed differs"), as "run the same
// command to resume" promises.
TEST_F(ExperimentCliTest, TheSameCommandResumesARunWhoseSeedWasDrawn) {
  const std::string train = "train --experiment=tabular/classification --mode=train --model_dir='" +
                            path("m") +
                            "' --params_override=task.train_data.input_path=" GARDEN_DATA_DIR
                            "/iris/iris.csv,trainer.train_steps=";
  const CliRun first = garden(train + "100");
  ASSERT_EQ(first.status, 0) << first.err;
  const std::string seed = runtime_seed_of(path("m") + "/params.yaml");
  ASSERT_FALSE(seed.empty());
  const CliRun second = garden(train + "200");
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.err.find("resuming with the checkpoint's seed " + seed), std::string::npos)
      << second.err;
  EXPECT_TRUE(fs::exists(path("m") + "/ckpt-200"));
  EXPECT_EQ(runtime_seed_of(path("m") + "/params.yaml"), seed);
  // A seed the user sets is theirs: the data order then differs, and the
  // resume says so.
  expect_one_error_line(garden(train + "300,runtime.seed=" + std::to_string(std::stoll(seed) + 1)),
                        {"the checkpoint's data seed differs"});
}
