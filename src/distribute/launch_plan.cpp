#include "garden/distribute/launch_plan.h"

#include <algorithm>

#include "garden/base/error.h"
#include "garden/distribute/cluster.h"

namespace garden::distribute {

namespace {
// What a launched process must not inherit from garden launch's own
// environment: another cluster's description.
const std::vector<std::string>& inherited_cluster() {
  static const std::vector<std::string> names = {"TF_CONFIG", "SLURM_PROCID", "SLURM_NTASKS",
                                                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"};
  return names;
}

// A process given TF_CONFIG must not also see torchrun's variables.
std::vector<std::string> inherited_cluster_and_torchrun() {
  auto names = inherited_cluster();
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    names.emplace_back(name);
  return names;
}
}  // namespace

void check_launch(const LaunchOptions& options, const std::vector<std::string>& command) {
  if (options.ps > 0 && options.nnodes > 1)
    throw Error(
        "--ps starts a parameter-server cluster on one machine; on several, give each process "
        "its TF_CONFIG (see docs/distributed.md)");
  if (options.master_port + options.max_restarts > 65535)
    throw Error("--master_port " + std::to_string(options.master_port) + " + --max_restarts " +
                std::to_string(options.max_restarts) +
                " is above 65535 (each restart rendezvouses one port higher)");
  if (options.node_rank >= options.nnodes)
    throw Error("--node_rank " + std::to_string(options.node_rank) + " is not below --nnodes " +
                std::to_string(options.nnodes));
  if (command.empty()) throw Error("no command after '--' (e.g. -- train --experiment=...)");
  if (command.front() == "launch") throw Error("the command after '--' cannot be launch itself");
}

int64_t busy_processes(const LaunchOptions& options) {
  return options.nproc_per_node + (options.evaluator && options.node_rank == 0 ? 1 : 0);
}

EnvironmentList thread_environment(const LaunchOptions& options, int64_t cores, bool user_chose) {
  if (user_chose) return {};
  const std::string each = std::to_string(std::max<int64_t>(1, cores / busy_processes(options)));
  return {{"OMP_NUM_THREADS", each}, {"OPENBLAS_NUM_THREADS", each}};
}

std::vector<LaunchProcess> launch_plan(const LaunchOptions& options, int64_t round,
                                       const EnvironmentList& common) {
  std::vector<LaunchProcess> plan;
  const std::string port = std::to_string(options.master_port + round);
  const EnvironmentList restarts = {
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(round)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts)}};
  // TF_CONFIG's hosts: the chief's address is the rendezvous (the other
  // entries name the hosts; Garden listens on no other port).
  const std::string address = options.master_addr + ":" + port;
  const auto hosts = [&](int64_t n) { return std::vector<std::string>(n, address); };
  const auto add = [&](std::string name, std::string prefix, EnvironmentList env,
                       std::vector<std::string> unset) {
    EnvironmentList all = common;
    all.insert(all.end(), env.begin(), env.end());
    plan.push_back({std::move(name), std::move(prefix), std::move(all), std::move(unset)});
  };

  if (options.ps > 0) {
    TfConfigJobs jobs = {
        {"chief", hosts(1)}, {"worker", hosts(options.nproc_per_node)}, {"ps", hosts(options.ps)}};
    if (options.evaluator) jobs.emplace_back("evaluator", hosts(1));
    const auto task = [&](const std::string& type, int64_t index, std::string name,
                          std::string prefix) {
      EnvironmentList env = {{"TF_CONFIG", write_tf_config(jobs, type, index)}};
      env.insert(env.end(), restarts.begin(), restarts.end());
      add(std::move(name), std::move(prefix), std::move(env), inherited_cluster_and_torchrun());
    };
    task("chief", 0, "the chief", "[chief] ");
    for (int64_t i = 0; i < options.nproc_per_node; ++i)
      task("worker", i, "worker " + std::to_string(i), "[worker " + std::to_string(i) + "] ");
    for (int64_t i = 0; i < options.ps; ++i)
      task("ps", i, "ps " + std::to_string(i), "[ps " + std::to_string(i) + "] ");
    if (options.evaluator) task("evaluator", 0, "the evaluator", "[evaluator] ");
    return plan;
  }

  const int64_t world = options.nnodes * options.nproc_per_node;
  for (int64_t local = 0; local < options.nproc_per_node; ++local) {
    const int64_t rank = options.node_rank * options.nproc_per_node + local;
    EnvironmentList env = {{"RANK", std::to_string(rank)},
                           {"WORLD_SIZE", std::to_string(world)},
                           {"LOCAL_RANK", std::to_string(local)},
                           {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
                           {"MASTER_ADDR", options.master_addr},
                           {"MASTER_PORT", port},
                           {"GROUP_RANK", std::to_string(options.node_rank)}};
    env.insert(env.end(), restarts.begin(), restarts.end());
    add("rank " + std::to_string(rank), "[rank " + std::to_string(rank) + "] ", std::move(env),
        inherited_cluster());
  }
  if (options.evaluator && options.node_rank == 0)
    add("the evaluator", "[evaluator] ",
        {{"TF_CONFIG", write_tf_config({{"chief", hosts(1)}}, "evaluator", 0)}},
        inherited_cluster_and_torchrun());
  return plan;
}

}  // namespace garden::distribute
