// What the multi-worker CLI tests share: a free port, a run's final weights
// and their comparison, and a bash script run with $GARDEN set.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cli/cli_fixture.h"
#include "garden/core/checkpoint.h"
#include "garden/distribute/cluster.h"

namespace garden_test {

// tabular/iris with plain SGD (its update is proportional to the gradient,
// Adam's is not) over 60 steps, a global batch of 15 rows,
// checkpointed at the end: split 8 + 7 or 4 + 4 + 4 + 3 over workers, a
// loss averaged per worker rather than over the global count would show.
inline const std::string kIris =
    "runtime.seed=7,task.model.dropout_rate=0,trainer.train_steps=60,trainer.steps_per_loop=10,"
    "trainer.checkpoint_interval=60,task.train_data.sharding=false,"
    "task.train_data.global_batch_size=15,trainer.optimizer_config.optimizer.type=sgd,"
    "trainer.optimizer_config.learning_rate.constant.learning_rate=0.1";

// A port nothing listens on now (the kernel's choice for port 0).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// Rank `rank` of a torchrun-style cluster of `world_size` processes (or
// threads) on loopback, its chief at 127.0.0.1:`port`.
inline garden::distribute::Cluster loopback_cluster(int64_t rank, int64_t world_size, int port) {
  garden::distribute::Cluster cluster;
  cluster.source = "torchrun";
  cluster.strategy = "multi_worker_mirrored";
  cluster.rank = rank;
  cluster.world_size = world_size;
  cluster.master_addr = "127.0.0.1";
  cluster.master_port = port;
  cluster.own_host = "127.0.0.1";
  return cluster;
}

inline std::map<std::string, at::Tensor> final_weights(const std::string& model_dir) {
  const auto latest = garden::latest_checkpoint(model_dir);
  if (!latest) return {};
  std::map<std::string, at::Tensor> weights;
  for (const auto& [name, tensor] : garden::read_checkpoint_file(*latest).tensors)
    if (name.rfind("model/", 0) == 0) weights[name] = tensor;
  return weights;
}

// Every weight of `a` equals `b`'s within float tolerance (exactly with 0):
// no element further than `max_difference` (relative to the tensor's scale
// when that is above 1), and the mean difference below `mean_difference`.
// Adam divides by the root of the squared gradients, so on a gradient near
// zero a different summation order can move an element by up to about one
// learning rate per step: the maximum is looser than the mean.
inline void expect_same_weights(const std::string& a, const std::string& b, double max_difference,
                                double mean_difference = -1.0) {
  if (mean_difference < 0) mean_difference = max_difference;
  const auto wa = final_weights(a), wb = final_weights(b);
  ASSERT_FALSE(wa.empty()) << "no checkpoint in " << a;
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, tensor] : wa) {
    ASSERT_TRUE(wb.count(name)) << name;
    const at::Tensor difference = (tensor - wb.at(name)).abs().to(torch::kFloat64);
    const double scale = std::max(1.0, tensor.abs().max().item<double>());
    EXPECT_LE(difference.max().item<double>(), max_difference * scale) << name;
    EXPECT_LE(difference.mean().item<double>(), mean_difference * scale) << name;
  }
}

// Runs `script` in bash with the garden binary as $GARDEN, its files in
// `dir`; killed after `seconds`.
inline CliRun run_shell(const std::filesystem::path& dir, const std::string& script,
                        int seconds = 240) {
  spit(dir / "script.sh", script);
  const auto out = dir / "script.out", err = dir / "script.err";
  return run_captured("GARDEN='" + std::string(GARDEN_CLI_PATH) + "' /usr/bin/timeout " +
                          std::to_string(seconds) + " bash '" + (dir / "script.sh").string() + "'",
                      out, err);
}

