// Which process this is in which cluster: one function reads every form a
// user may give (TF_CONFIG, torchrun's variables, SLURM, OpenMPI, or Model
// Garden's runtime.worker_hosts / task_index) and says it the same way.
//
//   auto cluster = resolve_cluster(process_environment(), params->runtime);
//   if (cluster.distributed()) ... connect a ProcessGroup ...
//
// The training replicas are numbered 0..world_size-1; rank 0 is the chief
// (TF_CONFIG's chief, or worker 0 when there is none). An evaluator task is
// not a replica: it evaluates the chief's checkpoints (continuous_eval).
// With parameter servers (TF_CONFIG's ps tasks), the ranks are the chief
// (0, the coordinator), the workers (1..num_workers), then the ps tasks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/config/definitions.h"

namespace garden::distribute {

using Environment = std::map<std::string, std::string>;

// This process's environment variables.
Environment process_environment();

struct Cluster {
  // Where the description came from: "none", "TF_CONFIG", "torchrun",
  // "SLURM", "OpenMPI" or "runtime.worker_hosts".
  std::string source = "none";
  // The strategy in effect: one_device (one process),
  // multi_worker_mirrored or parameter_server.
  std::string strategy = "one_device";
  // chief, worker, ps or evaluator (TF_CONFIG's task type; master is chief).
  std::string task_type = "chief";
  int64_t task_index = 0;
  // Among the training replicas; -1 for an evaluator.
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  // The chief's address: its TCPStore listens there.
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The address this process's Gloo connections bind to; empty means the
  // machine's host name (or GLOO_SOCKET_IFNAME's interface).
  std::string own_host;

  // With parameter servers: the workers besides the chief, and the ps tasks.
  int64_t num_workers = 0;
  int64_t num_ps = 0;

  bool distributed() const { return world_size > 1; }
  bool parameter_server() const { return strategy == "parameter_server"; }
  bool is_ps() const { return task_type == "ps"; }
  bool is_chief() const { return rank == 0; }
  bool is_evaluator() const { return task_type == "evaluator"; }
  // From TF_CONFIG: each rank's task ("chief 0", "worker 1", "ps 0"), by
  // rank; empty otherwise.
  std::vector<std::string> rank_tasks;
  // "rank 1 (worker 0)": how messages name a process.
  std::string describe() const;
  // How messages name another rank of the cluster ("rank 2 (ps 0)").
  std::string describe_rank(int64_t other) const;
};

// TF_CONFIG's JSON, read and checked once for every reader of it (here and
// TensorFX's Configuration): an object; "cluster", when present, an object
// of job lists of strings (chief or master, worker, ps, evaluator; at most
// one chief, not under both names); "task", when present, an object with a
// string "type" and a whole "index" >= 0 (0 when absent). "" reads as {}.
// Errors name what is wrong, as "TF_CONFIG ...".
struct TfConfig {
  nlohmann::json json;     // the whole object
  nlohmann::json cluster;  // as written; null when absent
  // The cluster's hosts by job, master's under "chief".
  std::map<std::string, std::vector<std::string>> jobs;
  bool has_task = false;
  std::string task_type;  // as written ("master" stays "master")
  int64_t task_index = 0;
};
TfConfig parse_tf_config(const std::string& text);

// TF_CONFIG for one task of a cluster: {"cluster": {job: [host, ...]},
// "task": {"type": ..., "index": ...}}, the jobs in the order given (what
// parse_tf_config reads back).
using TfConfigJobs = std::vector<std::pair<std::string, std::vector<std::string>>>;
std::string write_tf_config(const TfConfigJobs& jobs, const std::string& task_type,
                            int64_t task_index);

// Reads the cluster from `env` and `runtime`. Precedence: TF_CONFIG,
// torchrun (RANK / WORLD_SIZE), SLURM (SLURM_PROCID / SLURM_NTASKS), OpenMPI
// (OMPI_COMM_WORLD_RANK / SIZE), runtime.worker_hosts. A malformed or
// contradictory description throws garden::Error naming the variable and why.
// Several processes with distribution_strategy off or one_device are
// refused; mirrored (the default) with several processes means
// multi_worker_mirrored. parameter_server needs TF_CONFIG with a chief, at
// least one worker and ps tasks (garden launch --ps writes it); ps tasks
// with another strategy are refused.
Cluster resolve_cluster(const Environment& env, const config::RuntimeConfig& runtime);

// The device this process trains on: `cuda` (no index) in a run of several
// processes means the GPU of the process's local rank, `cuda:<local_rank>`,
// as torchrun's scripts choose it; any other setting is kept.
std::string process_device(const Cluster& cluster, const std::string& device);

// "node[01-04,07],other" -> "node01": the first host of a SLURM node list.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace garden::distribute
