// Multi-worker training, end to end with real processes on loopback: N
// workers with global batch B end with the weights of one process with B,
// a killed worker's run resumes exactly, workers on distinct loopback
// addresses act as separate hosts, and every failure is one clear line
// (parameter servers: parameter_server_cli_test.cpp).
#include <cstdio>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include "cli/cli_fixture.h"
#include "cli/distributed_util.h"
#include "garden/base/torch_features.h"
#include "garden/core/checkpoint.h"
#include "garden/data/example.h"
#include "garden/data/tfrecord.h"
#include "garden/vision/data/image_codec.h"

namespace fs = std::filesystem;
using garden_test::CliRun;
using garden_test::expect_same_weights;
using garden_test::final_weights;
using garden_test::free_port;
using garden_test::kIris;

namespace {

class DistributedCliTest : public garden_test::DistributedCliFixture {};

}  // namespace

TEST_F(DistributedCliTest, IrisOnTwoAndFourWorkersEndsWithOneProcesssWeights) {
  const CliRun one = iris(path("one"), 1, kIris);
  ASSERT_EQ(one.status, 0) << one.err;
  for (int workers : {2, 4}) {
    const std::string model_dir = path("workers" + std::to_string(workers));
    const CliRun run = iris(model_dir, workers, kIris);
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_NE(run.err.find("[rank 1] "), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("multi_worker_mirrored: rank 0 of " + std::to_string(workers)),
              std::string::npos)
        << run.err;
    expect_same_weights(model_dir, path("one"), 1e-5);
    // The chief alone wrote model_dir, and its logs are over every worker:
    // training_loss of the last loop equals the one process's.
    EXPECT_TRUE(fs::exists(fs::path(model_dir) / "params.yaml"));
    const auto last_loss = [](const std::string& text) {
      const auto at = text.rfind("training_loss: ");
      return at == std::string::npos ? -1.0 : std::stod(text.substr(at + 15, 8));
    };
    EXPECT_NEAR(last_loss(run.err), last_loss(one.err), 2e-4) << run.err << one.err;
  }
}

TEST_F(DistributedCliTest, Float16GradientsOnTheWireTrainNearOneProcessButNotAsFloat32) {
  const CliRun one = iris(path("one"), 1, kIris);
  ASSERT_EQ(one.status, 0) << one.err;
  const CliRun run = iris(path("fp16"), 2, kIris + ",runtime.gradient_compression=fp16");
  if (run.status != 0 && run.err.find("float16 sums") != std::string::npos) {
    // A LibTorch whose Gloo cannot sum float16 (Debian's 2.14): refused
    // before the first step, on every worker, with one line.
    EXPECT_NE(run.err.find("garden: error: runtime.gradient_compression: fp16 needs float16 sums, "
                           "which this LibTorch's Gloo does not have; leave it at none"),
              std::string::npos)
        << run.err;
    EXPECT_EQ(run.err.find("I train |"), std::string::npos) << run.err;
    return;
  }
  ASSERT_EQ(run.status, 0) << run.err;
  // float16 keeps about 3 significant digits of each step's gradients:
  // after 60 SGD steps the weights are near one process's, not within
  // float32's 1e-5.
  expect_same_weights(path("fp16"), path("one"), 2e-2, 2e-3);
  const auto fp16 = final_weights(path("fp16"));
  const auto exact = final_weights(path("one"));
  double largest = 0.0;
  for (const auto& [name, tensor] : fp16)
    largest = std::max(largest, (tensor - exact.at(name)).abs().max().item<double>());
  EXPECT_GT(largest, 1e-5) << "the gradients did not cross as float16";
}

