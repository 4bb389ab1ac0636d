// garden launch: torchrun's flags read, the plan made (garden/distribute/
// launch_plan.h), and each round run by the supervisor (supervisor.h) until
// it succeeds, is stopped, or fails past --max_restarts.
#include "garden/cli/launch_command.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/distribute/launch_plan.h"
#include "garden/platform/cpu_share.h"
#include "garden/platform/stop_signals.h"
#include "garden/platform/threads.h"
#include "supervisor.h"

namespace garden {

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
  distribute::LaunchOptions flags;
  double stop_grace_seconds = 30.0;
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
  app.add_option("--stop_grace_seconds", stop_grace_seconds,
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
  try {
    distribute::check_launch(flags, command);
  } catch (const Error& e) {
    std::cerr << "garden launch: error: " << e.what() << "\n";
    return 2;
  }

  // A stop signal is passed on to every process (each checkpoints and
  // stops, taking it as `garden` does: garden/platform/stop_signals.h).
  GracefulStop graceful;

  // As torchrun does: processes sharing a machine share its cores, so each
  // gets its part for OpenMP and OpenBLAS (whose own threads LibTorch's
  // intra_op_parallelism_threads does not limit) unless the user chose.
  const bool user_chose = std::getenv("OMP_NUM_THREADS") || std::getenv("OPENBLAS_NUM_THREADS");
  const int64_t cores = available_cores();  // the affinity, within the cgroup's CPU limit
  const auto threads = distribute::thread_environment(flags, cores, user_chose);
  if (!threads.empty())
    std::cerr << "garden launch: " << distribute::busy_processes(flags)
              << (flags.ps > 0 ? " workers" : " processes") << " on " << cores << " cores"
              << (flags.ps > 0 ? " (the chief and the ps tasks mostly wait)" : "")
              << ": OMP_NUM_THREADS=" << threads[0].second
              << " and OPENBLAS_NUM_THREADS=" << threads[1].second
              << " for each (set them to choose)\n";

  for (int64_t round = 0;; ++round) {
    cli_detail::RoundResult result;
    try {
      result = cli_detail::run_round(distribute::launch_plan(flags, round, threads), command,
                                     stop_grace_seconds);
    } catch (const std::exception& e) {
      std::cerr << "garden launch: error: " << e.what() << "\n";
      return 1;
    }
    const bool failed = !result.failed_name.empty();
    const std::string what =
        failed
            ? result.failed_name + " " + cli_detail::describe_status(result.failed_status) +
                  (result.failed_last_line.empty() ? ""
                                                   : "; its last line: " + result.failed_last_line)
            : "";
    if (failed && !result.forwarded_signal && !StopSignals::pending() &&
        round < flags.max_restarts) {
      std::cerr << "garden launch: " << what << "; restarting the group (" << round + 1 << " of "
                << flags.max_restarts << ") from the latest checkpoint\n";
      continue;
    }
    if (failed) {
      std::cerr << "garden launch: " << what << "; the other processes were stopped"
                << (round > 0 ? " (after " + std::to_string(round) + " restarts)" : "") << "\n";
      const int code = cli_detail::exit_code(result.failed_status);
      return code == 0 ? 1 : code;
    }
    if (result.forwarded_signal) {
      std::cerr << "garden launch: passed " << StopSignals::name(result.forwarded_signal)
                << " on to every process; they have stopped\n";
      return 128 + result.forwarded_signal;
    }
    return 0;
  }
}

}  // namespace garden
