#include "garden/cli/launch_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "garden/base/error.h"
#include "garden/platform/stop_signals.h"
#include "garden/platform/threads.h"

namespace garden {

namespace {

struct LaunchFlags {
  int64_t nproc_per_node = 1;
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  int64_t ps = 0;
  bool evaluator = false;
  double stop_grace_seconds = 30.0;
  int64_t max_restarts = 0;
};

struct Child {
  std::string name;  // "rank 1", "the evaluator"
  std::string prefix;
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends
  std::string out_partial, err_partial;
  std::string last_line;
  bool running = true;
  int status = 0;
};

// Writes the complete lines of `buffer` with the child's prefix; keeps the rest.
void emit_lines(Child& child, std::string& buffer, std::ostream& to, bool flush_all) {
  std::size_t start = 0;
  for (std::size_t newline; (newline = buffer.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    const std::string line = buffer.substr(start, newline - start);
    to << child.prefix << line << '\n';
    if (!line.empty()) child.last_line = line;
  }
  buffer.erase(0, start);
  if (flush_all && !buffer.empty()) {
    to << child.prefix << buffer << '\n';
    child.last_line = buffer;
    buffer.clear();
  }
  to.flush();
}

Child spawn(const std::string& name, const std::string& prefix,
            const std::vector<std::pair<std::string, std::string>>& env,
            const std::vector<std::string>& unset, const std::vector<std::string>& args) {
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    close(err[0]);
    close(err[1]);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    for (const auto& name_ : unset) unsetenv(name_.c_str());
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    static const std::string self = "garden";
    argv.push_back(const_cast<char*>(self.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "garden launch: cannot run /proc/self/exe: %s\n", std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  Child child;
  child.name = name;
  child.prefix = prefix;
  child.pid = pid;
  child.out = out[0];
  child.err = err[0];
  return child;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = strsignal(signal);
    return "was killed by signal " + std::to_string(signal) +
           (name ? std::string(" (") + name + ")" : "");
  }
  return "ended";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int run_launch(int argc, char** argv) {
  std::vector<std::string> own, command;
  bool after = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!after && arg == "--") {
      after = true;
      continue;
    }
    (after ? command : own).push_back(arg);
  }
  CLI::App app{"garden launch: start the processes of a multi-worker run on this machine"};
  app.name("garden launch");
  LaunchFlags flags;
  app.add_option("--nproc_per_node", flags.nproc_per_node, "Training processes on this machine")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--nnodes", flags.nnodes, "Machines in the run")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  app.add_option("--node_rank", flags.node_rank, "This machine's index, 0 the chief's")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--master_addr", flags.master_addr, "The chief machine's address")
      ->capture_default_str();
  app.add_option("--master_port", flags.master_port, "The port of the chief's rendezvous store")
      ->check(CLI::Range(int64_t{1}, int64_t{65535}))
      ->capture_default_str();
  app.add_option("--ps", flags.ps,
                 "Parameter-server processes: with K > 0, a chief (the coordinator), "
                 "--nproc_per_node workers and K ps tasks, each given TF_CONFIG "
                 "(runtime.distribution_strategy=parameter_server)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->capture_default_str();
  app.add_flag("--evaluator", flags.evaluator,
               "Also start an evaluator process (continuous_eval on the chief's checkpoints)");
  app.add_option("--stop_grace_seconds", flags.stop_grace_seconds,
                 "After one process fails, seconds the others get to stop before SIGKILL")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max_restarts", flags.max_restarts,
                 "torchrun's: when a process fails, stop the group and start it again (from the "
                 "latest checkpoint) up to N times; round R rendezvouses at --master_port + R")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}))
      ->capture_default_str();
  std::vector<std::string> reversed(own.rbegin(), own.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      std::cout << app.help()
                << "\n  -- COMMAND...                a garden command, e.g. "
                   "train --experiment=... --model_dir=...\n";
      return 0;
    }
    std::cerr << "garden launch: error: " << e.what() << " (see garden launch --help)\n";
    return 2;
  }
  if (flags.ps > 0 && flags.nnodes > 1) {
    std::cerr << "garden launch: error: --ps starts a parameter-server cluster on one machine; "
                 "on several, give each process its TF_CONFIG (see docs/distributed.md)\n";
    return 2;
  }
  if (flags.master_port + flags.max_restarts > 65535) {
    std::cerr << "garden launch: error: --master_port " << flags.master_port << " + --max_restarts "
              << flags.max_restarts
              << " is above 65535 (each restart rendezvouses one port higher)\n";
    return 2;
  }
  if (flags.node_rank >= flags.nnodes) {
    std::cerr << "garden launch: error: --node_rank " << flags.node_rank
              << " is not below --nnodes " << flags.nnodes << "\n";
    return 2;
  }
  if (command.empty()) {
    std::cerr << "garden launch: error: no command after '--' (e.g. -- train --experiment=...)\n";
    return 2;
  }
  if (command.front() == "launch") {
    std::cerr << "garden launch: error: the command after '--' cannot be launch itself\n";
    return 2;
  }

  const int64_t world = flags.nnodes * flags.nproc_per_node;
  const std::vector<std::string> unset = {"TF_CONFIG", "SLURM_PROCID", "SLURM_NTASKS",
                                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"};
  // A stop signal is passed on to every process (each checkpoints and
  // stops, taking it as `garden` does: garden/platform/stop_signals.h).
  GracefulStop graceful;

  // As torchrun does: processes sharing a machine share its cores, so each
  // gets its part for OpenMP and OpenBLAS (whose own threads LibTorch's
  // intra_op_parallelism_threads does not limit) unless the user chose.
  std::vector<std::pair<std::string, std::string>> threads;
  if (!std::getenv("OMP_NUM_THREADS") && !std::getenv("OPENBLAS_NUM_THREADS")) {
    const int64_t cores = usable_cores();
    const int64_t processes = flags.nproc_per_node + (flags.evaluator && flags.node_rank == 0);
    const std::string each = std::to_string(std::max<int64_t>(1, cores / processes));
    threads = {{"OMP_NUM_THREADS", each}, {"OPENBLAS_NUM_THREADS", each}};
    std::cerr << "garden launch: " << processes << (flags.ps > 0 ? " workers" : " processes")
              << " on " << cores << " cores"
              << (flags.ps > 0 ? " (the chief and the ps tasks mostly wait)" : "")
              << ": OMP_NUM_THREADS=" << each << " and OPENBLAS_NUM_THREADS=" << each
              << " for each (set them to choose)\n";
  }

  // Round R of the group (R restarts so far) rendezvouses at master_port
  // + R: a chief of the round before that is still stopping cannot take a
  // new round's workers.
  for (int64_t round = 0;; ++round) {
    std::vector<Child> children;
    const Child* failed = nullptr;
    int forwarded = 0;
    const auto stop_all = [&](int signal) {
      for (auto& child : children)
        if (child.running) kill(child.pid, signal);
    };
    try {
      if (flags.ps > 0) {
        // TF_CONFIG for each: the chief's address is the rendezvous (the
        // other entries name the hosts; Garden listens on no other port).
        const std::string address =
            flags.master_addr + ":" + std::to_string(flags.master_port + round);
        const auto list = [&](int64_t n) {
          std::string text;
          for (int64_t i = 0; i < n; ++i) text += (i ? ", \"" : "\"") + address + "\"";
          return "[" + text + "]";
        };
        std::string cluster = "{\"chief\": " + list(1) +
                              ", \"worker\": " + list(flags.nproc_per_node) +
                              ", \"ps\": " + list(flags.ps);
        if (flags.evaluator) cluster += ", \"evaluator\": " + list(1);
        cluster += "}";
        std::vector<std::string> unset_all = unset;
        for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
          unset_all.push_back(name);
        const auto start = [&](const std::string& type, int64_t index, const std::string& name,
                               const std::string& prefix) {
          auto env = threads;
          env.emplace_back("TF_CONFIG", "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" +
                                            type + "\", \"index\": " + std::to_string(index) +
                                            "}}");
          env.insert(env.end(),
                     {{"TORCHELASTIC_RESTART_COUNT", std::to_string(round)},
                      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(flags.max_restarts)}});
          children.push_back(spawn(name, prefix, env, unset_all, command));
        };
        start("chief", 0, "the chief", "[chief] ");
        for (int64_t i = 0; i < flags.nproc_per_node; ++i)
          start("worker", i, "worker " + std::to_string(i), "[worker " + std::to_string(i) + "] ");
        for (int64_t i = 0; i < flags.ps; ++i)
          start("ps", i, "ps " + std::to_string(i), "[ps " + std::to_string(i) + "] ");
        if (flags.evaluator) start("evaluator", 0, "the evaluator", "[evaluator] ");
      }
      for (int64_t local = 0; flags.ps == 0 && local < flags.nproc_per_node; ++local) {
        const int64_t rank = flags.node_rank * flags.nproc_per_node + local;
        auto env = threads;
        env.insert(env.end(), {{"RANK", std::to_string(rank)},
                               {"WORLD_SIZE", std::to_string(world)},
                               {"LOCAL_RANK", std::to_string(local)},
                               {"LOCAL_WORLD_SIZE", std::to_string(flags.nproc_per_node)},
                               {"MASTER_ADDR", flags.master_addr},
                               {"MASTER_PORT", std::to_string(flags.master_port + round)},
                               {"GROUP_RANK", std::to_string(flags.node_rank)},
                               {"TORCHELASTIC_RESTART_COUNT", std::to_string(round)},
                               {"TORCHELASTIC_MAX_RESTARTS", std::to_string(flags.max_restarts)}});
        children.push_back(spawn("rank " + std::to_string(rank),
                                 "[rank " + std::to_string(rank) + "] ", env, unset, command));
      }
      if (flags.ps == 0 && flags.evaluator && flags.node_rank == 0) {
        const std::string address =
            flags.master_addr + ":" + std::to_string(flags.master_port + round);
        const std::string tf_config = "{\"cluster\": {\"chief\": [\"" + address +
                                      "\"]}, \"task\": {\"type\": \"evaluator\", \"index\": 0}}";
        std::vector<std::string> unset_all = unset;
        for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
          unset_all.push_back(name);
        auto env = threads;
        env.emplace_back("TF_CONFIG", tf_config);
        children.push_back(spawn("the evaluator", "[evaluator] ", env, unset_all, command));
      }
    } catch (const std::exception& e) {
      stop_all(SIGKILL);
      std::cerr << "garden launch: error: " << e.what() << "\n";
      return 1;
    }

    std::chrono::steady_clock::time_point kill_at{};
    bool kill_armed = false;
    while (true) {
      if (StopSignals::pending() && !forwarded) {
        forwarded = StopSignals::pending();
        stop_all(forwarded);  // each process checkpoints (when configured) and stops
      }
      std::vector<pollfd> fds;
      std::vector<std::pair<Child*, bool>> owners;
      for (auto& child : children) {
        if (child.out >= 0) {
          fds.push_back({child.out, POLLIN, 0});
          owners.emplace_back(&child, true);
        }
        if (child.err >= 0) {
          fds.push_back({child.err, POLLIN, 0});
          owners.emplace_back(&child, false);
        }
      }
      if (!fds.empty())
        poll(fds.data(), fds.size(), 100);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto& [child, is_out] = owners[i];
        char buffer[65536];
        const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
        std::string& partial = is_out ? child->out_partial : child->err_partial;
        if (n > 0) {
          partial.append(buffer, static_cast<std::size_t>(n));
          emit_lines(*child, partial, is_out ? std::cout : std::cerr, false);
        } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          emit_lines(*child, partial, is_out ? std::cout : std::cerr, true);
          close(fds[i].fd);
          (is_out ? child->out : child->err) = -1;
        }
      }
      bool any_running = false;
      for (auto& child : children) {
        if (!child.running) continue;
        int status = 0;
        if (waitpid(child.pid, &status, WNOHANG) == child.pid) {
          child.running = false;
          child.status = status;
          const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          if (!ok && !failed && !forwarded) {
            failed = &child;
            // The others would stop at their next collective; do not wait for a timeout.
            stop_all(SIGTERM);
            kill_at =
                std::chrono::steady_clock::now() +
                std::chrono::milliseconds(static_cast<int64_t>(flags.stop_grace_seconds * 1000));
            kill_armed = true;
          }
        } else {
          any_running = true;
        }
      }
      if (kill_armed && std::chrono::steady_clock::now() >= kill_at) {
        stop_all(SIGKILL);
        kill_armed = false;
      }
      bool pipes_open = false;
      for (const auto& child : children)
        pipes_open = pipes_open || child.out >= 0 || child.err >= 0;
      if (!any_running && !pipes_open) break;
    }
    if (failed && !forwarded && !StopSignals::pending() && round < flags.max_restarts) {
      std::cerr << "garden launch: " << failed->name << " " << describe_status(failed->status)
                << (failed->last_line.empty() ? "" : "; its last line: " + failed->last_line)
                << "; restarting the group (" << round + 1 << " of " << flags.max_restarts
                << ") from the latest checkpoint\n";
      continue;
    }
    if (failed) {
      std::cerr << "garden launch: " << failed->name << " " << describe_status(failed->status)
                << (failed->last_line.empty() ? "" : "; its last line: " + failed->last_line)
                << "; the other processes were stopped"
                << (round > 0 ? " (after " + std::to_string(round) + " restarts)" : "") << "\n";
      return exit_code(failed->status) == 0 ? 1 : exit_code(failed->status);
    }
    if (forwarded) {
      std::cerr << "garden launch: passed " << StopSignals::name(forwarded)
                << " on to every process; they have stopped\n";
      return 128 + forwarded;
    }
    return 0;
  }
}

}  // namespace garden
