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

}  // namespace
