// Garden's SavedModel: an export directory that holds everything a trained
// model needs to answer requests, and nothing it needs to train.
//
//   OUT/<version>/params.yaml          the resolved config
//   OUT/<version>/weights.ckpt         the model's weights (the EMA averages
//                                      when the run kept them), Garden's
//                                      checkpoint format, with the task's metadata
//   OUT/<version>/weights.safetensors  the same weights for Python users
//   OUT/<version>/assets/              the tokenizer model, if the task has one
//   OUT/<version>/signature.json       experiment, step, and serving_default
//                                      as TF Serving's metadata describes it
//
// Versions are integers (the Unix time of the export, above any existing
// version), as TF Serving and Model Garden's timestamped exports expect; a
// version is written under a temporary name and renamed into place whole,
// so a running server never sees half of one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/config/definitions.h"
#include "garden/core/serving_module.h"
#include "garden/core/task.h"

namespace garden::serving {

inline constexpr const char* kSignatureFile = "signature.json";
inline constexpr const char* kWeightsFile = "weights.ckpt";
inline constexpr const char* kSafetensorsFile = "weights.safetensors";
inline constexpr const char* kParamsFile = "params.yaml";
inline constexpr const char* kAssetsDir = "assets";
inline constexpr const char* kTensorFxDir = "tensorfx";  // a TensorFX model's own directory

// The checkpoint a command uses: `checkpoint` (a file, a directory, or
// `best`: the run's best-checkpoint export), else the latest in model_dir.
// Errors name the flag and the directory.
std::string resolve_checkpoint(const std::string& model_dir, const std::string& checkpoint,
                               const config::ExperimentConfig& params);

// The experiment's config with model_dir's params.yaml applied (and
// validated): the run as it was trained. Errors name the file.
std::shared_ptr<config::ExperimentConfig> read_run_params(const std::string& experiment,
                                                          const std::string& model_dir);

struct ExportOptions {
  // The registered experiment the run was trained with; empty for the job
  // directory of `garden fx train` (or its model/).
  std::string experiment;
  std::string model_dir;
  std::string checkpoint;  // empty: the latest; a path; or "best"
  std::string export_dir;  // the base directory; the version goes under it
};

struct ExportResult {
  std::string directory;  // export_dir/<version>
  int64_t version = 0;
  std::string checkpoint;
  int64_t global_step = 0;  // -1: not recorded (a TensorFX model)
  bool ema = false;         // the weights are the moving averages
};

// A run's model as export writes it: the config, the task and its serving
// module (the task readied for serving), the model holding the checkpoint's
// weights (the moving averages where the run kept them), and what they came
// from.
// The experiment to read the run directory `model_dir` with: `flag`
// (--experiment) when given, else the one its params.yaml records. Throws
// garden::Error, in one line, when both are given and differ (naming both),
// or when neither is (params.yaml missing or recording none).
std::string run_experiment_name(const std::string& flag, const std::string& model_dir);

struct LoadedRun {
  std::string experiment;  // as run_experiment_name resolved it
  std::shared_ptr<config::ExperimentConfig> params;
  TaskPtr task;
  ServingModulePtr serving;  // of `task`
  ModelPtr model;
  std::string checkpoint;
  int64_t global_step = 0;
  bool ema = false;
  nlohmann::json task_metadata;
  nlohmann::json checkpoint_items;
  std::map<std::string, std::string> assets;                // the task's serving assets
  std::vector<std::pair<std::string, at::Tensor>> weights;  // by parameter name
};
LoadedRun load_run(const ExportOptions& options);

// Writes a new version of the export. Loads what it wrote back before
// renaming it into place, so a version that exists is one that loads.
// A TensorFX model's version holds its model/ directory as tensorfx/,
// beside signature.json.
ExportResult export_model(const ExportOptions& options);

// The model/ directory of a TensorFX job directory (or `dir` itself when it
// is one), or "" when `dir` is neither.
std::string tensorfx_model_dir(const std::string& dir);

// The integer-named version directories under `export_dir`, ascending.
std::vector<int64_t> export_versions(const std::string& export_dir);

// TF Serving's signature_def JSON (the body of GET .../metadata's
// "signature_def") for `signature`: dtypes and shapes with -1 for the batch.
nlohmann::json signature_def_json(const ServingSignature& signature);

}  // namespace garden::serving
