// What `garden launch` starts, decided without starting anything: for each
// round of the group (round R after R restarts), the processes of this
// machine with the environment each gets (torchrun's variables, or
// TF_CONFIG with parameter servers or an evaluator) and the variables each
// must not inherit. src/cli/launch_command.cpp runs the plan (its
// supervisor forks, multiplexes the output, stops and restarts).
//
//   LaunchOptions options;  options.nproc_per_node = 2;
//   check_launch(options, command);                       // throws on a refusal
//   for (const auto& process : launch_plan(options, 0, thread_environment(options, cores)))
//     ... start `command` with process.env, process.unset ...
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace garden::distribute {

// garden launch's flags (torchrun's names and defaults).
struct LaunchOptions {
  int64_t nproc_per_node = 1;
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  int64_t ps = 0;  // parameter-server tasks (one machine only)
  bool evaluator = false;
  int64_t max_restarts = 0;
};

using EnvironmentList = std::vector<std::pair<std::string, std::string>>;

// One process to start.
struct LaunchProcess {
  std::string name;                // how messages name it: "rank 1", "the chief", "worker 0"
  std::string prefix;              // put before each of its output lines: "[rank 1] "
  EnvironmentList env;             // set, in this order
  std::vector<std::string> unset;  // removed from the inherited environment
};

// Throws garden::Error with one line ("--node_rank 2 is not below --nnodes
// 2") when `options` and `command` (what follows `--`) cannot be launched.
void check_launch(const LaunchOptions& options, const std::vector<std::string>& command);

// The processes this machine starts that use its cores for training: the
// training processes (workers with parameter servers) and, on the chief's
// machine, the evaluator.
int64_t busy_processes(const LaunchOptions& options);

// torchrun's share of the cores: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS of
// `cores` / busy_processes (at least 1) for each process; empty when the
// user chose either (`user_chose`).
EnvironmentList thread_environment(const LaunchOptions& options, int64_t cores, bool user_chose);

// Round `round`'s processes, in start order: rank 0 first (with parameter
// servers: the chief, the workers, the ps tasks), then the evaluator. Each
// gets `common` first. Round R rendezvouses at master_port + R, so a chief
// of the round before that is still stopping cannot take the new round's
// workers.
std::vector<LaunchProcess> launch_plan(const LaunchOptions& options, int64_t round,
                                       const EnvironmentList& common);

}  // namespace garden::distribute
