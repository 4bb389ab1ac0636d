#include "garden/distribute/cluster.h"

#include <unistd.h>  // environ
#include <nlohmann/json.hpp>

#include <cctype>
#include <charconv>

#include "garden/base/error.h"

namespace garden::distribute {

Environment process_environment() {
  Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text(*entry);
    const auto equals = text.find('=');
    if (equals != std::string::npos) env[text.substr(0, equals)] = text.substr(equals + 1);
  }
  return env;
}

std::string Cluster::describe() const {
  if (is_evaluator()) return "the evaluator";
  std::string text = "rank " + std::to_string(rank);
  if (source == "TF_CONFIG") text += " (" + task_type + " " + std::to_string(task_index) + ")";
  return text;
}

std::string Cluster::describe_rank(int64_t other) const {
  if (other == rank) return describe();
  std::string text = "rank " + std::to_string(other);
  if (other >= 0 && other < static_cast<int64_t>(rank_tasks.size()))
    text += " (" + rank_tasks[static_cast<std::size_t>(other)] + ")";
  return text;
}

std::string write_tf_config(const TfConfigJobs& jobs, const std::string& task_type,
                            int64_t task_index) {
  nlohmann::ordered_json cluster = nlohmann::ordered_json::object();
  for (const auto& [job, hosts] : jobs) cluster[job] = hosts;
  nlohmann::ordered_json config;
  config["cluster"] = std::move(cluster);
  config["task"] = {{"type", task_type}, {"index", task_index}};
  return config.dump();
}

TfConfig parse_tf_config(const std::string& text) {
  TfConfig tf;
  try {
    tf.json = text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("TF_CONFIG is not valid JSON: " + std::string(e.what()));
  }
  if (!tf.json.is_object())
    throw Error("TF_CONFIG must be a JSON object with 'cluster' and 'task'");
  if (tf.json.contains("cluster")) {
    tf.cluster = tf.json.at("cluster");
    if (!tf.cluster.is_object() && !tf.cluster.is_null())
      throw Error("TF_CONFIG 'cluster' must be an object of job lists");
  }
  if (tf.cluster.is_object()) {
    for (const auto& [job, hosts] : tf.cluster.items()) {
      if (job != "chief" && job != "master" && job != "worker" && job != "ps" && job != "evaluator")
        throw Error("TF_CONFIG cluster has job '" + job +
                    "'; the jobs are chief (or master), worker, ps and evaluator");
      if (!hosts.is_array())
        throw Error("TF_CONFIG cluster." + job + " must be a list of host:port");
      for (const auto& host : hosts) {
        if (!host.is_string())
          throw Error("TF_CONFIG cluster." + job + " holds " + host.dump() + ", not \"host:port\"");
        tf.jobs[job == "master" ? "chief" : job].push_back(host.get<std::string>());
      }
    }
    if (tf.cluster.contains("chief") && tf.cluster.contains("master"))
      throw Error("TF_CONFIG cluster has both chief and master (the same job under two names)");
    if (tf.jobs["chief"].size() > 1)
      throw Error("TF_CONFIG cluster.chief has " + std::to_string(tf.jobs["chief"].size()) +
                  " hosts; there is at most one chief");
  }
  if (tf.json.contains("task") && !(tf.json.at("task").is_object() && tf.json.at("task").empty())) {
    const auto& task = tf.json.at("task");
    if (!task.is_object())
      throw Error("TF_CONFIG has no 'task' object ({\"type\": ..., \"index\": ...})");
    if (!task.contains("type") || !task["type"].is_string())
      throw Error("TF_CONFIG task.type must be a string (chief, worker or evaluator)");
    tf.task_type = task["type"].get<std::string>();
    const auto index_json = task.value("index", nlohmann::json(0));
    if (!index_json.is_number_integer() || index_json.get<int64_t>() < 0)
      throw Error("TF_CONFIG task.index must be a whole number >= 0, not " + index_json.dump());
    tf.task_index = index_json.get<int64_t>();
    tf.has_task = true;
  }
  return tf;
}

