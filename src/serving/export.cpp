#include "garden/serving/export.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <utility>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/staged_directory.h"
#include "garden/config/registry.h"
#include "garden/config/validation.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/safetensors.h"
#include "garden/fx/prediction.h"
#include "garden/serving/predictor.h"

namespace garden::serving {

namespace fs = std::filesystem;

std::string resolve_checkpoint(const std::string& model_dir, const std::string& checkpoint,
                               const config::ExperimentConfig& params) {
  if (checkpoint == "best") {
    const std::string& subdir = params.trainer.best_checkpoint_export_subdir;
    if (subdir.empty())
      throw Error("--checkpoint=best: the run in '" + model_dir +
                  "' exported no best checkpoint (trainer.best_checkpoint_export_subdir is "
                  "empty)");
    const std::string dir = (fs::path(model_dir) / subdir).string();
    if (auto path = latest_checkpoint(dir)) return *path;
    throw Error("--checkpoint=best: no checkpoint in '" + dir + "'");
  }
  if (!checkpoint.empty()) {
    if (auto path = latest_checkpoint(checkpoint)) return *path;
    throw Error("--checkpoint '" + checkpoint + "' is not a checkpoint or holds none");
  }
  if (auto path = latest_checkpoint(model_dir)) return *path;
  throw Error("no checkpoint in '" + model_dir + "' (train it first, or pass --checkpoint)");
}

std::string run_experiment_name(const std::string& flag, const std::string& model_dir) {
  const std::string path = (fs::path(model_dir) / "params.yaml").string();
  std::error_code ec;
  std::string recorded;
  if (fs::is_regular_file(path, ec))
    recorded = config::params_file_experiment(read_file(path, "--model_dir's params.yaml"));
  if (!flag.empty()) {
    if (!recorded.empty() && recorded != flag)
      throw Error("--experiment '" + flag + "' differs from '" + recorded + "', the experiment " +
                  path + " records (leave --experiment out)");
    return flag;
  }
  if (!recorded.empty()) return recorded;
  if (fs::is_regular_file(path, ec))
    throw Error("--experiment is needed: " + path +
                " does not record its experiment (written by hand or before Garden recorded "
                "it)");
  throw Error("--experiment is needed: '" + model_dir + "' has no params.yaml");
}

std::shared_ptr<config::ExperimentConfig> read_run_params(const std::string& experiment,
                                                          const std::string& model_dir) {
  std::error_code ec;
  if (fs::exists(model_dir, ec) && !fs::is_directory(model_dir, ec))
    throw Error("--model_dir '" + model_dir + "' is a file, not a directory");
  const std::string params_path = (fs::path(model_dir) / kParamsFile).string();
  if (!fs::exists(params_path, ec))
    throw Error("'" + model_dir + "' has no params.yaml: not a model_dir of garden train");
  check_input_file(params_path, "--model_dir's params.yaml");
  auto params = config::get_experiment_config(experiment);
  try {
    config::apply_file(*params, params_path);
  } catch (const std::exception& e) {
    throw Error("'" + params_path + "' is not a params.yaml of experiment '" + experiment +
                "': " + e.what());
  }
  config::validate_config(*params);
  return params;
}

std::vector<int64_t> export_versions(const std::string& export_dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  if (!fs::is_directory(export_dir, ec)) return versions;
  for (const auto& entry : fs::directory_iterator(export_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 18 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (entry.is_directory(ec)) versions.push_back(std::stoll(name));
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

nlohmann::json signature_def_json(const ServingSignature& signature) {
  auto tensors = [](const std::vector<std::pair<std::string, TensorSpec>>& specs,
                    const char* suffix) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [name, spec] : specs) {
      nlohmann::json dims = nlohmann::json::array({{{"size", "-1"}, {"name", ""}}});
      for (int64_t d : spec.shape) dims.push_back({{"size", std::to_string(d)}, {"name", ""}});
      out[name] = {{"dtype", spec.dtype},
                   {"tensor_shape", {{"dim", dims}, {"unknown_rank", false}}},
                   {"name", std::string(suffix) + name + ":0"}};
    }
    return out;
  };
  return {{"signature_def",
           {{"serving_default",
             {{"inputs", tensors(signature.inputs, "serving_default_")},
              {"outputs", tensors(signature.outputs, "StatefulPartitionedCall_")},
              {"method_name", "tensorflow/serving/predict"}}}}}};
}

std::string tensorfx_model_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "model.yaml", ec)) return dir;
  if (fs::exists(fs::path(dir) / "model" / "model.yaml", ec))
    return (fs::path(dir) / "model").string();
  return "";
}