TEST_F(DistributedCliTest, EvaluationOverFourWorkersReportsWhatOneProcessReports) {
  // Validation batches of 7 rows: the last one (30 = 4 * 7 + 2) leaves two
  // of the four workers without a row; the metrics and the loss, reduced
  // over the workers, still equal one process's.
  const std::string overrides =
      kIris +
      ",task.validation_data.global_batch_size=7,"
      "task.validation_data.sharding=false,trainer.validation_interval=60";
  const std::string one_dir = path("one"), four_dir = path("four");
  const CliRun one = garden("train --experiment=tabular/iris --mode=train_and_eval --model_dir='" +
                            one_dir + "' --params_override='" + overrides + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  const CliRun four =
      garden("launch --nproc_per_node=4 --master_port=" + std::to_string(free_port()) +
             " -- train --experiment=tabular/iris --mode=train_and_eval "
             "--model_dir='" +
             four_dir + "' --params_override='" + overrides +
             ",runtime.distribution_strategy=multi_worker_mirrored'");
  ASSERT_EQ(four.status, 0) << four.err;
  // "evaluation:  accuracy 0.9667, validation_loss 0.1234"
  const auto value = [](const std::string& out, const std::string& key) {
    const auto at = out.find(key + " ", out.find("evaluation:"));
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + key.size() + 1));
  };
  for (const std::string key : {"accuracy", "validation_loss"}) {
    EXPECT_GE(value(one.out, key), 0.0) << one.out;
    EXPECT_NEAR(value(four.out, key), value(one.out, key), 1e-3) << key << "\n" << four.out;
  }
}

TEST_F(DistributedCliTest, ShardedInputGivesEachWorkerItsRowsAndTrains) {
  // sharding: true (Model Garden's default): each worker reads its rows.
  const CliRun run = iris(path("sharded"), 2,
                          "runtime.seed=3,trainer.train_steps=40,"
                          "trainer.steps_per_loop=10");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto checkpoint = garden::read_checkpoint_file(*garden::latest_checkpoint(path("sharded")));
  ASSERT_TRUE(checkpoint.meta.contains("workers"));
  EXPECT_EQ(checkpoint.meta.at("workers").size(), 2u);
  EXPECT_TRUE(checkpoint.tensors.count("rng/cpu/0") && checkpoint.tensors.count("rng/cpu/1"));
  EXPECT_EQ(checkpoint.meta.at("global_step"), 40);
  // 40 steps of a global batch of 16.
  EXPECT_EQ(checkpoint.meta.at("examples_seen"), 640);
}

TEST_F(DistributedCliTest, TinyTranslationOnTwoAndFourWorkersEndsWithOneProcesssWeights) {
  // 50 steps of wmt_transformer/tiny on the bundled slice, dropout off, at
  // the rates of a warmup of 800 (the recipe's 400 doubles them, and the
  // summation-order differences between 1, 2 and 4 workers with them).
  const std::string data = std::string(GARDEN_DATA_DIR) + "/translation/en_de_";
  const std::string overrides =
      "task.train_data.input_path=" + data + "train.tsv,task.validation_data.input_path=" + data +
      "valid.tsv,task.sentencepiece_vocab_size=1000,runtime.seed=5,trainer.train_steps=50,"
      "trainer.optimizer_config.warmup.linear.warmup_steps=800,"
      "trainer.steps_per_loop=25,trainer.summary_interval=25,trainer.checkpoint_interval=50,"
      "task.train_data.global_batch_size=512,task.train_data.sharding=false,"
      "task.model.dropout_rate=0,task.model.encoder.dropout_rate=0,"
      "task.model.encoder.attention_dropout_rate=0,task.model.encoder.intermediate_dropout=0,"
      "task.model.decoder.dropout_rate=0,task.model.decoder.attention_dropout_rate=0,"
      "task.model.decoder.intermediate_dropout=0";
  const std::string train =
      "train --experiment=wmt_transformer/tiny --mode=train --params_override='" + overrides;
  // Its checkpoints are larger than garden()'s 64 MiB file limit.
  const CliRun one = shell("\"$GARDEN\" " + train + "' --model_dir='" + path("one") + "'\n");
  ASSERT_EQ(one.status, 0) << one.err;
  for (int workers : {2, 4}) {
    const std::string model_dir = path("workers" + std::to_string(workers));
    const CliRun run = shell("\"$GARDEN\" launch --nproc_per_node=" + std::to_string(workers) +
                             " --master_port=" + std::to_string(free_port()) + " -- " + train +
                             ",runtime.distribution_strategy=multi_worker_mirrored' --model_dir='" +
                             model_dir + "'\n");
    ASSERT_EQ(run.status, 0) << run.err;
    expect_same_weights(model_dir, path("one"), 1e-3, 1e-5);
  }
}

