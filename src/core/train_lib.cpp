#include "garden/core/train_lib.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/config/yaml_io.h"
#include "garden/core/actions.h"
#include "garden/core/checkpoint.h"
#include "garden/core/controller.h"
#include "garden/core/parameter_server.h"
#include "garden/core/run_directory.h"
#include "garden/core/runtime.h"
#include "garden/core/strategy.h"
#include "garden/core/task.h"
#include "garden/core/trainer.h"

namespace fs = std::filesystem;

namespace garden {

const std::vector<std::string>& experiment_modes() {
  static const std::vector<std::string> modes = {"train", "eval", "train_and_eval",
                                                 "continuous_eval", "train_and_post_eval"};
  return modes;
}

void write_params_yaml(config::ExperimentConfig& params, const std::string& model_dir,
                       const std::string& experiment) {
  std::error_code ec;
  fs::create_directories(model_dir, ec);
  if (ec) throw Error("cannot create model_dir '" + model_dir + "': " + ec.message());
  write_file_atomically((fs::path(model_dir) / "params.yaml").string(),
                        config::params_file_text(params, experiment));
}

namespace {

// key -> value text of every leaf of a YAML mapping, by dotted path.
void flatten(const YAML::Node& node, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& item : node) {
      const std::string key = item.first.as<std::string>();
      flatten(item.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  YAML::Emitter emitter;
  emitter.SetSeqFormat(YAML::Flow);
  emitter.SetMapFormat(YAML::Flow);
  emitter << node;
  out[prefix] = emitter.c_str();
}

struct ConfigChange {
  std::string key, before, after;
};

std::vector<ConfigChange> config_changes(const std::string& checkpoint_yaml,
                                         config::ExperimentConfig& params) {
  std::map<std::string, std::string> before, after;
  flatten(YAML::Load(checkpoint_yaml), "", before);
  flatten(config::write_config(params), "", after);
  std::vector<ConfigChange> changes;
  for (const auto& [key, value] : after) {
    const auto it = before.find(key);
    const std::string old = it == before.end() ? "(absent)" : it->second;
    if (old != value) changes.push_back({key, old, value});
  }
  for (const auto& [key, value] : before)
    if (!after.count(key)) changes.push_back({key, value, "(absent)"});
  return changes;
}

std::string describe(const std::vector<ConfigChange>& changes) {
  std::string text;
  for (const auto& c : changes)
    text += (text.empty() ? "" : ", ") + c.key + " " + c.before + " -> " + c.after;
  return text;
}

// Resumes from the latest checkpoint (or initializes the model when there is
// none). A resumed training run refuses a config the checkpoint cannot
// honour and logs each other changed key once the restore has succeeded.
std::optional<std::string> restore(Controller& controller, CheckpointManager& checkpoints,
                                   config::ExperimentConfig& params, const Task& task,
                                   bool resuming_training) {
  auto intact = checkpoints.read_latest_intact();
  if (!intact) return controller.restore_checkpoint();  // initializes the model
  const std::optional<std::string> latest = intact->first;
  const CheckpointData data = std::move(intact->second);
  std::vector<ConfigChange> changes;
  if (data.meta.contains("params"))  // older checkpoints do not carry it
    changes = config_changes(data.meta.at("params").get<std::string>(), params);
  if (resuming_training) {
    std::set<std::string> fixed = {"trainer.optimizer_config.optimizer.type"};
    for (const auto& key : task.keys_fixed_by_training()) fixed.insert(key);
    std::vector<ConfigChange> refused;
    for (const auto& change : changes)
      if (fixed.count(change.key)) refused.push_back(change);
    if (!refused.empty())
      throw Error("cannot resume " + *latest + " with a changed " + describe(refused) +
                  ": the checkpoint was trained with the old value; use a new model_dir");
  }
  std::optional<std::string> restored;
  try {
    restored = controller.restore_checkpoint(*latest, &data);
  } catch (const Error& e) {
    // A model that no longer fits its checkpoint: say which keys changed.
    if (changes.empty()) throw;
    throw Error(std::string(e.what()) + " (changed since the checkpoint: " + describe(changes) +
                ")");
  }
  if (resuming_training)
    for (const auto& change : changes)
      log_warning() << "resuming " << *latest << " with a changed " << change.key << ": "
                    << change.before << " -> " << change.after;
  return restored;
}

// trainer.best_checkpoint_eval_metric must be something the evaluation
// reports: checked at start, not at the first evaluation.
void check_best_checkpoint_metric(const std::string& metric, Trainer& trainer, const Task& task) {
  std::vector<std::string> names = {"validation_loss"};
  for (const auto& m : trainer.validation_metrics()) names.push_back(m->name());
  for (const auto& n : task.loss_part_names()) names.push_back(n);
  for (const auto& n : task.aggregated_log_names()) names.push_back(n);
  if (std::find(names.begin(), names.end(), metric) != names.end()) return;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  std::string message = "trainer.best_checkpoint_eval_metric '" + metric +
                        "' is not reported by this task's evaluation; it reports: " + list;
  const std::string suggestion = config::nearest(metric, names);
  if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
  throw config::ConfigError(message);
}

// A stop signal that came before training began: nothing new to save.
void stop_if_requested() {
  if (const int signal = StopSignals::pending())
    throw Preempted("received " + StopSignals::name(signal) +
                        " before the first step of this run; nothing new to save; run the "
                        "same command to resume",
                    signal);
}

Logs run(std::shared_ptr<config::ExperimentConfig> params, const RunOptions& options,
         RunDirectory* run_dir) {
  const std::string& mode = options.mode;
  const bool trains = mode == "train" || mode == "train_and_eval" || mode == "train_and_post_eval";
  const bool evaluates = mode != "train";
  const auto& trainer_config = params->trainer;

  apply_runtime(params->runtime);
  const auto& group = options.process_group;
  const bool chief = !group || group->is_chief();
  const bool async = group && group->cluster().parameter_server();
  if (params->runtime.distribution_strategy == "parameter_server" && !async)
    throw Error(
        "runtime.distribution_strategy is parameter_server but this run has no "
        "parameter-server cluster: give it TF_CONFIG with chief, worker and ps tasks "
        "(garden launch --ps=K writes it)");
  if (async) {
    // Checked in every process alike, before any of them waits for another.
    const auto refuse = [](const std::string& what) {
      throw Error(what +
                  " with runtime.distribution_strategy=parameter_server is not implemented "
                  "yet");
    };
    if (!torch::Device(params->runtime.device).is_cpu())
      refuse("runtime.device=" + params->runtime.device);
    if (trainer_config.optimizer_config.ema) refuse("trainer.optimizer_config.ema");
    if (const auto setting = params->task->learning_rate_scales_setting(); !setting.empty())
      refuse(setting);
    if (const auto setting = params->task->synchronous_setting(); !setting.empty()) refuse(setting);
    if (trainer_config.recovery_max_trials > 0)
      refuse("trainer.recovery_max_trials=" + std::to_string(trainer_config.recovery_max_trials));
  }
  stop_if_requested();
  if (async) {
    if (group->cluster().is_ps()) {
      // A ps task builds nothing: the chief sends its shard.
      group->barrier("waiting for the chief to build the task");
      serve_parameters(*group, trainer_config.optimizer_config);
      return {};
    }
  }

  // The chief builds first: what the task makes in model_dir (a trained
  // tokenizer) is there when the other workers build theirs.
  if (group && !chief) group->barrier("waiting for the chief to build the task");
  TaskPtr task = get_task(params->task, options.model_dir);
  stop_if_requested();
  ModelPtr model = task->build_model();
  model->to(torch::Device(params->runtime.device));
  if (group && chief) group->barrier("the chief's task build");
  // Evaluation modes make the optimizer too (when one is configured): its
  // EMA averages are what an EMA run evaluates.
  std::shared_ptr<optim::Optimizer> optimizer;
  if (trains || !trainer_config.optimizer_config.optimizer.type.empty())
    optimizer = Task::create_optimizer(trainer_config.optimizer_config, params->runtime,
                                       params->task->differential_privacy_config, *model);
  if (optimizer) {
    auto scales = task->learning_rate_scales(optimizer->parameters());
    // (parameter_server training refused them above.)
    if (!scales.empty()) optimizer->set_learning_rate_scales(std::move(scales));
  }
  std::shared_ptr<BestCheckpointExporter> exporter;
  if (chief && evaluates && !trainer_config.best_checkpoint_export_subdir.empty())
    exporter = std::make_shared<BestCheckpointExporter>(
        (fs::path(options.model_dir) / trainer_config.best_checkpoint_export_subdir).string(),
        trainer_config.best_checkpoint_eval_metric, trainer_config.best_checkpoint_metric_comp);
  std::shared_ptr<ParameterServers> servers;
  if (async) {
    if (!optimizer) throw Error("parameter_server training needs trainer.optimizer_config");
    servers = std::make_shared<ParameterServers>(group, optimizer->parameters());
  }
  if (async && !chief) {
    // A worker computes steps until the chief ends the run, whatever the
    // mode; it evaluates nothing and writes nothing.
    Trainer worker(params, task, model, optimizer, TrainerMode::kTrain,
                   parameter_server_strategy(servers));
    torch::manual_seed(static_cast<uint64_t>(*params->runtime.seed + group->rank()));
    worker.run_async_worker();
    return {};
  }
  const auto strategy = async   ? parameter_server_strategy(servers)
                        : group ? mirrored_strategy(group)
                                : single_process_strategy();
  Trainer trainer(params, task, model, optimizer,
                  !evaluates ? TrainerMode::kTrain
                  : trains   ? TrainerMode::kTrainAndEvaluate
                             : TrainerMode::kEvaluate,
                  strategy, exporter);
  if (exporter) check_best_checkpoint_metric(exporter->metric(), trainer, *task);
  if (evaluates) trainer.check_validation_data();

  CheckpointManager checkpoints(options.model_dir, trainer_config.max_to_keep);
  ControllerOptions controller_options;
  controller_options.steps_per_loop = trainer_config.steps_per_loop;
  controller_options.summary_interval = trainer_config.summary_interval;
  controller_options.checkpoint_interval = trainer_config.checkpoint_interval;
  // Only the chief writes summaries.
  if (chief) {
    controller_options.summary_dir = (fs::path(options.model_dir) / "train").string();
    controller_options.eval_summary_dir =
        (fs::path(options.model_dir) / trainer_config.validation_summary_subdir).string();
  }
  controller_options.interactive = options.interactive;
  if (trains) {
    controller_options.recovery = RecoveryOptions{trainer_config.loss_upper_bound,
                                                  trainer_config.recovery_begin_steps,
                                                  trainer_config.recovery_max_trials,
                                                  {}};
    controller_options.checkpoint_on_preemption = trainer_config.preemption_on_demand_checkpoint;
  }
  Controller controller(trains ? &trainer : nullptr, evaluates ? &trainer : nullptr, &checkpoints,
                        controller_options);
  // Any checkpoint this run writes makes its model_dir worth keeping.
  if (run_dir) {
    checkpoints.set_on_saved([run_dir](const std::string&) { run_dir->commit(); });
    if (exporter) exporter->set_on_saved([run_dir](const std::string&) { run_dir->commit(); });
  }
  // Model Garden's EMACheckpointing: after each evaluation, the averaged
  // weights go to model_dir/ema_checkpoints.
  std::unique_ptr<CheckpointManager> ema_checkpoints;
  if (chief && trains && evaluates && optimizer && optimizer->ema()) {
    ema_checkpoints = std::make_unique<CheckpointManager>(
        (fs::path(options.model_dir) / "ema_checkpoints").string(), trainer_config.max_to_keep);
    if (run_dir)
      ema_checkpoints->set_on_saved([run_dir](const std::string&) { run_dir->commit(); });
    controller.add_eval_action([&](const Logs&) {
      CheckpointData data;
      for (const auto& [name, tensor] : model_state(*model)) data.tensors["model/" + name] = tensor;
      for (const auto& [name, tensor] : optimizer->ema()->averaged_weights())
        data.tensors["model/" + name] = tensor;
      data.meta = trainer.checkpoint_state().meta;
      ema_checkpoints->save(data, trainer.global_step());
    });
  }

  std::optional<std::string> restored;
  if (mode != "continuous_eval")
    restored = restore(controller, checkpoints, *params, *task, /*resuming_training=*/trains);
  if (async) {
    // The ps tasks start from the chief's (initial or restored) state; a
    // run that does not train ends the workers and ps tasks at once.
    if (trains)
      trainer.init_async();
    else
      servers->stop("done");
  } else if (group) {
    // The chief's weights for every worker; each worker's own dropout
    // stream unless the checkpoint gave it back.
    std::vector<at::Tensor> weights;
    for (const auto& [name, tensor] : model_state(*model)) weights.push_back(tensor.detach());
    group->broadcast(weights, 0, "the chief's initial weights");
    if (!restored || !trainer.random_state_restored())
      torch::manual_seed(static_cast<uint64_t>(*params->runtime.seed + group->rank()));
  }
  if (trains && chief) write_params_yaml(*params, options.model_dir, options.experiment);

  Logs logs;
  if (mode == "continuous_eval") {
    return controller.evaluate_continuously(
        trainer_config.validation_steps, trainer_config.continuous_eval_timeout,
        trainer_config.train_steps, options.continuous_eval_poll_seconds);
  }
  if (mode == "eval") {
    if (!restored) throw Error("eval: no checkpoint in '" + options.model_dir + "'; train first");
    return controller.evaluate(trainer_config.validation_steps);
  }
  try {
    if (mode == "train") {
      controller.train(trainer_config.train_steps);
    } else if (mode == "train_and_eval") {
      const bool trained_out = trainer.global_step() >= trainer_config.train_steps;
      logs =
          controller.train_and_evaluate(trainer_config.train_steps, trainer_config.validation_steps,
                                        trainer_config.validation_interval);
      // A finished run asked again still reports where it stands.
      if (trained_out) logs = controller.evaluate(trainer_config.validation_steps);
    } else if (mode == "train_and_post_eval") {
      controller.train(trainer_config.train_steps);
      if (servers) servers->stop("done");
      logs = controller.evaluate(trainer_config.validation_steps);
    }
    if (servers) servers->stop("done");
  } catch (const std::exception& e) {
    // The workers and ps tasks end too (what they are told must not hide
    // why the chief stopped).
    if (servers) {
      try {
        servers->stop(dynamic_cast<const Preempted*>(&e) ? std::string("preempted")
                                                         : std::string("it failed: ") + e.what());
      } catch (...) {
      }
    }
    throw;
  }
  return logs;
}

Logs run_modes(std::shared_ptr<config::ExperimentConfig> params, const RunOptions& options,
               RunDirectory* run_dir) {
  Logs logs = run(std::move(params), options, run_dir);
  // The chief's store serves the others until every worker is done.
  if (options.process_group) options.process_group->barrier("the end of the run");
  return logs;
}

}  // namespace

Logs run_experiment(std::shared_ptr<config::ExperimentConfig> params, const RunOptions& options) {
  const std::string& mode = options.mode;
  const auto& modes = experiment_modes();
  if (std::find(modes.begin(), modes.end(), mode) == modes.end()) {
    std::string list;
    for (const auto& m : modes) list += (list.empty() ? "" : ", ") + m;
    const std::string suggestion = config::nearest(mode, modes);
    throw Error("unknown mode '" + mode + "'; " +
                (suggestion.empty() ? "" : "did you mean '" + suggestion + "'? ") +
                "modes: " + list);
  }
  if (options.model_dir.empty()) throw Error("--model_dir is required");
  // A training run owns its model_dir: locked, logged from the first line,
  // and rolled back when it fails before its first checkpoint.
  const bool trains = mode == "train" || mode == "train_and_eval" || mode == "train_and_post_eval";
  if (trains && params->trainer.train_steps == 0)
    throw Error("trainer.train_steps is 0, so --mode=" + mode +
                " has nothing to train; set trainer.train_steps (--mode=eval evaluates a "
                "checkpoint without training)");
  if (!params->locked())
    throw Error("the config must be finalized (finalize_config) before running");

  // From here on a stop signal asks the run to stop where it can: at a step
  // (after a checkpoint), between evaluation batches, or before the first
  // step when it comes while the task is built (a tokenizer trained). A
  // worker or ps task of parameter servers waits for the chief, which
  // checkpoints at the end of its loop and then ends every process. Without
  // preemption_on_demand_checkpoint a training run ends at once instead.
  const bool async_non_chief = options.process_group &&
                               options.process_group->cluster().parameter_server() &&
                               !options.process_group->is_chief();
  std::optional<GracefulStop> graceful;
  if (!trains || params->trainer.preemption_on_demand_checkpoint || async_non_chief)
    graceful.emplace();
  // Over several workers, the chief alone owns model_dir.
  std::optional<RunDirectory> run_dir;
  if (trains && (!options.process_group || options.process_group->is_chief()))
    run_dir.emplace(options.model_dir);
  try {
    Logs logs = run_modes(std::move(params), options, run_dir ? &*run_dir : nullptr);
    if (run_dir) run_dir->commit();
    return logs;
  } catch (const Preempted& e) {
    log_to_file(LogLevel::kWarning, e.what());
    throw;
  } catch (const c10::Error& e) {
    log_to_file(LogLevel::kError, std::string("error: ") + e.what_without_backtrace());
    throw;
  } catch (const std::exception& e) {
    log_to_file(LogLevel::kError, std::string("error: ") + e.what());
    throw;
  }
}

}  // namespace garden
