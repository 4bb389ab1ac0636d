// Checkpoint files and the CheckpointManager: round trip, corruption,
// max_to_keep, the index, and writers that die in the middle of a write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "garden/base/error.h"
#include "garden/core/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static garden::CheckpointData sample(int64_t step) {
    garden::CheckpointData data;
    data.tensors["model/w"] = torch::arange(12, torch::kFloat).reshape({3, 4}) * step;
    data.tensors["model/count"] = torch::tensor({step}, torch::kLong);
    data.tensors["rng/state"] = torch::arange(7, torch::kByte);
    data.tensors["half"] = torch::ones({2}, torch::kBFloat16);
    data.tensors["flag"] = torch::tensor({true, false}, torch::kBool);
    data.meta = {{"global_step", step}, {"text", "ünïcode"}};
    return data;
  }

  fs::path dir_;
};

using garden_test::error_of;

TEST_F(CheckpointTest, FileRoundTripKeepsEveryTensorAndTheMeta) {
  fs::create_directories(dir_);
  const auto path = (dir_ / "ckpt-3").string();
  const auto data = sample(3);
  garden::write_checkpoint_file(path, data);
  const auto back = garden::read_checkpoint_file(path);
  ASSERT_EQ(back.tensors.size(), data.tensors.size());
  for (const auto& [name, tensor] : data.tensors) {
    ASSERT_TRUE(back.tensors.count(name)) << name;
    EXPECT_EQ(back.tensors.at(name).scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(back.tensors.at(name), tensor)) << name;
  }
  EXPECT_EQ(back.meta, data.meta);
}

// The meta alone (what a fine-tuning reads of its init_checkpoint's
// config) is the meta written; a damaged tensor does not concern it, a
// damaged header does.
TEST_F(CheckpointTest, TheMetaReadsBackWithoutTheTensors) {
  fs::create_directories(dir_);
  const auto path = (dir_ / "ckpt-2").string();
  const auto data = sample(2);
  garden::write_checkpoint_file(path, data);
  EXPECT_EQ(garden::read_checkpoint_meta(path), data.meta);
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 3));
    f.put('\x5a');
  }
  EXPECT_EQ(garden::read_checkpoint_meta(path), data.meta);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);  // inside the header's JSON
    f.put('\x01');
  }
  EXPECT_EQ(error_of([&] { garden::read_checkpoint_meta(path); }),
            "checkpoint '" + path + "' is corrupt (header CRC mismatch)");
  EXPECT_EQ(error_of([&] { garden::read_checkpoint_meta((dir_ / "missing").string()); }),
            "checkpoint '" + (dir_ / "missing").string() + "' does not exist");
}

TEST_F(CheckpointTest, NonContiguousTensorsAreSavedByValue) {
  fs::create_directories(dir_);
  garden::CheckpointData data;
  data.tensors["t"] = torch::arange(6, torch::kFloat).reshape({2, 3}).t();
  garden::write_checkpoint_file((dir_ / "c").string(), data);
  EXPECT_TRUE(torch::equal(garden::read_checkpoint_file((dir_ / "c").string()).tensors.at("t"),
                           data.tensors.at("t")));
}