TEST_F(DistributedCliTest, GradientAccumulationOnOneAndTwoWorkersEqualsTheWholeBatch) {
  // 15 rows a step: one process in 5 + 5 + 5, two workers in 4 + 4 and 4 + 3.
  const CliRun one = iris(path("one"), 1, kIris);
  ASSERT_EQ(one.status, 0) << one.err;
  const CliRun parts = iris(path("one_in3"), 1, kIris + ",trainer.gradient_accumulation_steps=3");
  ASSERT_EQ(parts.status, 0) << parts.err;
  expect_same_weights(path("one_in3"), path("one"), 1e-5);
  const CliRun two = iris(path("two_in2"), 2, kIris + ",trainer.gradient_accumulation_steps=2");
  ASSERT_EQ(two.status, 0) << two.err;
  expect_same_weights(path("two_in2"), path("one"), 1e-5);

  // Translation batches hold a varying number of target tokens per row: 10
  // steps of wmt_transformer/tiny in 2 parts end where the whole batch does.
  const std::string data = std::string(GARDEN_DATA_DIR) + "/translation/en_de_";
  const std::string train =
      "\"$GARDEN\" train --experiment=wmt_transformer/tiny --mode=train "
      "--params_override='task.train_data.input_path=" +
      data +
      "train.tsv,"
      "task.validation_data.input_path=" +
      data +
      "valid.tsv,task.sentencepiece_vocab_size=1000,"
      "runtime.seed=5,trainer.train_steps=10,trainer.steps_per_loop=10,"
      "trainer.summary_interval=10,trainer.checkpoint_interval=10,"
      "task.train_data.global_batch_size=512,task.model.dropout_rate=0,"
      "task.model.encoder.dropout_rate=0,task.model.encoder.attention_dropout_rate=0,"
      "task.model.encoder.intermediate_dropout=0,task.model.decoder.dropout_rate=0,"
      "task.model.decoder.attention_dropout_rate=0,task.model.decoder.intermediate_dropout=0";
  const CliRun whole = shell(train + "' --model_dir='" + path("tiny") + "'\n");
  ASSERT_EQ(whole.status, 0) << whole.err;
  const CliRun halves = shell(train + ",trainer.gradient_accumulation_steps=2' --model_dir='" +
                              path("tiny_in2") + "'\n");
  ASSERT_EQ(halves.status, 0) << halves.err;
  expect_same_weights(path("tiny_in2"), path("tiny"), 1e-3, 1e-5);
}

TEST_F(DistributedCliTest, ResumingOnAnotherNumberOfWorkersGivesEachItsOwnRandomStream) {
  // One process writes ckpt-30; two workers continue it. The checkpoint has
  // no random state for them, so each draws from seed + rank: their dropout
  // masks (and the states in ckpt-60) differ.
  const std::string common =
      "runtime.seed=7,trainer.steps_per_loop=10,trainer.checkpoint_interval=30";
  const CliRun first = iris(path("run"), 1, common + ",trainer.train_steps=30");
  ASSERT_EQ(first.status, 0) << first.err;
  const CliRun second = iris(path("run"), 2, common + ",trainer.train_steps=60");
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.err.find("the checkpoint was written by 1 worker(s), this run has 2"),
            std::string::npos)
      << second.err;
  const auto data = garden::read_checkpoint_file((fs::path(path("run")) / "ckpt-60").string());
  ASSERT_TRUE(data.tensors.count("rng/cpu/0") && data.tensors.count("rng/cpu/1"));
  EXPECT_FALSE(torch::equal(data.tensors.at("rng/cpu/0"), data.tensors.at("rng/cpu/1")));
}

