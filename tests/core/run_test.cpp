// Run-level state: a training run owns its model_dir, leaves nothing behind
// when it fails before its first checkpoint, logs every line to train.log,
// stores its config in every checkpoint and refuses to resume with a config
// it cannot honour.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include "garden/base/error.h"
#include "garden/base/file_lock.h"
#include "garden/base/logging.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/run_directory.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "toy_task.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every file under `dir` with its content.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    files[fs::relative(entry.path(), dir).string()] =
        entry.is_regular_file() ? slurp(entry.path()) : "<dir>";
  return files;
}

class RunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { garden_test::register_toy_task(); }
  void SetUp() override {
    garden::set_quiet(true);
    root_ = fs::path(::testing::TempDir()) /
            ("garden_run_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    garden::set_quiet(false);
    fs::remove_all(root_);
  }
  garden::Logs run(const std::string& dir, const std::string& overrides,
                   const std::string& mode = "train") {
    auto params = garden::config::get_experiment_config("test/core_toy");
    if (!overrides.empty()) garden::config::apply_override(*params, overrides);
    garden::finalize_config(*params);
    garden::RunOptions options;
    options.mode = mode;
    options.model_dir = (root_ / dir).string();
    return garden::run_experiment(params, options);
  }
  // The error message of a run that must fail.
  std::string failure(const std::string& dir, const std::string& overrides,
                      const std::string& mode = "train") {
    try {
      run(dir, overrides, mode);
    } catch (const garden::Error& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path root_;
};

TEST_F(RunTest, AFailureBeforeTheFirstCheckpointLeavesNoNewModelDir) {
  // A NaN label from the first row: the loss diverges before any checkpoint.
  const std::string what = failure("new", "task.poison_from_row=0");
  EXPECT_NE(what.find("training diverged"), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(root_ / "new"));
}

TEST_F(RunTest, AFailedResumeLeavesAnExistingModelDirAsItWas) {
  run("m", "");  // checkpoints at 20 and 40
  const auto before = snapshot(root_ / "m");
  ASSERT_TRUE(before.count("ckpt-40"));
  ASSERT_TRUE(before.count("train.log"));
  // Resumed at step 40 (row 320), it meets a NaN at row 330, before the
  // checkpoint at 60.
  const std::string what = failure("m", "trainer.train_steps=80,task.poison_from_row=330");
  EXPECT_NE(what.find("training diverged"), std::string::npos) << what;
  EXPECT_EQ(snapshot(root_ / "m"), before)
      << "params.yaml, train.log, the event files and the checkpoints are as they were";
}

TEST_F(RunTest, TrainLogReceivesEveryLineIncludingTheRestoreAndTheFinalError) {
  run("m", "");
  // The checkpoint at 60 is written, then a NaN at row 490 (step 62) ends it.
  const std::string what = failure("m", "trainer.train_steps=80,task.poison_from_row=490");
  EXPECT_NE(what.find("training diverged"), std::string::npos) << what;
  EXPECT_TRUE(fs::exists(root_ / "m" / "ckpt-60")) << "the run had committed";
  const std::string log = slurp(root_ / "m" / "train.log");
  EXPECT_NE(log.find("restored " + (root_ / "m" / "ckpt-40").string() + " at step 40"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("resuming " + (root_ / "m" / "ckpt-40").string() +
                     " with a changed trainer.train_steps: 40 -> 80"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(" E error: training diverged"), std::string::npos) << log;
}

TEST_F(RunTest, EveryCheckpointCarriesTheResolvedConfig) {
  run("m", "task.model.width=6");
  const auto data = garden::read_checkpoint_file((root_ / "m" / "ckpt-40").string());
  ASSERT_TRUE(data.meta.contains("params"));
  const std::string stored = data.meta.at("params");
  // params.yaml is the same YAML behind its checksum line.
  const std::string file = slurp(root_ / "m" / "params.yaml");
  EXPECT_EQ(file.rfind("# garden params: ", 0), 0u) << file;
  EXPECT_EQ(stored, file.substr(file.find('\n') + 1));
  EXPECT_EQ(YAML::Load(stored)["task"]["model"]["width"].as<int>(), 6);
}

TEST_F(RunTest, AResumeWithAConfigItCannotHonourIsRefusedAndChangesNothing) {
  run("m", "");
  const auto before = snapshot(root_ / "m");
  std::string what =
      failure("m", "trainer.train_steps=60,trainer.optimizer_config.optimizer.type=adam");
  EXPECT_NE(what.find("trainer.optimizer_config.optimizer.type sgd -> adam"), std::string::npos)
      << what;
  EXPECT_EQ(snapshot(root_ / "m"), before);
  // A model that no longer fits its checkpoint names the keys that changed.
  what = failure("m", "trainer.train_steps=60,task.model.width=7");
  EXPECT_NE(what.find("changed since the checkpoint: task.model.width 4 -> 7"), std::string::npos)
      << what;
  EXPECT_EQ(snapshot(root_ / "m"), before);
}

TEST_F(RunTest, ASecondRunOnALockedModelDirStopsAtOnceNamingTheHolder) {
  fs::create_directories(root_ / "busy");
  const pid_t child = ::fork();
  if (child == 0) {
    // Another process holds model_dir's lock for a while.
    garden::FileLock lock((root_ / "busy" / ".garden.lock").string(), "model_dir");
    ::sleep(30);
    ::_exit(0);
  }
  for (int i = 0; i < 500 && !fs::exists(root_ / "busy" / ".garden.lock"); ++i) ::usleep(10000);
  ::usleep(100000);
  const std::string what = failure("busy", "");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_NE(what.find("in use by another garden process (pid " + std::to_string(child) + ","),
            std::string::npos)
      << what;
  EXPECT_FALSE(fs::exists(root_ / "busy" / "params.yaml")) << "nothing was written";
  // The kernel released the dead holder's lock: the next run goes ahead.
  run("busy", "trainer.train_steps=20");
  EXPECT_TRUE(fs::exists(root_ / "busy" / "ckpt-20"));
  EXPECT_FALSE(fs::exists(root_ / "busy" / ".garden.lock")) << "released at the end";
}

}  // namespace
