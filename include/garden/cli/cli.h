// The `garden` command line as a library function, so a project with Tasks
// and experiments of its own can build its own `garden`:
//
//   int main(int argc, char** argv) {
//     garden::register_task<MyTaskConfig, MyTask>("my/task");
//     garden::config::register_experiment("my/experiment", "...", my_factory);
//     return garden::run_main(argc, argv);
//   }
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "garden/core/config/definitions.h"

namespace garden {

// Runs the CLI; returns the process exit code. Every error is one line on
// stderr ("garden: error: ...") and a non-zero code.
int run_main(int argc, char** argv);

// The experiment `name` with each config file applied in order, then the
// override string: Model Garden's order. Validated, not yet finalized.
std::shared_ptr<config::ExperimentConfig> resolve_experiment(
    const std::string& name, const std::vector<std::string>& config_files,
    const std::string& params_override);

}  // namespace garden
