// Stopping a run the ways users' tools stop it (docs/reliability.md): the
// real `garden` in a process group of its own, signalled as `timeout` does
// (the process, then its group, then SIGCONT to both), as a terminal's
// Ctrl-C does (the group), or at the pid. Each task ends with a checkpoint at
// the current step, one line and 128 + signal, and resumes from it; a short
// chaos run stops and resumes again and again and ends bitwise where an
// undisturbed run ends.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "cli/cli_fixture.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using garden_test::lines_of;
using garden_test::slurp;

// `garden ARGS` in a process group of its own, its output in files.
class Background {
 public:
  Background(const std::vector<std::string>& args, const fs::path& dir, const std::string& name,
             const fs::path& cwd = {})
      : out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(126);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
      std::vector<char*> argv = {const_cast<char*>(GARDEN_CLI_PATH)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(GARDEN_CLI_PATH, argv.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // both sides, so that no signal can race it
  }
  ~Background() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  std::string err() const { return slurp(err_); }
  // Waits until stderr holds `text` (false: the process ended or time ran out).
  bool wait_for(const std::string& text, std::chrono::seconds timeout = 120s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (err().find(text) != std::string::npos) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        return err().find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  // As GNU timeout stops its command.
  void signal_like_timeout(int signal) {
    ::kill(pid_, signal);
    ::kill(-pid_, signal);
    ::kill(pid_, SIGCONT);
    ::kill(-pid_, SIGCONT);
  }
  void signal_group(int signal) { ::kill(-pid_, signal); }
  void signal_process(int signal) { ::kill(pid_, signal); }
  // The exit code, 128 + signal for a process a signal ended (as a shell
  // says); -1 when it still ran after `timeout` and was killed.
  int finish(std::chrono::seconds timeout = 120s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (status_ < 0 && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_)
        status_ = status;
      else
        std::this_thread::sleep_for(10ms);
    }
    if (status_ < 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      return -1;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }

 private:
  fs::path out_, err_;
  pid_t pid_ = -1;
  int status_ = -1;
};

// The last line of `text`.
std::string last_line(const std::string& text) {
  const auto lines = lines_of(text);
  return lines.empty() ? "" : lines.back();
}

// The step of "received SIGxxx at step N; saved DIR/NAME-N; run the same
// command to resume", checking the rest of the line; -1 when it is not that.
int64_t stopped_at(const std::string& line, const std::string& prefix, const std::string& signal,
                   const fs::path& checkpoint_dir, const std::string& name) {
  const std::string head = prefix + "received " + signal + " at step ";
  if (line.rfind(head, 0) != 0) return -1;
  const int64_t step = std::stoll(line.substr(head.size()));
  const std::string expected = head + std::to_string(step) + "; saved " +
                               (checkpoint_dir / (name + "-" + std::to_string(step))).string() +
                               "; run the same command to resume";
  return line == expected ? step : -1;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

std::string iris(int64_t steps) {
  return "trainer.train_steps=" + std::to_string(steps) +
         ",trainer.steps_per_loop=100,trainer.checkpoint_interval=1000000,"
         "trainer.summary_interval=100,trainer.validation_interval=1000000,runtime.seed=7";
}

// wmt_transformer/demo at a size that takes seconds.
const std::vector<std::string> kSmallTranslation = {"task.model.embedding_width=32",
                                                    "task.model.encoder.num_layers=1",
                                                    "task.model.decoder.num_layers=1",
                                                    "task.model.encoder.intermediate_size=64",
                                                    "task.model.decoder.intermediate_size=64",
                                                    "task.train_data.global_batch_size=512",
                                                    "trainer.steps_per_loop=5",
                                                    "trainer.summary_interval=5",
                                                    "trainer.validation_interval=1000000",
                                                    "trainer.max_to_keep=3",
                                                    "runtime.seed=7"};

class StopSignalCliTest : public garden_test::CliFixture {
 protected:
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(spm_dir(), ignored);
  }
  static fs::path spm_dir() {
    return fs::path(::testing::TempDir()) / ("garden_stop_spm_" + std::to_string(::getpid()));
  }
  // A SentencePiece model for the translation task, trained once (a slice of
  // the bundled pairs: seconds, where the whole set takes ten).
  static std::string translation_spm() {
    static std::string model;
    if (!model.empty()) return model;
    const fs::path dir = spm_dir();
    fs::create_directories(dir);
    const auto lines =
        lines_of(slurp(std::string(GARDEN_DATA_DIR) + "/translation/en_de_train.tsv"));
    std::string slice;
    for (std::size_t i = 0; i < lines.size() && i < 6000; ++i) slice += lines[i] + "\n";
    garden_test::spit(dir / "pairs.tsv", slice);
    const std::string command =
        std::string("'") + GARDEN_CLI_PATH + "' spm train --input '" +
        (dir / "pairs.tsv").string() + "' --tsv_columns 0,1 --model_prefix '" +
        (dir / "sp").string() +
        "' --vocab_size 300 --pad_id 0 --eos_id 1 --unk_id 2 --bos_id -1 >/dev/null 2>&1";
    if (std::system(command.c_str()) != 0) return "";
    model = (dir / "sp.model").string();
    return model;
  }
};

// ---- each task, stopped through its process group --------------------------------

TEST_F(StopSignalCliTest, TabularStopsLikeTimeoutStopsItAndResumes) {
  const std::string model_dir = path("iris");
  const std::vector<std::string> args = {"train", "--experiment=tabular/iris", "--mode=train",
                                         "--model_dir=" + model_dir,
                                         "--params_override=" + iris(100000000)};
  Background run(args, dir_, "run");
  ASSERT_TRUE(run.wait_for("train | step 200/")) << run.err();
  run.signal_like_timeout(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.err();
  const int64_t step = stopped_at(last_line(run.err()), "garden: ", "SIGTERM", model_dir, "ckpt");
  ASSERT_GT(step, 0) << run.err();
  EXPECT_TRUE(fs::exists(fs::path(model_dir) / ("ckpt-" + std::to_string(step))));
  // Only the line and the log lines before it: nothing about the duplicates.
  EXPECT_EQ(run.err().find("garden: received SIGTERM"), run.err().rfind("garden: "));

  const auto resumed = garden("train --experiment=tabular/iris --mode=train --model_dir='" +
                              model_dir + "' --params_override=" + iris(step + 100));
  EXPECT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("ckpt-" + std::to_string(step)), std::string::npos) << resumed.err;
}

TEST_F(StopSignalCliTest, TranslationStopsThroughItsGroupWithACheckpoint) {
  const std::string spm = translation_spm();
  ASSERT_FALSE(spm.empty());
  const std::string model_dir = path("translation");
  std::vector<std::string> overrides = kSmallTranslation;
  overrides.push_back("task.sentencepiece_model_path=" + spm);
  overrides.push_back("trainer.train_steps=100000");
  overrides.push_back("trainer.checkpoint_interval=100000");
  Background run({"train", "--experiment=wmt_transformer/demo", "--mode=train",
                  "--model_dir=" + model_dir, "--params_override=" + join(overrides)},
                 dir_, "run");
  ASSERT_TRUE(run.wait_for("train | step 10/")) << run.err();
  run.signal_group(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.err();
  const int64_t step = stopped_at(last_line(run.err()), "garden: ", "SIGTERM", model_dir, "ckpt");
  EXPECT_GE(step, 10) << run.err();
  EXPECT_TRUE(fs::exists(fs::path(model_dir) / ("ckpt-" + std::to_string(step))));
}

TEST_F(StopSignalCliTest, TranslationStopsWhileTrainingItsTokenizer) {
  // The whole bundled set: SentencePiece trains for seconds, and a stop does
  // not wait for it.
  const std::string model_dir = path("translation");
  std::vector<std::string> overrides = kSmallTranslation;
  overrides.push_back("task.sentencepiece_vocab_size=300");
  Background run({"train", "--experiment=wmt_transformer/demo", "--mode=train",
                  "--model_dir=" + model_dir, "--params_override=" + join(overrides)},
                 dir_, "run");
  ASSERT_TRUE(run.wait_for("training a joint SentencePiece model")) << run.err();
  std::this_thread::sleep_for(300ms);
  const auto signalled = std::chrono::steady_clock::now();
  run.signal_like_timeout(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.err();
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, 5s) << "it waited for SentencePiece";
  EXPECT_EQ(last_line(run.err()),
            "garden: received SIGTERM while training the SentencePiece model; stopped before the "
            "first step, nothing to save; run the same command to start again");
  // The run made model_dir and saved nothing: it is gone again.
  EXPECT_FALSE(fs::exists(model_dir)) << garden_test::entries(model_dir).size();
}

TEST_F(StopSignalCliTest, ElectraStopsOnCtrlCToItsGroup) {
  const std::string text = std::string(GARDEN_DATA_DIR) + "/pretraining/man_en_train.txt";
  ASSERT_EQ(garden("spm train --input '" + text + "' --model_prefix '" + path("sp") +
                   "' --vocab_size 600 --pad_id 0 --unk_id 1 --bos_id -1 --eos_id -1 "
                   "--user_defined_symbols '[CLS],[SEP],[MASK]'")
                .status,
            0);
  ASSERT_EQ(garden("create_pretraining_data --input_file '" + text + "' --output_file '" +
                   path("train.tfrecord") + "' --sp_model_file '" + path("sp.model") +
                   "' --max_seq_length 64 --max_predictions_per_seq 10 --dupe_factor 1")
                .status,
            0);
  const std::string model_dir = path("electra");
  const std::string overrides =
      "task.model.sequence_length=64,task.model.num_masked_tokens=10,"
      "task.model.discriminator_encoder.bert.vocab_size=600,"
      "task.model.discriminator_encoder.bert.hidden_size=32,"
      "task.model.discriminator_encoder.bert.num_layers=1,"
      "task.model.discriminator_encoder.bert.intermediate_size=64,"
      "task.model.discriminator_encoder.bert.embedding_size=32,"
      "task.model.generator_encoder.bert.vocab_size=600,"
      "task.model.generator_encoder.bert.hidden_size=16,"
      "task.model.generator_encoder.bert.num_layers=1,"
      "task.model.generator_encoder.bert.intermediate_size=32,"
      "task.model.generator_encoder.bert.embedding_size=32,"
      "task.train_data.seq_length=64,task.train_data.max_predictions_per_seq=10,"
      "task.validation_data.seq_length=64,task.validation_data.max_predictions_per_seq=10,"
      "task.train_data.global_batch_size=16,task.train_data.input_path=" +
      path("train.tfrecord") +
      ",trainer.train_steps=100000,trainer.steps_per_loop=5,trainer.summary_interval=5,"
      "trainer.checkpoint_interval=100000,trainer.validation_interval=100000,runtime.seed=1";
  Background run({"train", "--experiment=electra/tiny", "--mode=train", "--model_dir=" + model_dir,
                  "--params_override=" + overrides},
                 dir_, "run");
  ASSERT_TRUE(run.wait_for("train | step 10/")) << run.err();
  run.signal_group(SIGINT);
  EXPECT_EQ(run.finish(), 128 + SIGINT) << run.err();
  const int64_t step = stopped_at(last_line(run.err()), "garden: ", "SIGINT", model_dir, "ckpt");
  EXPECT_GE(step, 10) << run.err();
  EXPECT_TRUE(fs::exists(fs::path(model_dir) / ("ckpt-" + std::to_string(step))));
}

TEST_F(StopSignalCliTest, TensorFxTrainStopsThroughItsGroupAndResumes) {
  const fs::path sample = fs::path(GARDEN_DATA_DIR) / "fx" / "iris";
  const std::string job = path("job");
  const std::vector<std::string> args = {"fx",
                                         "train",
                                         "--model",
                                         "feedforward_classification",
                                         "--output",
                                         job,
                                         "--data-train",
                                         "train.csv",
                                         "--data-eval",
                                         "eval.csv",
                                         "--data-schema",
                                         "schema.yaml",
                                         "--data-metadata",
                                         "metadata.json",
                                         "--data-features",
                                         "features.yaml",
                                         "--batch-size",
                                         "5",
                                         "--max-steps",
                                         "100000000",
                                         "--log-interval-steps",
                                         "100",
                                         "--checkpoint-interval-secs",
                                         "3600",
                                         "--hidden-layers:1",
                                         "10",
                                         "--seed",
                                         "1"};
  Background run(args, dir_, "run", sample);
  ASSERT_TRUE(run.wait_for("Global steps: 300;")) << run.err();
  run.signal_group(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.err();
  const int64_t step = stopped_at(last_line(run.err()), "garden fx: ", "SIGTERM",
                                  fs::path(job) / "checkpoints", "model.ckpt");
  ASSERT_GE(step, 300) << run.err();
  EXPECT_TRUE(fs::exists(fs::path(job) / "checkpoints" / ("model.ckpt-" + std::to_string(step))));

  std::vector<std::string> again = args;
  again[std::find(again.begin(), again.end(), "--max-steps") - again.begin() + 1] =
      std::to_string(step + 100);
  Background resumed(again, dir_, "resumed", sample);
  EXPECT_EQ(resumed.finish(), 0) << resumed.err();
  EXPECT_NE(
      resumed.err().find("restored " + (fs::path(job) / "checkpoints").string() + "/model.ckpt-" +
                         std::to_string(step) + " at step " + std::to_string(step)),
      std::string::npos)
      << resumed.err();
}

TEST_F(StopSignalCliTest, ServeDrainsAndExitsZeroOnCtrlCAndDuplicates) {
  ASSERT_EQ(garden("train --experiment tabular/iris --model_dir '" + path("iris") +
                   "' --params_override trainer.train_steps=50")
                .status,
            0);
  ASSERT_EQ(garden("export --experiment tabular/iris --model_dir '" + path("iris") +
                   "' --export_dir '" + path("out") + "'")
                .status,
            0);
  Background serve({"serve", "--export_dir", path("out"), "--port", "0", "--grpc_port", "0",
                    "--model_name", "iris"},
                   dir_, "serve");
  ASSERT_TRUE(serve.wait_for("garden: serving at")) << serve.err();
  serve.signal_group(SIGINT);
  serve.signal_process(SIGINT);  // a launcher's copy, within the moment
  EXPECT_EQ(serve.finish(), 0) << serve.err();
  const std::string err = serve.err();
  EXPECT_NE(err.find("garden: SIGINT: finishing the requests in flight, then stopping"),
            std::string::npos)
      << err;
  EXPECT_EQ(last_line(err), "garden: server stopped");
}

TEST_F(StopSignalCliTest, WithoutPreemptionCheckpointsARunEndsAtOnceWithOneLine) {
  Background run(
      {"train", "--experiment=tabular/iris", "--mode=train", "--model_dir=" + path("r"),
       "--params_override=" + iris(100000000) + ",trainer.preemption_on_demand_checkpoint=false"},
      dir_, "run");
  ASSERT_TRUE(run.wait_for("train | step 200/")) << run.err();
  run.signal_process(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.err();
  EXPECT_EQ(last_line(run.err()), "garden: stopped by SIGTERM");
}

// ---- chaos, short: stopped again and again, ends bitwise as undisturbed ------

// Stops `args` with `stop` after each delay (resuming each time), and, when
// none of those landed in training (on a loaded machine every delay may end
// before training starts), once more as soon as its progress shows a
// training step; then runs it to the end; the
// checkpoint files of the end, named by `final_name`, must equal those of a
// run never stopped.
void expect_stops_change_nothing(
    const fs::path& dir, const std::function<std::vector<std::string>(const fs::path&)>& args,
    const std::vector<std::chrono::milliseconds>& delays, const std::string& final_name) {
  {
    Background straight(args(dir / "straight"), dir, "straight");
    ASSERT_EQ(straight.finish(), 0) << straight.err();
  }
  int stops = 0, saved = 0;
  for (std::size_t i = 0; i < delays.size() || (i == delays.size() && saved == 0); ++i) {
    Background run(args(dir / "stopped"), dir, "stopped" + std::to_string(i));
    if (i < delays.size())
      std::this_thread::sleep_for(delays[i]);
    else
      ASSERT_TRUE(run.wait_for("train | step ")) << run.err();
    switch (i % 3) {
      case 0:
        run.signal_like_timeout(SIGTERM);
        break;
      case 1:
        run.signal_group(SIGTERM);
        break;
      default:
        run.signal_process(SIGTERM);
        break;
    }
    const int code = run.finish();
    const std::string err = run.err();
    // It stopped (at a step with a checkpoint, before the first step, or
    // while the program was still starting) or had finished.
    ASSERT_TRUE(code == 128 + SIGTERM || code == 0) << code << "\n" << err;
    if (code == 128 + SIGTERM) {
      ++stops;
      const std::string line = last_line(err);
      // (Nothing at all: it was still loading its libraries, before main.)
      EXPECT_TRUE(line.rfind("garden: received SIGTERM ", 0) == 0 ||
                  line == "garden: stopped by SIGTERM" || err.empty())
          << err;
      if (line.find("; saved ") != std::string::npos) ++saved;
    }
    EXPECT_EQ(err.find("error"), std::string::npos) << err;
  }
  EXPECT_GT(saved, 0) << "no stop landed in training (" << stops << " stops)";
  Background last(args(dir / "stopped"), dir, "last");
  ASSERT_EQ(last.finish(), 0) << last.err();
  EXPECT_EQ(slurp(dir / "stopped" / final_name), slurp(dir / "straight" / final_name))
      << final_name << " differs from the undisturbed run's";
  EXPECT_FALSE(slurp(dir / "straight" / final_name).empty());
}

TEST_F(StopSignalCliTest, ChaosIrisStoppedAndResumedEndsBitwiseEqual) {
  const auto args = [](const fs::path& model_dir) {
    return std::vector<std::string>{
        "train", "--experiment=tabular/iris", "--mode=train", "--model_dir=" + model_dir.string(),
        "--params_override=trainer.train_steps=20000,trainer.steps_per_loop=100,"
        "trainer.checkpoint_interval=2000,trainer.summary_interval=100,"
        "trainer.validation_interval=1000000,runtime.seed=7"};
  };
  // From the program's start-up to late in training.
  expect_stops_change_nothing(dir_, args, {1200ms, 2000ms, 300ms, 2600ms, 1500ms, 3000ms},
                              "ckpt-20000");
}

TEST_F(StopSignalCliTest, ChaosTranslationStoppedAndResumedEndsBitwiseEqual) {
  const std::string spm = translation_spm();
  ASSERT_FALSE(spm.empty());
  const auto args = [spm](const fs::path& model_dir) {
    std::vector<std::string> overrides = kSmallTranslation;
    overrides.push_back("task.sentencepiece_model_path=" + spm);
    overrides.push_back("trainer.train_steps=150");
    overrides.push_back("trainer.checkpoint_interval=25");
    return std::vector<std::string>{"train", "--experiment=wmt_transformer/demo", "--mode=train",
                                    "--model_dir=" + model_dir.string(),
                                    "--params_override=" + join(overrides)};
  };
  expect_stops_change_nothing(dir_, args, {1600ms, 2100ms, 2600ms, 1900ms}, "ckpt-150");
}

}  // namespace