// What the multi-worker tests of tests/cli share: `garden launch` lines for
// tabular/iris (mirrored, parameter servers) and TensorFX's iris sample, a
// shell script, and a signal to one of launch's children.
class DistributedCliFixture : public CliFixture {
 protected:
  CliRun shell(const std::string& script) const { return run_shell(dir_, script); }

  // `garden train` of tabular/iris with `overrides`, as one process or via
  // `garden launch` with `workers` processes.
  CliRun iris(const std::string& model_dir, int workers, const std::string& overrides,
              const std::string& extra_launch = "") const {
    const std::string train = "train --experiment=tabular/iris --mode=train --model_dir='" +
                              model_dir + "' --params_override='" + overrides + "'";
    if (workers == 1) return garden(train);
    return garden("launch --nproc_per_node=" + std::to_string(workers) +
                  " --master_port=" + std::to_string(free_port()) + " " + extra_launch + " -- " +
                  train + ",runtime.distribution_strategy=multi_worker_mirrored");
  }

  // `garden fx train` of TensorFX's iris sample (absolute paths), with
  // `extra` arguments.
  static std::string fx_iris(const std::string& output, const std::string& extra) {
    const std::string data = std::string(GARDEN_DATA_DIR) + "/fx/iris/";
    return "fx train --model feedforward_classification --output '" + output + "' --data-train '" +
           data + "train.csv' --data-eval '" + data + "eval.csv' --data-schema '" + data +
           "schema.yaml' --data-metadata '" + data + "metadata.json' --data-features '" + data +
           "features.yaml' " + extra;
  }
  // The same through `garden launch --ps`: a master, `workers` workers and
  // `ps` ps tasks.
  CliRun launch_fx(const std::string& output, int workers, int ps, const std::string& extra) const {
    return garden("launch --nproc_per_node=" + std::to_string(workers) +
                  " --ps=" + std::to_string(ps) + " --master_port=" + std::to_string(free_port()) +
                  " -- " + fx_iris(output, extra));
  }

  // `garden launch --ps`: a chief, `workers` workers and `ps` ps tasks.
  CliRun launch_ps(const std::string& model_dir, int workers, int ps, const std::string& overrides,
                   const std::string& mode = "train") const {
    return garden("launch --nproc_per_node=" + std::to_string(workers) +
                  " --ps=" + std::to_string(ps) + " --master_port=" + std::to_string(free_port()) +
                  " -- train --experiment=tabular/iris --mode=" + mode + " --model_dir='" +
                  model_dir + "' --params_override='" + overrides +
                  ",runtime.distribution_strategy=parameter_server'");
  }

  // A shell line: `garden launch` of 2 mirrored workers training
  // tabular/iris into `model_dir`.
  static std::string launch_iris(const std::string& model_dir, const std::string& overrides) {
    return "\"$GARDEN\" launch --nproc_per_node=2 --master_port=" + std::to_string(free_port()) +
           " -- train --experiment=tabular/iris --mode=train --model_dir='" + model_dir +
           "' --params_override='" + overrides +
           ",runtime.distribution_strategy=multi_worker_mirrored'";
  }
  // Runs the `launch` line, sends `signal` to launch's `child`-th child
  // (in start order: 2 is rank 1 of a mirrored launch; with --ps, 1 is the
  // chief, then the workers, then the ps tasks) once `file` exists, and
  // returns the launch's status and stderr.
  CliRun signal_child(const std::string& launch, const std::string& file, const std::string& signal,
                      int child) const {
    return shell(launch + " 2>'" + path("launch.err") + "' &\nlauncher=$!\n" +
                 "for i in $(seq 1 3000); do [ -e '" + file + "' ] && break; sleep 0.01; done\n" +
                 "victim=$(pgrep -P $launcher | sort -n | sed -n " + std::to_string(child) +
                 "p)\nkill -" + signal + " $victim\nwait $launcher; status=$?\ncat '" +
                 path("launch.err") + "' >&2\nexit $status\n");
  }
};

}  // namespace garden_test
