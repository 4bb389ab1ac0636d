// Runs one round of a launch plan (private to src/cli): starts each process
// of the plan as `garden <command>`, writes their output line by line with
// each one's prefix, passes a stop signal on to all of them, and when one
// fails stops the others (SIGTERM, then SIGKILL after a grace period).
#pragma once

#include <string>
#include <vector>

#include "garden/distribute/launch_plan.h"

namespace garden::cli_detail {

struct RoundResult {
  // The first process that failed on its own (not after a forwarded
  // signal); empty when none did.
  std::string failed_name;
  std::string failed_last_line;  // its last line of output
  int failed_status = 0;         // as waitpid gives it
  int forwarded_signal = 0;      // a stop signal passed on to every process, or 0
};

// Throws garden::Error when a process cannot be started (the others are
// killed first).
RoundResult run_round(const std::vector<distribute::LaunchProcess>& plan,
                      const std::vector<std::string>& command, double stop_grace_seconds);

// "exited with code 3", "was killed by signal 9 (Killed)".
std::string describe_status(int status);
// What a shell would report for `status`: the code, or 128 + the signal.
int exit_code(int status);

}  // namespace garden::cli_detail