namespace {

const char* get(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

// A whole number in [low, high] from `text`, or an error naming `what`.
int64_t parse_int(const std::string& text, const std::string& what, int64_t low, int64_t high) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    throw Error(what + "='" + text + "' is not a whole number");
  if (value < low || value > high)
    throw Error(what + "=" + text + " is out of range; must be in [" + std::to_string(low) + ", " +
                std::to_string(high) + "]");
  return value;
}

int64_t env_int(const Environment& env, const std::string& name, int64_t low, int64_t high) {
  return parse_int(get(env, name), name, low, high);
}

constexpr int64_t kMaxProcesses = 1 << 16;

// "host:port" -> host, port; `what` names where the address came from.
std::pair<std::string, int> split_address(const std::string& address, const std::string& what) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw Error(what + " '" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const int port = static_cast<int>(
      parse_int(address.substr(colon + 1), what + " '" + address + "' port", 1, 65535));
  return {host, port};
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The master's address from MASTER_ADDR / MASTER_PORT (required, or
// defaulted, as `source` needs).
void read_master(const Environment& env, Cluster& cluster, const std::string& source,
                 const std::string& default_host) {
  const char* addr = get(env, "MASTER_ADDR");
  if (addr && !*addr) throw Error("MASTER_ADDR is empty");
  if (!addr && default_host.empty() && cluster.world_size > 1)
    throw Error(source + " describes " + std::to_string(cluster.world_size) +
                " processes but MASTER_ADDR is not set: set it to the chief's host");
  cluster.master_addr = addr ? addr : default_host.empty() ? "127.0.0.1" : default_host;
  if (get(env, "MASTER_PORT"))
    cluster.master_port = static_cast<int>(env_int(env, "MASTER_PORT", 1, 65535));
  if (is_loopback(cluster.master_addr)) cluster.own_host = "127.0.0.1";
}

Cluster from_tf_config(const std::string& text) {
  const TfConfig tf = parse_tf_config(text);
  if (!tf.has_task) throw Error("TF_CONFIG has no 'task' object ({\"type\": ..., \"index\": ...})");
  std::string type = tf.task_type == "master" ? "chief" : tf.task_type;
  const int64_t index = tf.task_index;
  if (type != "chief" && type != "worker" && type != "ps" && type != "evaluator")
    throw Error("TF_CONFIG task.type '" + type +
                "' is not one of chief, master, worker, ps, evaluator");
  auto jobs = tf.jobs;

  const auto& chief = jobs["chief"];
  const auto& workers = jobs["worker"];
  const auto& ps = jobs["ps"];
  Cluster cluster;
  cluster.source = "TF_CONFIG";
  cluster.task_type = type;
  cluster.task_index = index;
  cluster.world_size = static_cast<int64_t>(chief.size() + workers.size() + ps.size());
  if (chief.empty() && workers.empty())
    throw Error("TF_CONFIG cluster has no chief and no worker to train");
  if (!ps.empty()) {
    // Parameter servers: the chief coordinates, the workers compute.
    if (chief.empty())
      throw Error(
          "TF_CONFIG cluster has ps tasks but no chief: parameter_server training needs "
          "a chief to coordinate");
    if (workers.empty())
      throw Error(
          "TF_CONFIG cluster has ps tasks but no worker: parameter_server training needs "
          "at least one worker to compute");
    cluster.strategy = "parameter_server";
    cluster.num_workers = static_cast<int64_t>(workers.size());
    cluster.num_ps = static_cast<int64_t>(ps.size());
  }
  if (type != "evaluator") {
    const auto& mine = type == "chief" ? chief : type == "ps" ? ps : workers;
    if (index >= static_cast<int64_t>(mine.size()))
      throw Error("TF_CONFIG task is " + type + " " + std::to_string(index) + " but cluster." +
                  type + " has " + std::to_string(mine.size()) + " host(s)");
    cluster.rank = type == "chief" ? 0
                   : type == "ps"  ? index + static_cast<int64_t>(chief.size() + workers.size())
                                   : index + static_cast<int64_t>(chief.size());
    cluster.own_host =
        split_address(mine[index], "TF_CONFIG cluster." + type + "[" + std::to_string(index) + "]")
            .first;
  } else {
    cluster.rank = -1;
  }
  for (const auto* job : {"chief", "worker", "ps"})
    for (std::size_t i = 0; i < jobs[job].size(); ++i)
      cluster.rank_tasks.push_back(std::string(job) + " " + std::to_string(i));
  const std::string master = chief.empty() ? workers[0] : chief[0];
  const auto [host, port] = split_address(
      master, chief.empty() ? "TF_CONFIG cluster.worker[0]" : "TF_CONFIG cluster.chief[0]");
  cluster.master_addr = host;
  cluster.master_port = port;
  // Every address is checked, so a typo in another task's entry is found
  // here rather than as a hang.
  for (const auto& [job, hosts] : jobs)
    for (std::size_t i = 0; i < hosts.size(); ++i)
      split_address(hosts[i], "TF_CONFIG cluster." + job + "[" + std::to_string(i) + "]");
  return cluster;
}

Cluster from_counts(const Environment& env, const std::string& source, const std::string& rank_var,
                    const std::string& size_var, const std::string& local_var) {
  Cluster cluster;
  cluster.source = source;
  if (!get(env, size_var)) throw Error(rank_var + " is set but " + size_var + " is not");
  if (!get(env, rank_var)) throw Error(size_var + " is set but " + rank_var + " is not");
  cluster.world_size = env_int(env, size_var, 1, kMaxProcesses);
  cluster.rank = env_int(env, rank_var, 0, kMaxProcesses);
  if (cluster.rank >= cluster.world_size)
    throw Error(rank_var + "=" + std::to_string(cluster.rank) + " is not below " + size_var + "=" +
                std::to_string(cluster.world_size));
  if (get(env, local_var)) cluster.local_rank = env_int(env, local_var, 0, kMaxProcesses);
  cluster.task_type = cluster.rank == 0 ? "chief" : "worker";
  cluster.task_index = cluster.rank;
  return cluster;
}

Cluster from_worker_hosts(const config::RuntimeConfig& runtime) {
  std::vector<std::string> hosts;
  const std::string& text = *runtime.worker_hosts;
  for (std::size_t start = 0; start <= text.size();) {
    const auto comma = text.find(',', start);
    std::string host =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!host.empty() && std::isspace(static_cast<unsigned char>(host.back()))) host.pop_back();
    while (!host.empty() && std::isspace(static_cast<unsigned char>(host.front())))
      host.erase(0, 1);
    if (host.empty()) throw Error("runtime.worker_hosts '" + text + "' has an empty entry");
    hosts.push_back(host);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  Cluster cluster;
  cluster.source = "runtime.worker_hosts";
  cluster.world_size = static_cast<int64_t>(hosts.size());
  if (runtime.task_index < 0 && hosts.size() > 1)
    throw Error("runtime.worker_hosts lists " + std::to_string(hosts.size()) +
                " workers but runtime.task_index is not set: give this process's index");
  cluster.rank = std::max<int64_t>(0, runtime.task_index);
  if (cluster.rank >= cluster.world_size)
    throw Error("runtime.task_index " + std::to_string(cluster.rank) +
                " is not below the number of runtime.worker_hosts (" +
                std::to_string(cluster.world_size) + ")");
  for (std::size_t i = 0; i < hosts.size(); ++i)
    split_address(hosts[i], "runtime.worker_hosts[" + std::to_string(i) + "]");
  std::tie(cluster.master_addr, cluster.master_port) =
      split_address(hosts[0], "runtime.worker_hosts[0]");
  cluster.own_host = split_address(hosts[static_cast<std::size_t>(cluster.rank)], "").first;
  cluster.task_type = cluster.rank == 0 ? "chief" : "worker";
  cluster.task_index = cluster.rank;
  return cluster;
}

// A lower-precedence description present beside the one in use must agree.
void check_agrees(const Cluster& cluster, const Environment& env, const std::string& rank_var,
                  const std::string& size_var) {
  if (cluster.is_evaluator()) return;
  if (get(env, size_var) && env_int(env, size_var, 1, kMaxProcesses) != cluster.world_size)
    throw Error(cluster.source + " describes " + std::to_string(cluster.world_size) +
                " training processes but " + size_var + "=" + get(env, size_var) +
                "; unset one of them");
  if (get(env, rank_var) && env_int(env, rank_var, 0, kMaxProcesses) != cluster.rank)
    throw Error(cluster.source + " makes this process rank " + std::to_string(cluster.rank) +
                " but " + rank_var + "=" + get(env, rank_var) + "; unset one of them");
}

}  // namespace

std::string process_device(const Cluster& cluster, const std::string& device) {
  if (!cluster.distributed() || device != "cuda") return device;
  return "cuda:" + std::to_string(cluster.local_rank);
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry: up to the first comma outside brackets.
  int depth = 0;
  std::size_t end = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  const auto open = entry.find('[');
  if (open == std::string::npos) {
    if (entry.empty()) throw Error("SLURM_NODELIST '" + nodelist + "' names no host");
    return entry;
  }
  const auto close = entry.find(']', open);
  if (close == std::string::npos || close == open + 1)
    throw Error("SLURM_NODELIST '" + nodelist + "' has an unclosed or empty [range]");
  // The first number of the first range keeps its zero padding: node[01-04] -> node01.
  const std::string ranges = entry.substr(open + 1, close - open - 1);
  const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos)
    throw Error("SLURM_NODELIST '" + nodelist + "' has a range that does not start with a number");
  return entry.substr(0, open) + first + entry.substr(close + 1);
}