TEST_F(DistributedCliTest, WorkersOnDistinctLoopbackAddressesActAsHosts) {
  const CliRun one = iris(path("one"), 1, kIris);
  ASSERT_EQ(one.status, 0) << one.err;
  const int port = free_port();
  std::string script;
  for (int index : {0, 1}) {
    const std::string tf_config = "{\"cluster\": {\"chief\": [\"127.0.0.2:" + std::to_string(port) +
                                  "\"], \"worker\": [\"127.0.0.3:" + std::to_string(free_port()) +
                                  "\"]}, \"task\": {\"type\": \"" +
                                  (index == 0 ? "chief" : "worker") + "\", \"index\": 0}}";
    script += "TF_CONFIG='" + tf_config +
              "' \"$GARDEN\" train --experiment=tabular/iris --mode=train --model_dir='" +
              path("hosts") + "' --params_override='" + kIris +
              ",runtime.distribution_strategy=multi_worker_mirrored' > '" + path("out") +
              std::to_string(index) + "' 2>&1 &\npid" + std::to_string(index) + "=$!\n";
  }
  script += "wait $pid0; s0=$?; wait $pid1; s1=$?; cat '" + path("out0") + "' '" + path("out1") +
            "'; exit $((s0 + s1))\n";
  const CliRun run = shell(script);
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("rank 1 (worker 0) of 2 (from TF_CONFIG), rendezvous at 127.0.0.2"),
            std::string::npos)
      << run.out;
  expect_same_weights(path("hosts"), path("one"), 1e-5);
}

TEST_F(DistributedCliTest, AKilledWorkerStopsTheRunAndTheRelaunchResumesExactly) {
  const std::string overrides =
      "runtime.seed=11,trainer.train_steps=3000,trainer.steps_per_loop=50,"
      "trainer.checkpoint_interval=50,trainer.max_to_keep=100,task.train_data.sharding=true";
  const CliRun uninterrupted = iris(path("uninterrupted"), 2, overrides);
  ASSERT_EQ(uninterrupted.status, 0) << uninterrupted.err;

  // Kill rank 1 once the first checkpoint is there.
  const std::string model_dir = path("killed");
  const std::string launch =
      launch_iris(model_dir, overrides + ",runtime.collective_timeout_seconds=20");
  const CliRun killed = signal_child(launch, model_dir + "/ckpt-100", "9", 2);
  EXPECT_NE(killed.status, 0) << killed.err;
  EXPECT_NE(killed.err.find("garden launch: rank 1 was killed by signal 9"), std::string::npos)
      << killed.err;
  const auto interrupted_at = garden::latest_checkpoint(model_dir);
  ASSERT_TRUE(interrupted_at.has_value());
  ASSERT_NE(*interrupted_at, model_dir + "/ckpt-3000") << "the kill came too late";

  // The same command again resumes and ends bitwise where the other run did.
  const CliRun resumed = shell(launch + "\n");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("restored " + *interrupted_at), std::string::npos) << resumed.err;
  expect_same_weights(model_dir, path("uninterrupted"), 0.0);
}

TEST_F(DistributedCliTest, ASigtermToOneWorkerStopsBothAtOneStepAndTheRelaunchResumesExactly) {
  // SIGTERM to rank 1 alone: the step agreement tells rank 0 at the same
  // step, the chief checkpoints it, both exit, and the same command resumes
  // it and ends bitwise where an uninterrupted run ends.
  const std::string overrides =
      "runtime.seed=5,trainer.train_steps=3000,trainer.steps_per_loop=50,"
      "trainer.checkpoint_interval=1000,task.train_data.sharding=true";
  const CliRun uninterrupted = iris(path("uninterrupted"), 2, overrides);
  ASSERT_EQ(uninterrupted.status, 0) << uninterrupted.err;

  const std::string model_dir = path("signalled");
  const std::string launch = launch_iris(model_dir, overrides);
  const CliRun stopped = signal_child(launch, model_dir + "/ckpt-1000", "TERM", 2);
  EXPECT_NE(stopped.status, 0) << stopped.err;
  const auto checkpoint = garden::latest_checkpoint(model_dir);
  ASSERT_TRUE(checkpoint.has_value()) << stopped.err;
  const int64_t step = garden::read_checkpoint_file(*checkpoint).meta.at("global_step");
  ASSERT_LT(step, 3000) << "the signal came too late";
  const std::string at = " at step " + std::to_string(step) + ";";
  EXPECT_NE(stopped.err.find("[rank 1] garden: received SIGTERM" + at), std::string::npos)
      << stopped.err;
  EXPECT_NE(stopped.err.find("[rank 0] garden: another worker received a stop signal; stopping" +
                             at + " saved " + *checkpoint),
            std::string::npos)
      << stopped.err;

  const CliRun resumed = shell(launch + "\n");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("restored " + *checkpoint), std::string::npos) << resumed.err;
  expect_same_weights(model_dir, path("uninterrupted"), 0.0);
}

