// Model Garden's train_lib.run_experiment: builds the task, model, optimizer,
// Trainer and Controller for a config and runs one mode.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "garden/base/types.h"
#include "garden/config/definitions.h"
#include "garden/distribute/process_group.h"

namespace garden {

// train, eval, train_and_eval, continuous_eval, train_and_post_eval.
const std::vector<std::string>& experiment_modes();

struct RunOptions {
  std::string mode = "train_and_eval";
  std::string model_dir;
  std::string experiment;    // recorded in params.yaml (empty: not recorded)
  bool interactive = false;  // progress bar on stderr
  double continuous_eval_poll_seconds = 1.0;
  // The workers to train with (multi_worker_mirrored); null: one process.
  // Only the chief writes model_dir (checkpoints, summaries, params.yaml,
  // train.log); every worker must see the same model_dir to resume.
  distribute::ProcessGroupPtr process_group;
};

// Runs `params` (finalized and locked by finalize_config) in `options.mode`.
// Returns the last evaluation's logs (empty when the mode does not evaluate).
// A training mode owns model_dir for the run (RunDirectory: locked, train.log
// from the first line, rolled back on a failure before the first
// checkpoint), writes params.yaml once everything is built, and resumes from
// the latest checkpoint, refusing config changes it cannot honour.
Logs run_experiment(std::shared_ptr<config::ExperimentConfig> params, const RunOptions& options);

// Writes params.yaml into model_dir atomically (Model Garden's
// serialize_config), recording `experiment` when it is not empty.
void write_params_yaml(config::ExperimentConfig& params, const std::string& model_dir,
                       const std::string& experiment = "");

}  // namespace garden