namespace {

// Makes export_dir/<version>: `fill` writes a staging directory, which must
// then load as a Predictor before it is renamed into place.
ExportResult write_version(const std::string& export_dir, const std::string& model_dir,
                           const std::function<void(const fs::path&)>& fill) {
  if (export_dir.empty()) throw Error("--export_dir is empty");
  std::error_code ec;
  if (fs::exists(export_dir, ec) && !fs::is_directory(export_dir, ec))
    throw Error("--export_dir '" + export_dir + "' is a file, not a directory");
  const fs::path run = fs::weakly_canonical(model_dir, ec);
  if (!run.empty() && fs::weakly_canonical(export_dir, ec) == run)
    throw Error("--export_dir '" + export_dir + "' is the model_dir itself");
  fs::create_directories(export_dir, ec);
  if (ec) throw Error("--export_dir '" + export_dir + "' cannot be made: " + ec.message());
  const auto versions = export_versions(export_dir);
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  ExportResult result;
  result.version = std::max(now, versions.empty() ? int64_t{0} : versions.back() + 1);
  const fs::path final_dir = fs::path(export_dir) / std::to_string(result.version);
  const fs::path staging = fs::path(export_dir) / (".tmp-" + std::to_string(result.version) + "-" +
                                                   std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  struct Cleanup {
    fs::path path;
    bool armed = true;
    ~Cleanup() {
      std::error_code ignored;
      if (armed) fs::remove_all(path, ignored);
    }
  } cleanup{staging};
  const UnfinishedPath unfinished(staging);  // removed if a stop signal ends the process
  fs::create_directories(staging, ec);
  if (ec) throw Error("cannot write in --export_dir '" + export_dir + "': " + ec.message());
  fill(staging);
  // What was written loads, before anyone can see it.
  Predictor check(staging.string(), "cpu");
  fs::rename(staging, final_dir, ec);
  if (ec)
    throw Error("cannot rename the export into '" + final_dir.string() + "': " + ec.message());
  cleanup.armed = false;
  sync_directory(export_dir);
  result.directory = final_dir.string();
  return result;
}

ExportResult export_tensorfx(const ExportOptions& options, const std::string& source) {
  auto model = fx::Model::load(source);  // a model that does not load is not exported
  const std::string weights = (fs::path(source) / "weights").string();
  ExportResult result =
      write_version(options.export_dir, options.model_dir, [&](const fs::path& staging) {
        std::error_code ec;
        fs::copy(source, staging / kTensorFxDir, fs::copy_options::recursive, ec);
        if (ec) throw Error("cannot copy '" + source + "' into the export: " + ec.message());
        nlohmann::json info = {{"experiment", ""},
                               {"tensorfx", true},
                               {"global_step", nullptr},  // TensorFX's model/ has no step
                               {"ema", false},
                               {"source_checkpoint", fs::absolute(weights).string()}};
        info.update(signature_def_json(tensorfx_signature(*model)));
        write_file_atomically((staging / kSignatureFile).string(), info.dump(2) + "\n");
      });
  result.checkpoint = weights;
  result.global_step = -1;
  return result;
}

}  // namespace

LoadedRun load_run(const ExportOptions& options) {
  LoadedRun run;
  std::error_code ec;
  run.experiment = fs::is_regular_file(fs::path(options.model_dir) / kParamsFile, ec)
                       ? run_experiment_name(options.experiment, options.model_dir)
                       : options.experiment;
  run.params = read_run_params(run.experiment, options.model_dir);
  run.checkpoint = resolve_checkpoint(options.model_dir, options.checkpoint, *run.params);
  const CheckpointData data = read_checkpoint_file(run.checkpoint);
  run.task_metadata = data.meta.value("task", nlohmann::json::object());
  run.checkpoint_items = data.meta.value("checkpoint_items", nlohmann::json::object());
  run.global_step = data.meta.value("global_step", int64_t{0});
  run.task = get_task(run.params->task, options.model_dir);
  // The task readied for serving: a task that cannot be served stops at
  // its signature.
  run.serving = get_serving_module(*run.task);
  run.assets = run.serving->assets();
  run.serving->prepare(run.task_metadata, run.assets);
  run.model = run.task->build_model();
  // The weights: the moving averages where the run kept them (what Model
  // Garden evaluates and exports), else the live ones.
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : model_state(*run.model)) {
    const auto live = data.tensors.find("model/" + name);
    if (live == data.tensors.end())
      throw Error("checkpoint '" + run.checkpoint + "' has no weight '" + name + "'");
    const auto average = data.tensors.find("optimizer/ema/" + name);
    const bool use_average = average != data.tensors.end();
    run.ema = run.ema || use_average;
    const at::Tensor& value = use_average ? average->second : live->second;
    tensors["model/" + name] = value;
    run.weights.emplace_back(name, value);
  }
  load_model_state(*run.model, tensors, "model/", /*strict=*/true);
  return run;
}