TEST_F(DistributedCliTest, TrainingDataThatEndsStopsEveryWorkerWithOneLine) {
  // Training data that does not repeat: every worker names the step its
  // data ended at, and none waits for the others.
  const CliRun run =
      iris(path("ended"), 2,
           "runtime.seed=3,trainer.train_steps=1000,trainer.steps_per_loop=10,"
           "task.train_data.is_training=false,runtime.collective_timeout_seconds=20");
  EXPECT_EQ(run.status, 1) << run.err;
  for (const std::string rank : {"0", "1"})
    EXPECT_NE(run.err.find("[rank " + rank +
                           "] garden: error: the training data ended on 2 of 2 "
                           "workers at step "),
              std::string::npos)
        << run.err;
  EXPECT_NE(run.err.find("; set task.train_data.is_training: true so it repeats"),
            std::string::npos)
      << run.err;
}

// USE_LIBUV=1 (torchrun's variable) takes effect where LibTorch's TCPStore
// has a libuv server and is refused at once with one line where that server
// is not built in; 1.13 has none, and says the variable is ignored.
TEST_F(DistributedCliTest, UseLibuvTakesEffectOrIsNamed) {
  const CliRun run = shell("USE_LIBUV=1 \"$GARDEN\" launch --nproc_per_node=2 --master_port=" +
                           std::to_string(free_port()) +
                           " -- train --experiment=tabular/iris --mode=train --model_dir='" +
                           path("libuv") + "' --params_override='" + kIris +
                           ",runtime.distribution_strategy=multi_worker_mirrored'\n");
#if GARDEN_HAS_TCPSTORE_LIBUV
  if (run.status != 0) {
    EXPECT_NE(run.err.find("USE_LIBUV=1 but this LibTorch cannot serve its TCPStore with libuv"),
              std::string::npos)
        << run.err;
    EXPECT_EQ(run.err.find("retrying"), std::string::npos) << run.err;  // not waited for
  }
#else
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("USE_LIBUV=1 is ignored"), std::string::npos) << run.err;
#endif
}

