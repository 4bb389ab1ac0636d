// The `garden` command line as a library function, so a project with Tasks
// and experiments of its own can build its own `garden`:
//
//   int main(int argc, char** argv) {
//     garden::set_up_process(garden::process_setup_for(argc, argv), argv);
//     return garden::run_main(argc, argv, [] {
//       garden::register_task<MyTaskConfig, MyTask>("my/task");
//       garden::config::register_experiment("my/experiment", "...", my_factory);
//     });
//   }
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/platform/process.h"

namespace garden {

// The process set-up the command in argv[1] declares (platform/process.h):
// the commands that compute restart with OpenBLAS's best kernels for this
// CPU, those that compute for long also with passive OpenMP waits; every
// command keeps freed memory in the heap and takes the stop signals.
ProcessSetup process_setup_for(int argc, char** argv);

// Runs the CLI; returns the process exit code. Every error is one line on
// stderr ("garden: error: ...") and a non-zero code.
int run_main(int argc, char** argv);
// The same, after running `register_extras` (the caller's own tasks and
// experiments) under the same error handling: a duplicate or malformed name
// is one line too.
int run_main(int argc, char** argv, const std::function<void()>& register_extras);

// The experiment `name` with each config file applied in order, then the
// override string: Model Garden's order. Then what task.init_checkpoint
// determines (a Hugging Face directory's shapes: core/init_checkpoint_config.h)
// for every key the files and the override did not set. Validated, not yet
// finalized. `init_checkpoint`, when not empty, is task.init_checkpoint
// (garden import's --huggingface_dir); another one set by the user is
// refused.
std::shared_ptr<config::ExperimentConfig> resolve_experiment(
    const std::string& name, const std::vector<std::string>& config_files,
    const std::string& params_override, const std::string& init_checkpoint = "");

}  // namespace garden