Cluster resolve_cluster(const Environment& env, const config::RuntimeConfig& runtime) {
  Cluster cluster;
  const char* tf_config = get(env, "TF_CONFIG");
  if (tf_config && std::string(tf_config).find_first_not_of(" \t\r\n") != std::string::npos) {
    cluster = from_tf_config(tf_config);
    check_agrees(cluster, env, "RANK", "WORLD_SIZE");
  } else if (get(env, "RANK") || get(env, "WORLD_SIZE")) {
    cluster = from_counts(env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK");
    read_master(env, cluster, "WORLD_SIZE", "");
  } else if (get(env, "SLURM_PROCID") && get(env, "SLURM_NTASKS")) {
    cluster = from_counts(env, "SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
    const char* nodes = get(env, "SLURM_JOB_NODELIST");
    if (!nodes) nodes = get(env, "SLURM_NODELIST");
    if (!nodes && cluster.world_size > 1 && !get(env, "MASTER_ADDR"))
      throw Error("SLURM_NTASKS=" + std::to_string(cluster.world_size) +
                  " but neither SLURM_NODELIST nor MASTER_ADDR names the chief's host");
    read_master(env, cluster, "SLURM_NTASKS", nodes ? first_slurm_host(nodes) : "127.0.0.1");
  } else if (get(env, "OMPI_COMM_WORLD_RANK") || get(env, "OMPI_COMM_WORLD_SIZE")) {
    cluster = from_counts(env, "OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK");
    // All on one node: the chief is on this host.
    const char* local_size = get(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
    const bool one_node = local_size && env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1,
                                                kMaxProcesses) == cluster.world_size;
    read_master(env, cluster, "OMPI_COMM_WORLD_SIZE", one_node ? "127.0.0.1" : "");
  }
  const bool hosts_given = runtime.worker_hosts && !runtime.worker_hosts->empty();
  if (hosts_given) {
    const Cluster from_hosts = from_worker_hosts(runtime);
    if (cluster.source == "none") {
      cluster = from_hosts;
    } else if (from_hosts.world_size != cluster.world_size ||
               (!cluster.is_evaluator() && from_hosts.rank != cluster.rank)) {
      throw Error("runtime.worker_hosts / task_index make this rank " +
                  std::to_string(from_hosts.rank) + " of " + std::to_string(from_hosts.world_size) +
                  " but " + cluster.source + " makes it rank " + std::to_string(cluster.rank) +
                  " of " + std::to_string(cluster.world_size) + "; give the cluster once");
    }
  }

  const std::string& strategy = runtime.distribution_strategy;
  if (cluster.parameter_server()) {
    if (strategy != "parameter_server")
      throw Error("TF_CONFIG has ps tasks but runtime.distribution_strategy is '" + strategy +
                  "'; set it to parameter_server, or remove the ps tasks");
    if (hosts_given)
      throw Error(
          "runtime.worker_hosts cannot describe parameter servers; give the cluster in "
          "TF_CONFIG alone");
    if (cluster.is_evaluator()) cluster.world_size = 1;
    return cluster;
  }
  if (strategy == "parameter_server")
    throw Error("runtime.distribution_strategy is parameter_server but " +
                (cluster.source == "none" ? std::string("no cluster is described")
                                          : cluster.source + " describes no ps task") +
                ": parameter_server needs TF_CONFIG with chief, worker and ps tasks (garden "
                "launch --ps=K writes it)");
  if (cluster.distributed() && !cluster.is_evaluator()) {
    if (strategy == "off" || strategy == "one_device")
      throw Error(cluster.source + " describes " + std::to_string(cluster.world_size) +
                  " training processes but runtime.distribution_strategy is '" + strategy +
                  "' (one process); use multi_worker_mirrored");
    cluster.strategy = "multi_worker_mirrored";
  }
  if (cluster.is_evaluator()) cluster.world_size = 1;
  return cluster;
}

}  // namespace garden::distribute