TEST_F(CheckpointTest, CorruptionAndTruncationAreReportedWithThePath) {
  fs::create_directories(dir_);
  const auto path = (dir_ / "ckpt-1").string();
  garden::write_checkpoint_file(path, sample(1));
  const auto size = fs::file_size(path);

  // Flip a byte near the end: inside some tensor's data.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 3));
    f.put('\x5a');
  }
  std::string message = error_of([&] { garden::read_checkpoint_file(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("CRC mismatch in tensor"), std::string::npos) << message;

  fs::resize_file(path, size / 2);
  message = error_of([&] { garden::read_checkpoint_file(path); });
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;

  std::ofstream(path, std::ios::trunc) << "not a checkpoint at all";
  message = error_of([&] { garden::read_checkpoint_file(path); });
  EXPECT_NE(message.find("is not a garden checkpoint"), std::string::npos) << message;

  message = error_of([&] { garden::read_checkpoint_file((dir_ / "missing").string()); });
  EXPECT_EQ(message, "checkpoint '" + (dir_ / "missing").string() + "' does not exist");
  message = error_of([&] { garden::read_checkpoint_file(dir_.string()); });
  EXPECT_EQ(message, "checkpoint '" + dir_.string() + "' is a directory, not a file");
}

TEST_F(CheckpointTest, ManagerKeepsMaxToKeepAndWritesTensorFlowIndex) {
  garden::CheckpointManager manager(dir_.string(), /*max_to_keep=*/2);
  EXPECT_FALSE(manager.latest_checkpoint().has_value());
  EXPECT_FALSE(fs::exists(dir_)) << "a manager that has not saved must not create model_dir";
  for (int64_t step : {10, 20, 30}) manager.save(sample(step), step);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt-10"));
  EXPECT_TRUE(fs::exists(dir_ / "ckpt-20"));
  EXPECT_TRUE(fs::exists(dir_ / "ckpt-30"));
  EXPECT_EQ(manager.latest_checkpoint(), (dir_ / "ckpt-30").string());
  std::ifstream index(dir_ / "checkpoint");
  const std::string text((std::istreambuf_iterator<char>(index)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text,
            "model_checkpoint_path: \"ckpt-30\"\n"
            "all_model_checkpoint_paths: \"ckpt-20\"\n"
            "all_model_checkpoint_paths: \"ckpt-30\"\n");
  // A second manager (a restarted run) sees the same and keeps counting.
  garden::CheckpointManager again(dir_.string(), 2);
  EXPECT_EQ(again.checkpoints().size(), 2u);
  again.save(sample(40), 40);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt-20"));
  EXPECT_EQ(garden::latest_checkpoint(dir_.string()), (dir_ / "ckpt-40").string());
  EXPECT_EQ(garden::CheckpointManager::step_of((dir_ / "ckpt-40").string()), 40);
}

TEST_F(CheckpointTest, WithoutAnIndexTheHighestStepIsLatest) {
  garden::CheckpointManager manager(dir_.string(), 5);
  manager.save(sample(5), 5);
  manager.save(sample(50), 50);
  fs::remove(dir_ / "checkpoint");
  EXPECT_EQ(garden::latest_checkpoint(dir_.string()), (dir_ / "ckpt-50").string());
  EXPECT_EQ(manager.latest_checkpoint(), (dir_ / "ckpt-50").string());
}

// Found by fuzz/checkpoint_fuzz.cpp: a damaged header size (here 4 GiB in a
// file of 40 bytes) made the reader allocate and fill it before failing.
TEST_F(CheckpointTest, SizesThatDoNotFitTheFileAreRefusedBeforeAnyAllocation) {
  fs::create_directories(dir_);
  const std::string path = (dir_ / "ckpt-1").string();
  std::string bytes = "GARDNCK1";
  const uint64_t huge = 0xfffffffdull;
  bytes.append(reinterpret_cast<const char*>(&huge), 8);
  bytes.append(24, '\0');
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(error_of([&] { garden::read_checkpoint_file(path); }),
            "checkpoint '" + path + "' is truncated or corrupt (header size)");
}

TEST_F(CheckpointTest, ADamagedLatestCheckpointFallsBackToTheNewestIntactOne) {
  garden::CheckpointManager manager(dir_.string(), 5);
  EXPECT_FALSE(manager.read_latest_intact().has_value()) << "no checkpoint: start afresh";
  for (int64_t step : {10, 20, 30}) manager.save(sample(step), step);
  // ckpt-30 cut short, ckpt-20 with one byte of a tensor flipped.
  fs::resize_file(dir_ / "ckpt-30", fs::file_size(dir_ / "ckpt-30") - 9);
  {
    std::fstream file(dir_ / "ckpt-20", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(dir_ / "ckpt-20")) - 3);
    file.put('\x5a');
  }
  ::testing::internal::CaptureStderr();
  const auto intact = manager.read_latest_intact();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(intact.has_value());
  EXPECT_EQ(intact->first, (dir_ / "ckpt-10").string());
  EXPECT_EQ(intact->second.meta.at("global_step"), 10);
  EXPECT_TRUE(torch::equal(intact->second.tensors.at("model/w"), sample(10).tensors["model/w"]));
  // Each damaged one named with its fault, and the one used instead.
  EXPECT_NE(log.find((dir_ / "ckpt-30").string()), std::string::npos) << log;
  EXPECT_NE(log.find((dir_ / "ckpt-20").string()), std::string::npos) << log;
  EXPECT_NE(log.find("resuming from the older " + (dir_ / "ckpt-10").string()), std::string::npos)
      << log;
  // None intact: an error naming the newest's fault, never a fresh start.
  fs::resize_file(dir_ / "ckpt-10", 5);
  const std::string error = error_of([&] { manager.read_latest_intact(); });
  EXPECT_EQ(error.rfind("checkpoint '" + (dir_ / "ckpt-30").string() + "' is truncated", 0), 0u)
      << error;
  EXPECT_NE(error.find("no older checkpoint in " + dir_.string() + " is intact either"),
            std::string::npos)
      << error;
}

TEST_F(CheckpointTest, StepNumbersTooLongForAnIntegerAreNotCheckpoints) {
  garden::CheckpointManager manager(dir_.string(), 5);
  manager.save(sample(7), 7);
  std::ofstream(dir_ / "ckpt-99999999999999999999999") << "x";
  std::ofstream(dir_ / "checkpoint") << "garbage\n";
  EXPECT_EQ(garden::latest_checkpoint(dir_.string()), (dir_ / "ckpt-7").string());
  EXPECT_EQ(garden::CheckpointManager::step_of("ckpt-99999999999999999999999"), -1);
  // The damaged index is said, once, naming it.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(manager.read_latest_intact()->first, (dir_ / "ckpt-7").string());
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("checkpoint index '" + (dir_ / "checkpoint").string() +
                     "' names no checkpoint that exists"),
            std::string::npos)
      << log;
}