TEST_F(DistributedCliTest, AHungWorkerIsNamedAfterTheTimeout) {
  // SIGSTOP rank 1 mid-training: rank 0 waits collective_timeout_seconds,
  // finds rank 1's heartbeat stopped, and says so.
  const std::string model_dir = path("hung");
  const CliRun run = shell(
      "\"$GARDEN\" launch --nproc_per_node=2 --stop_grace_seconds=1 --master_port=" +
      std::to_string(free_port()) +
      " -- train --experiment=tabular/iris --mode=train --model_dir='" + model_dir +
      "' --params_override=runtime.seed=1,trainer.train_steps=100000,trainer.steps_per_loop=50,"
      "trainer.checkpoint_interval=50,runtime.distribution_strategy=multi_worker_mirrored,"
      "runtime.collective_timeout_seconds=3 &\nlauncher=$!\n"
      "for i in $(seq 1 3000); do [ -e '" +
      model_dir +
      "/ckpt-50' ] && break; sleep 0.01; done\n"
      "victim=$(pgrep -P $launcher | sort -n | tail -1)\nkill -STOP $victim\n"
      "wait $launcher; status=$?\nkill -KILL $victim 2>/dev/null\nexit $status\n");
  EXPECT_EQ(run.status, 1) << run.err;
  EXPECT_NE(run.err.find("[rank 0] garden: error: "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("failed on rank 0: rank 1 stopped answering"), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("garden launch: rank 0 exited with code 1"), std::string::npos) << run.err;
}

TEST_F(DistributedCliTest, AnEvaluatorEvaluatesTheChiefsCheckpointsBesideTheWorkers) {
  const CliRun run = iris(path("evaluated"), 2,
                          "runtime.seed=2,trainer.train_steps=60,trainer.steps_per_loop=10,"
                          "trainer.checkpoint_interval=20,trainer.continuous_eval_timeout=60",
                          "--evaluator");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("[evaluator] "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("this process the evaluator: running continuous_eval"), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("evaluated step 60 >= train_steps 60"), std::string::npos) << run.err;
  // Its evaluations are written where Model Garden's evaluator writes them.
  bool events = false;
  for (const auto& entry : fs::directory_iterator(fs::path(path("evaluated")) / "validation"))
    events = events || entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_TRUE(events);
}

TEST_F(DistributedCliTest, ARendezvousPortInUseIsOneLine) {
  // A first chief holds the port (waiting for its worker); a second chief
  // on the same port retries, then says what is wrong.
  const int port = free_port();
  const std::string chief =
      "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
      " \"$GARDEN\" train --experiment=tabular/iris --mode=train "
      "--params_override=runtime.collective_timeout_seconds=";
  // Waits (up to 30 s) until the first chief listens: its port in LISTEN
  // state in /proc/net/tcp or tcp6, not a fixed sleep that a loaded machine outlasts.
  char hex[8];
  std::snprintf(hex, sizeof hex, "%04X", port);
  const std::string listening = std::string("for i in $(seq 150); do grep -qE ':") + hex +
                                " [0-9A-F]+:0000 0A' /proc/net/tcp /proc/net/tcp6 && break; "
                                "sleep 0.2; done\n";
  const CliRun run =
      shell(chief + "8,runtime.distribution_strategy=multi_worker_mirrored --model_dir='" +
            path("first") + "' 2>/dev/null &\nfirst=$!\n" + listening + chief +
            "3,runtime.distribution_strategy=multi_worker_mirrored --model_dir='" + path("second") +
            "'\nstatus=$?\nkill $first\nexit $status\n");
  EXPECT_EQ(run.status, 1) << run.err;
  EXPECT_NE(run.err.find("garden: error: the chief cannot serve the rendezvous at 127.0.0.1:" +
                         std::to_string(port)),
            std::string::npos)
      << run.err;
}

TEST_F(DistributedCliTest, AWorkerWithoutItsChiefStopsWithOneLine) {
  const int port = free_port();
  const CliRun run =
      shell("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
            " \"$GARDEN\" train --experiment=tabular/iris --mode=train --model_dir='" + path("m") +
            "' --params_override=runtime.collective_timeout_seconds=3,"
            "runtime.distribution_strategy=multi_worker_mirrored\n");
  EXPECT_EQ(run.status, 1) << run.err;
  EXPECT_NE(run.err.find("garden: error: no chief answered at 127.0.0.1:" + std::to_string(port) +
                         " within 3 s"),
            std::string::npos)
      << run.err;
  EXPECT_FALSE(fs::exists(path("m"))) << "a worker that is not the chief wrote model_dir";
}

TEST_F(DistributedCliTest, LaunchRefusesWhatItCannotDo) {
  CliRun run =
      garden("launch --nproc_per_node=2 --nnodes=2 --ps=1 -- train --experiment=tabular/iris");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("--ps starts a parameter-server cluster on one machine"),
            std::string::npos)
      << run.err;
  run = garden("launch --nproc_per_node=2");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("no command after '--'"), std::string::npos) << run.err;
  run = garden("launch --nproc_per_node=0 -- experiments");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("--nproc_per_node"), std::string::npos) << run.err;
  run = garden("launch --master_port=65535 --max_restarts=1 -- experiments");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("is above 65535 (each restart rendezvouses one port higher)"),
            std::string::npos)
      << run.err;
  // A strategy of one process with several is refused by every worker.
  run = garden("launch --nproc_per_node=2 --master_port=" + std::to_string(free_port()) +
               " -- train --experiment=tabular/iris --model_dir='" + path("m") +
               "' --params_override=runtime.distribution_strategy=one_device");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find("runtime.distribution_strategy"), std::string::npos) << run.err;
}

// CpuShare (docs/runtime.md, Threads) changes a run's thread count while
// other processes keep cores busy: safe because the count does not change
// the results. A small translation model (attention, layer norm, the
// products, label-smoothed cross-entropy, Adam) on one thread and on two
// ends with bitwise equal weights.
TEST_F(DistributedCliTest, TheThreadCountDoesNotChangeTheWeights) {
  const std::string data = std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv";
  for (const char* threads : {"1", "2"}) {
    const CliRun run = garden(
        "train --experiment wmt_transformer/demo --mode train --model_dir '" +
        path(std::string("threads") + threads) +
        "' --params_override task.sentencepiece_vocab_size=300,task.model.embedding_width=32,"
        "task.model.encoder.num_layers=1,task.model.decoder.num_layers=1,"
        "task.train_data.input_path=" +
        data + ",task.validation_data.input_path=" + data +
        ",task.train_data.global_batch_size=256,trainer.train_steps=20,trainer.steps_per_loop=10,"
        "trainer.checkpoint_interval=20,runtime.intra_op_parallelism_threads=" +
        threads);
    ASSERT_EQ(run.status, 0) << run.err;
  }
  expect_same_weights(path("threads1"), path("threads2"), 0.0);
}

