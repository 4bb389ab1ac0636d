// garden::serving::Predictor: loads an export (garden/serving/export.h) and
// answers batches of instances. It needs the export and the registered
// experiment it names (garden::register_builtins() registers Garden's own),
// nothing else: no model_dir, no training data. An export of a TensorFX
// model (garden fx train) is served by its fx::Model.
//
//   garden::register_builtins();
//   garden::serving::Predictor predictor("/exports/iris");  // the highest version
//   auto rows = predictor.predict({{{"sepal_length", 5.1}, ...}});
//   rows[0]["classes"]  // "Iris-setosa"
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/types.h"
#include "garden/core/checkpoint.h"
#include "garden/core/serving_module.h"
#include "garden/core/task.h"
#include "garden/kernels/linear.h"

namespace garden::fx {
class Model;
}

namespace garden::serving {

class Predictor {
 public:
  // `path`: a version directory (it holds signature.json) or an export's
  // base directory (its highest version). `device`: "cpu", "cuda", "cuda:1".
  explicit Predictor(const std::string& path, const std::string& device = "cpu");
  // A run's checkpoint, served as it is (garden translate): `params` as the
  // run resolved them (its params.yaml), the task's files from model_dir,
  // the checkpoint's weights (its moving averages where it has them). version() is 0.
  Predictor(std::shared_ptr<config::ExperimentConfig> params, const std::string& model_dir,
            const std::string& checkpoint, const std::string& device = "cpu");
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  const std::string& directory() const { return directory_; }
  // The version directory's number (0 when its name is not a number).
  int64_t version() const { return version_; }
  const std::string& experiment() const { return experiment_; }
  int64_t global_step() const { return global_step_; }  // -1: not recorded
  // A run's checkpoint with moving averages (trainer.optimizer_config.ema):
  // they are the weights, as evaluation and export use them.
  bool moving_averages() const { return moving_averages_; }
  const ServingSignature& signature() const { return signature_; }
  // TF Serving's signature_def JSON (GET /v1/models/NAME/metadata).
  const nlohmann::json& signature_def() const { return signature_def_; }
  // The export's params.yaml, resolved (a TensorFX export has none: throws).
  const config::ExperimentConfig& params() const;
  // The task behind the model (a TensorFX export has none: throws). Use it
  // only while no predict() runs: predict() holds it for its call.
  Task& task() const;
  // Whether this is a TensorFX model's export.
  bool tensorfx() const { return fx_model_ != nullptr; }
  // int8 inference from now on (ServingModule::use_int8; the CPU only). A
  // task without it, a TensorFX export or another device throws
  // garden::Error, one line.
  void use_int8();
  bool int8() const { return int8_; }
  // Where the model runs.
  const c10::Device& device() const { return device_; }
  // LibTorch's thread settings and seed from the export's runtime section
  // (what garden predict and serve do before predicting); process-wide.
  void apply_runtime() const;

  // One JSON object of named outputs per instance, in order. An instance is
  // an object holding every input by name; with a single input, the value
  // itself; with several, also an array of their values in signature order.
  // Thread-safe (calls run one at a time, in inference mode). A wrong
  // instance throws InputError naming it.
  std::vector<nlohmann::json> predict(const std::vector<nlohmann::json>& instances) const;
  // The same on tensors: the task's batch in, inference_step's outputs out
  // (not for a TensorFX export: its model takes CSV lines or tf.Examples).
  Batch predict_batch(const Batch& inputs) const;
  // predict_batch on each batch, up to `threads` of them at once (one
  // std::thread each, this one included), outputs in the order of inputs.
  // The task's inference_step must be safe to run concurrently on one model
  // (the translation task's is). Each thread runs LibTorch's and the BLAS's
  // kernels with the process's thread settings, so a caller that runs
  // several at once sets those to one thread (garden translate does). The
  // first exception of any batch is rethrown once every thread has stopped.
  std::vector<Batch> predict_batches(const std::vector<Batch>& inputs, int threads) const;

  // An instance in the object form predict's task takes (see predict).
  nlohmann::json normalize_instance(const nlohmann::json& instance, std::size_t index) const;

 private:
  void load_task(const CheckpointData& weights, const std::map<std::string, std::string>& assets);
  void load_tensorfx(const nlohmann::json& info);
  std::vector<nlohmann::json> predict_tensorfx(const std::vector<nlohmann::json>& objects) const;

  std::string directory_;
  int64_t version_ = 0;
  std::string experiment_;
  int64_t global_step_ = 0;
  bool moving_averages_ = false;
  ServingSignature signature_;
  nlohmann::json signature_def_;
  std::shared_ptr<config::ExperimentConfig> params_;
  TaskPtr task_;
  ServingModulePtr serving_;  // of task_
  ModelPtr model_;
  std::shared_ptr<fx::Model> fx_model_;
  c10::Device device_{c10::kCPU};
  bool int8_ = false;
  mutable std::mutex mutex_;
  // The weights serve unchanged: the copies a decoder's search lays out for
  // its steps' products (kernels::FrozenWeights) stay for the next call.
  kernels::KeepHeldWeights keep_held_weights_;
};

// A TensorFX model's signature: "inputs", a CSV line (or a serialized
// tf.Example as {"b64": ...}) -> "label" and "scores" (per label).
ServingSignature tensorfx_signature(const fx::Model& model);

}  // namespace garden::serving