TEST_F(CheckpointTest, ACrashInTheMiddleOfAWriteLeavesThePreviousCheckpoint) {
  garden::CheckpointManager manager(dir_.string(), 5);
  manager.save(sample(1), 1);
  manager.set_write_observer([](uint64_t written) {
    if (written > 100) throw std::runtime_error("simulated crash");
  });
  EXPECT_THROW(manager.save(sample(2), 2), std::runtime_error);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt-2"));
  EXPECT_EQ(manager.latest_checkpoint(), (dir_ / "ckpt-1").string());
  const auto restored = garden::read_checkpoint_file(*manager.latest_checkpoint());
  EXPECT_EQ(restored.meta.at("global_step"), 1);
}

TEST_F(CheckpointTest, AWriterKilledMidWriteLeavesAUsableDirectory) {
  {
    garden::CheckpointManager manager(dir_.string(), 5);
    manager.save(sample(1), 1);
  }
  // A child process starts writing a large checkpoint and is killed with
  // SIGKILL half-way: no cleanup code of its own runs.
  // Made before fork: the child then runs no parallel torch op.
  garden::CheckpointData big = sample(2);
  big.tensors["model/big"] = torch::zeros({4 << 20}, torch::kFloat);  // 16 MiB
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    garden::CheckpointManager manager(dir_.string(), 5);
    bool signalled = false;
    manager.set_write_observer([&](uint64_t written) {
      if (!signalled && written > (4u << 20)) {
        signalled = true;
        const char byte = 1;
        (void)!::write(ready[1], &byte, 1);
        ::pause();  // wait here to be killed mid-write
      }
    });
    manager.save(big, 2);
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ASSERT_TRUE(WIFSIGNALED(status));

  // The killed writer left a temporary file and nothing else.
  bool temporary_found = false;
  for (const auto& entry : fs::directory_iterator(dir_))
    temporary_found |= entry.path().filename().string().find(".tmp-") != std::string::npos;
  EXPECT_TRUE(temporary_found);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt-2"));

  garden::CheckpointManager manager(dir_.string(), 5);  // a restarted run
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos)
        << "temporary file not cleaned: " << entry.path();
  ASSERT_EQ(manager.latest_checkpoint(), (dir_ / "ckpt-1").string());
  EXPECT_EQ(garden::read_checkpoint_file(*manager.latest_checkpoint()).meta.at("global_step"), 1);
}

}  // namespace
