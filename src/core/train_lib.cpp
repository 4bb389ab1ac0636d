#include "garden/core/train_lib.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "garden/core/actions.h"
#include "garden/core/checkpoint.h"
#include "garden/core/config/yaml_io.h"
#include "garden/core/controller.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/core/runtime.h"
#include "garden/core/task.h"
#include "garden/core/trainer.h"

namespace fs = std::filesystem;

namespace garden {

const std::vector<std::string>& experiment_modes() {
  static const std::vector<std::string> modes = {"train", "eval", "train_and_eval",
                                                 "continuous_eval", "train_and_post_eval"};
  return modes;
}

void write_params_yaml(config::ExperimentConfig& params, const std::string& model_dir) {
  std::error_code ec;
  fs::create_directories(model_dir, ec);
  if (ec) throw Error("cannot create model_dir '" + model_dir + "': " + ec.message());
  const std::string path = (fs::path(model_dir) / "params.yaml").string();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << config::to_yaml_string(params);
    if (!out) throw Error("cannot write '" + tmp + "'");
  }
  fs::rename(tmp, path, ec);
  if (ec) throw Error("cannot write '" + path + "': " + ec.message());
}

Logs run_experiment(std::shared_ptr<config::ExperimentConfig> params,
                    const RunOptions& options) {
  const std::string& mode = options.mode;
  const auto& modes = experiment_modes();
  if (std::find(modes.begin(), modes.end(), mode) == modes.end()) {
    std::string list;
    for (const auto& m : modes) list += (list.empty() ? "" : ", ") + m;
    throw Error("unknown mode '" + mode + "'; modes: " + list);
  }
  if (options.model_dir.empty()) throw Error("--model_dir is required");
  if (!params->locked()) throw Error("the config must be finalized (finalize_config) before running");

  const bool trains = mode == "train" || mode == "train_and_eval" || mode == "train_and_post_eval";
  const bool evaluates = mode != "train";
  const auto& trainer_config = params->trainer;

  apply_runtime(params->runtime);

  TaskPtr task = get_task(params->task, options.model_dir);
  ModelPtr model = task->build_model();
  model->to(torch::Device(params->runtime.device));
  // Evaluation modes make the optimizer too (when one is configured): its
  // EMA averages are what an EMA run evaluates.
  std::shared_ptr<optim::Optimizer> optimizer;
  if (trains || !trainer_config.optimizer_config.optimizer.type.empty())
    optimizer = Task::create_optimizer(trainer_config.optimizer_config, params->runtime,
                                       params->task->differential_privacy_config, *model);
  std::shared_ptr<CheckpointExporter> exporter;
  if (evaluates && !trainer_config.best_checkpoint_export_subdir.empty())
    exporter = std::make_shared<BestCheckpointExporter>(
        (fs::path(options.model_dir) / trainer_config.best_checkpoint_export_subdir).string(),
        trainer_config.best_checkpoint_eval_metric, trainer_config.best_checkpoint_metric_comp);
  Trainer trainer(params, task, model, optimizer, trains, evaluates, nullptr, nullptr, exporter);

  CheckpointManager checkpoints(options.model_dir, trainer_config.max_to_keep);
  ControllerOptions controller_options;
  controller_options.steps_per_loop = trainer_config.steps_per_loop;
  controller_options.summary_interval = trainer_config.summary_interval;
  controller_options.checkpoint_interval = trainer_config.checkpoint_interval;
  controller_options.summary_dir = (fs::path(options.model_dir) / "train").string();
  controller_options.eval_summary_dir =
      (fs::path(options.model_dir) / trainer_config.validation_summary_subdir).string();
  controller_options.interactive = options.interactive;
  if (trains) {
    controller_options.recovery = RecoveryOptions{trainer_config.loss_upper_bound,
                                                  trainer_config.recovery_begin_steps,
                                                  trainer_config.recovery_max_trials};
    controller_options.checkpoint_on_preemption = trainer_config.preemption_on_demand_checkpoint;
  }
  std::optional<PreemptionWatcher> preemption;
  if (controller_options.checkpoint_on_preemption) preemption.emplace();
  Controller controller(trains ? &trainer : nullptr, evaluates ? &trainer : nullptr, &checkpoints,
                        controller_options);
  // Model Garden's EMACheckpointing: after each evaluation, the averaged
  // weights go to model_dir/ema_checkpoints.
  std::unique_ptr<CheckpointManager> ema_checkpoints;
  if (trains && evaluates && optimizer && optimizer->ema()) {
    ema_checkpoints = std::make_unique<CheckpointManager>(
        (fs::path(options.model_dir) / "ema_checkpoints").string(), trainer_config.max_to_keep);
    controller.add_eval_action([&](const Logs&) {
      CheckpointData data;
      for (const auto& [name, tensor] : model_state(*model)) data.tensors["model/" + name] = tensor;
      for (const auto& [name, tensor] : optimizer->ema()->averaged_weights())
        data.tensors["model/" + name] = tensor;
      data.meta = {{"global_step", trainer.global_step()}, {"task", task->checkpoint_metadata()}};
      ema_checkpoints->save(data, trainer.global_step());
    });
  }

  // Restoring may fail too (a checkpoint that does not fit this config), so
  // it also comes before anything is written to model_dir.
  std::optional<std::string> restored;
  if (mode != "continuous_eval") restored = controller.restore_checkpoint();
  if (trains && options.write_params) {
    write_params_yaml(*params, options.model_dir);
    set_log_file((fs::path(options.model_dir) / "train.log").string());
  }
  struct LogFileReset {
    ~LogFileReset() { set_log_file(""); }
  } log_file_reset;

  Logs logs;
  if (mode == "continuous_eval") {
    logs = controller.evaluate_continuously(trainer_config.validation_steps,
                                            trainer_config.continuous_eval_timeout,
                                            trainer_config.train_steps,
                                            options.continuous_eval_poll_seconds);
    return logs;
  }
  if (mode == "eval") {
    if (!restored)
      throw Error("eval: no checkpoint in '" + options.model_dir + "'; train first");
    return controller.evaluate(trainer_config.validation_steps);
  }
  if (mode == "train") {
    controller.train(trainer_config.train_steps);
  } else if (mode == "train_and_eval") {
    const bool trained_out = trainer.global_step() >= trainer_config.train_steps;
    logs = controller.train_and_evaluate(trainer_config.train_steps,
                                         trainer_config.validation_steps,
                                         trainer_config.validation_interval);
    // A finished run asked again still reports where it stands.
    if (trained_out) logs = controller.evaluate(trainer_config.validation_steps);
  } else if (mode == "train_and_post_eval") {
    controller.train(trainer_config.train_steps);
    logs = controller.evaluate(trainer_config.validation_steps);
  }
  return logs;
}

}  // namespace garden