ExportResult export_model(const ExportOptions& options) {
  std::error_code ec;
  if (options.experiment.empty() &&
      !fs::is_regular_file(fs::path(options.model_dir) / kParamsFile, ec)) {
    const std::string source = tensorfx_model_dir(options.model_dir);
    if (source.empty()) {
      if (!fs::is_directory(options.model_dir, ec))
        throw Error("--model_dir '" + options.model_dir + "' does not exist");
      throw Error("--model_dir '" + options.model_dir +
                  "' holds no params.yaml (what garden train writes) and no TensorFX model "
                  "(garden fx train's job directory): name a run's model_dir, or give "
                  "--experiment");
    }
    return export_tensorfx(options, source);
  }
  if (options.export_dir.empty()) throw Error("--export_dir is empty");
  LoadedRun run = load_run(options);
  const auto& params = run.params;
  const auto& task = run.task;
  const auto& assets = run.assets;
  const auto& named = run.weights;
  const bool ema = run.ema;
  const int64_t step = run.global_step;
  const std::string& checkpoint = run.checkpoint;
  const ServingSignature signature = run.serving->signature();
  CheckpointData weights;
  for (const auto& [name, value] : named) weights.tensors["model/" + name] = value;
  const std::string source = fs::absolute(checkpoint).string();
  weights.meta = {{"global_step", step},
                  {"task", run.task_metadata},
                  {"checkpoint_items", run.checkpoint_items},
                  {"source_checkpoint", source},
                  {"ema", ema}};

  ExportResult result =
      write_version(options.export_dir, options.model_dir, [&](const fs::path& staging) {
        std::error_code ec;
        fs::create_directories(staging / kAssetsDir, ec);
        write_file_atomically((staging / kParamsFile).string(),
                              config::params_file_text(*params, run.experiment));
        write_checkpoint_file((staging / kWeightsFile).string(), weights);
        write_safetensors((staging / kSafetensorsFile).string(), named,
                          {{"format", "pt"},
                           {"garden_experiment", run.experiment},
                           {"global_step", std::to_string(step)}});
        for (const auto& [name, path] : assets)
          write_file_atomically((staging / kAssetsDir / name).string(),
                                read_file(path, "the task's asset '" + name + "'"));
        nlohmann::json info = {{"experiment", run.experiment},
                               {"task", task->name()},
                               {"global_step", step},
                               {"ema", ema},
                               {"source_checkpoint", source}};
        info.update(signature_def_json(signature));
        write_file_atomically((staging / kSignatureFile).string(), info.dump(2) + "\n");
      });
  result.checkpoint = checkpoint;
  result.global_step = step;
  result.ema = ema;
  return result;
}

}  // namespace garden::serving