// use_sync_bn: two workers with 4 images each train as one process with the
// 8 (whose batch norms see the 8 alone); without it, each worker's batch
// norms see its 4 and the weights differ. A quarter-width ResNet-10 on 16 x
// 16 PNG records of two noisy colours, no augmentation, 10 steps on one
// thread each. (The sums' order differs between 8 rows and 4 + 4, and
// differs again on another thread count, which CpuShare changes on a loaded
// machine: after 10 steps the weights differ by about 1e-7; once the loss
// falls fast, batch norms over 8 values amplify that, to 1e-4 by step 20.)
TEST_F(DistributedCliTest, SyncBatchNormOnTwoWorkersEndsWithOneProcesssWeights) {
  const std::string records = path("images.tfrecord");
  {
    garden::data::TFRecordWriter writer(records);
    torch::manual_seed(3);
    for (int i = 0; i < 40; ++i) {
      garden::vision::Image image;
      image.height = image.width = 16;
      image.channels = 3;
      const at::Tensor noise = torch::randint(0, 120, {16 * 16 * 3});
      for (int64_t p = 0; p < noise.numel(); ++p)
        image.pixels.push_back(static_cast<uint8_t>(noise[p].item<int64_t>() +
                                                    ((p % 3 == 0) == (i % 2 == 0) ? 120 : 0)));
      garden::data::Example example;
      example["image/encoded"] =
          garden::data::FeatureValue::of_bytes({garden::vision::encode_png(image)});
      example["image/class/label"] = garden::data::FeatureValue::of_ints({i % 2});
      writer.write(garden::data::serialize_example(example));
    }
    writer.close();
  }
  const std::string overrides =
      "task.train_data.input_path=" + records + ",task.validation_data.input_path=" + records +
      ",task.model.num_classes=2,task.model.input_size=[16,16,3],"
      "task.model.backbone.resnet.depth_multiplier=0.25,task.train_data.global_batch_size=8,"
      "task.train_data.sharding=false,task.train_data.shuffle_buffer_size=40,runtime.seed=4,"
      "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5,"
      "trainer.checkpoint_interval=10,runtime.intra_op_parallelism_threads=1";
  const auto train = [&](const std::string& name, int workers, const std::string& more) {
    const std::string command = "train --experiment=vision/mnist --mode=train --model_dir='" +
                                path(name) + "' --params_override='" + overrides + more;
    if (workers == 1) return shell("\"$GARDEN\" " + command + "'\n");
    return shell(
        "\"$GARDEN\" launch --nproc_per_node=2 --master_port=" + std::to_string(free_port()) +
        " -- " + command + ",runtime.distribution_strategy=multi_worker_mirrored'\n");
  };
  const CliRun one = train("one", 1, ",task.model.norm_activation.use_sync_bn=true");
  ASSERT_EQ(one.status, 0) << one.err;
  const CliRun synced = train("synced", 2, ",task.model.norm_activation.use_sync_bn=true");
  ASSERT_EQ(synced.status, 0) << synced.err;
  const CliRun local = train("local", 2, "");
  ASSERT_EQ(local.status, 0) << local.err;

  const auto weights = final_weights(path("one"));
  ASSERT_TRUE(weights.count("model/backbone.stem_norms.0.running_var")) << weights.size();
  expect_same_weights(path("synced"), path("one"), 1e-5);
  // Each worker's own batch norms: not what one process computes.
  const auto local_weights = final_weights(path("local"));
  double largest = 0;
  for (const auto& [name, tensor] : weights)
    largest = std::max(largest, (tensor.to(at::kDouble) - local_weights.at(name).to(at::kDouble))
                                    .abs()
                                    .max()
                                    .item<double>());
  EXPECT_GT(largest, 1e-3);
}
