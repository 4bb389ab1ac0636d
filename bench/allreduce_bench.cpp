// Collective benchmark (issue 12): how long Garden's process group takes to
// all-reduce (sum) a float32 tensor of each size among WORKERS processes,
// Gloo over loopback here, as nccl-tests' all_reduce_perf measures GPUs. A
// multi-worker step waits at least this long after backward for its last
// gradient bucket (`all_reduce_wait_ms` in train.log), which cannot start
// before backward ends. Rank 0 prints one JSON line per size: the median,
// fastest and slowest of the timed all-reduces, and the bandwidths as
// nccl-tests counts them (algorithm: bytes / time; bus: that times
// 2 (n - 1) / n, what each process sends and receives).
//
//   allreduce_bench [--workers 2] [--mb 1,6,24] [--iters 15] [--dtype float16]
//   (sizes in MiB of float32: --dtype float16 sums as many elements in half
//   the bytes, as runtime.gradient_compression fp16 sends them)
//   (--workers only where it starts the processes itself)
//   allreduce_bench --smoke          # CI: 2 workers, 1 MB, 3 all-reduces
//
// Without RANK in its environment it starts WORKERS copies of itself on this
// machine (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a MASTER_PORT of its own,
// one thread each) and waits for them; with RANK set (torchrun's variables,
// TF_CONFIG, SLURM's or OpenMPI's, as `garden train` reads them) it is one of them, so
// the same binary measures several machines. Before timing, each size is
// checked: every rank contributes rank + 1 and must get n (n + 1) / 2.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/config/definitions.h"
#include "garden/distribute/cluster.h"
#include "garden/distribute/process_group.h"

namespace {

struct Options {
  int workers = 2;
  bool workers_given = false;  // --workers on the command line
  std::vector<double> megabytes = {1, 6, 24};
  int iters = 15;
  at::ScalarType dtype = at::kFloat;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "allreduce_bench: " << why
            << "\nusage: allreduce_bench [--workers N] [--mb 1,6,24] [--iters I] "
               "[--dtype float32|float16] | --smoke\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--smoke") {
      o.workers = 2;
      o.megabytes = {1};
      o.iters = 3;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "--workers") {
        o.workers = std::stoi(value);
        o.workers_given = true;
      } else if (flag == "--dtype") {
        if (value != "float32" && value != "float16")
          usage("--dtype is float32 or float16, not '" + value + "'");
        o.dtype = value == "float16" ? at::kHalf : at::kFloat;
      } else if (flag == "--iters") {
        o.iters = std::stoi(value);
      } else if (flag == "--mb") {
        o.megabytes.clear();
        std::stringstream list(value);
        for (std::string item; std::getline(list, item, ',');)
          o.megabytes.push_back(std::stod(item));
      } else {
        usage("unknown flag " + flag);
      }
    } catch (const std::logic_error&) {
      usage(flag + " takes a number, not '" + value + "'");
    }
  }
  if (o.workers < 2) usage("--workers must be at least 2");
  if (o.iters < 1) usage("--iters must be at least 1");
  if (o.megabytes.empty()) usage("--mb needs at least one size");
  for (double mb : o.megabytes)
    if (!(mb > 0)) usage("every --mb size must be positive");
  return o;
}

// One process of the run: joins the group, checks and times each size.
int worker(const Options& o) {
  garden::config::RuntimeConfig runtime;
  runtime.distribution_strategy = "multi_worker_mirrored";
  const auto cluster =
      garden::distribute::resolve_cluster(garden::distribute::process_environment(), runtime);
  const auto group =
      garden::distribute::ProcessGroup::connect(cluster, "cpu", std::chrono::seconds(60));
  // The environment gives a run's size when it names the ranks.
  if (o.workers_given && o.workers != group->size())
    throw garden::Error("--workers " + std::to_string(o.workers) + " but the environment makes " +
                        std::to_string(group->size()) + " processes (" + cluster.describe() +
                        "); leave --workers out when RANK or TF_CONFIG is set");
  const auto n = static_cast<double>(group->size());
  for (double mb : o.megabytes) {
    const auto count = std::max<int64_t>(1, static_cast<int64_t>(mb * 1024 * 1024 / 4));
    std::vector<at::Tensor> tensor = {
        at::full({count}, static_cast<float>(group->rank() + 1), at::dtype(o.dtype))};
    group->all_reduce(tensor, garden::distribute::ReduceOp::kSum, "the check");
    const float expected = static_cast<float>(n * (n + 1) / 2);
    if (!at::all(tensor[0].to(at::kFloat) == expected).item<bool>())
      throw garden::Error("the all-reduce of " + std::to_string(count) + " " +
                          c10::toString(o.dtype) + " did not give every element " +
                          std::to_string(expected));
    std::vector<double> ms;
    for (int i = 0; i < o.iters; ++i) {
      tensor[0].fill_(1.0f);
      const auto start = std::chrono::steady_clock::now();
      group->all_reduce(tensor, garden::distribute::ReduceOp::kSum, "a timed all-reduce");
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double bytes = static_cast<double>(count * tensor[0].element_size());
    const double algorithm_gbps = bytes / (median / 1e3) / 1e9;
    if (group->is_chief())
      std::cout << nlohmann::ordered_json{{"bench", "allreduce"},
                                          {"backend", "gloo"},
                                          {"workers", group->size()},
                                          {"dtype", c10::toString(o.dtype)},
                                          {"megabytes", bytes / 1024 / 1024},
                                          {"iters", o.iters},
                                          {"median_ms", median},
                                          {"min_ms", ms.front()},
                                          {"max_ms", ms.back()},
                                          {"algorithm_gbps", algorithm_gbps},
                                          {"bus_gbps", algorithm_gbps * 2 * (n - 1) / n}}
                       .dump()
                << std::endl;
  }
  return 0;
}

// Starts o.workers copies of this program as the ranks of one run.
int launch(const Options& o, char** argv) {
  const std::string port = std::to_string(20000 + getpid() % 10000);
  std::vector<pid_t> children;
  for (int rank = 0; rank < o.workers; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("allreduce_bench: fork");
      return 1;
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(o.workers).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("OMP_NUM_THREADS", "1", 1);
      execv("/proc/self/exe", argv);
      std::perror("allreduce_bench: exec");
      _exit(127);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (std::size_t left = children.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (!failed)
        for (pid_t other : children)
          if (other != pid) kill(other, SIGTERM);
      failed = 1;
    }
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!std::getenv("RANK") && !std::getenv("TF_CONFIG") && !std::getenv("SLURM_PROCID") &&
      !std::getenv("OMPI_COMM_WORLD_RANK"))
    return launch(o, argv);
  at::set_num_threads(1);
  try {
    return worker(o);
  } catch (const std::exception& e) {
    std::cerr << "allreduce_bench: " << e.what() << "\n";
    return 1;
  }
}
