#include "garden/serving/predictor.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/config/registry.h"
#include "garden/config/validation.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/fx/prediction.h"
#include "garden/platform/cpu_share.h"
#include "garden/serving/export.h"

namespace garden::serving {

namespace fs = std::filesystem;

namespace {

std::string version_directory(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("export '" + path + "' does not exist");
  if (!fs::is_directory(path, ec)) throw Error("export '" + path + "' is not a directory");
  if (fs::exists(fs::path(path) / kSignatureFile, ec)) return path;
  const auto versions = export_versions(path);
  if (versions.empty())
    throw Error("export '" + path + "' holds no version (no " + kSignatureFile +
                ", no numbered directory): write one with garden export");
  return (fs::path(path) / std::to_string(versions.back())).string();
}

// The device to serve on, checked before anything loads.
c10::Device parse_device(const std::string& device) {
  try {
    const c10::Device parsed(device);
    if (parsed.is_cuda() && !torch::cuda::is_available())
      throw Error("device '" + device + "': this LibTorch has no CUDA device; use cpu");
    return parsed;
  } catch (const c10::Error& e) {
    throw Error("device '" + device + "' is not a device: " + e.what_without_backtrace());
  }
}

}  // namespace

Predictor::Predictor(const std::string& path, const std::string& device) {
  device_ = parse_device(device);
  directory_ = version_directory(path);
  const std::string name = fs::path(directory_).filename().string();
  version_ = !name.empty() && name.size() <= 18 &&
                     name.find_first_not_of("0123456789") == std::string::npos
                 ? std::stoll(name)
                 : 0;
  const std::string signature_path = (fs::path(directory_) / kSignatureFile).string();
  nlohmann::json info;
  try {
    info = nlohmann::json::parse(read_file(signature_path, "the export's signature"));
    experiment_ = info.at("experiment").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + signature_path + "' is not an export's signature: " + e.what());
  }
  if (info.contains("tensorfx")) {
    load_tensorfx(info);
    return;
  }
  params_ = config::get_experiment_config(experiment_);
  const std::string params_path = (fs::path(directory_) / kParamsFile).string();
  check_input_file(params_path, "the export's params.yaml");
  config::apply_file(*params_, params_path);
  config::validate_config(*params_);

  const std::string weights_path = (fs::path(directory_) / kWeightsFile).string();
  check_input_file(weights_path, "the export's weights");
  const CheckpointData weights = read_checkpoint_file(weights_path);
  global_step_ = weights.meta.value("global_step", int64_t{0});

  std::map<std::string, std::string> assets;
  std::error_code ec;
  const fs::path assets_dir = fs::path(directory_) / kAssetsDir;
  if (fs::is_directory(assets_dir, ec))
    for (const auto& entry : fs::directory_iterator(assets_dir, ec))
      assets[entry.path().filename().string()] = entry.path().string();

  task_ = get_task(params_->task, "");
  serving_ = get_serving_module(*task_);
  load_task(weights, assets);
}

Predictor::Predictor(std::shared_ptr<config::ExperimentConfig> params, const std::string& model_dir,
                     const std::string& checkpoint, const std::string& device)
    : directory_(model_dir), experiment_(""), params_(std::move(params)) {
  device_ = parse_device(device);
  CheckpointData weights = read_checkpoint_file(checkpoint);
  global_step_ = weights.meta.value("global_step", int64_t{0});
  // The moving averages where the run kept them, as evaluation and export
  // use them (an export's weights already are).
  const std::string average = "optimizer/ema/";
  for (const auto& [name, tensor] : weights.tensors)
    if (name.rfind(average, 0) == 0) {
      weights.tensors["model/" + name.substr(average.size())] = tensor;
      moving_averages_ = true;
    }
  task_ = get_task(params_->task, model_dir);
  serving_ = get_serving_module(*task_);
  load_task(weights, serving_->assets());
}

void Predictor::load_task(const CheckpointData& weights,
                          const std::map<std::string, std::string>& assets) {
  serving_->prepare(weights.meta.value("task", nlohmann::json::object()), assets);
  signature_ = serving_->signature();
  signature_def_ = signature_def_json(signature_);
  model_ = task_->build_model();
  load_model_state(*model_, weights.tensors, "model/", /*strict=*/true);
  task_->set_mixed_precision(std::nullopt, device_);
  model_->to(device_);
  model_->eval();
}

Task& Predictor::task() const {
  if (!task_) throw Error("the TensorFX export '" + directory_ + "' has no Garden task");
  return *task_;
}

Predictor::~Predictor() = default;

const config::ExperimentConfig& Predictor::params() const {
  if (!params_) throw Error("the TensorFX export '" + directory_ + "' has no params.yaml");
  return *params_;
}

void Predictor::use_int8() {
  if (fx_model_)
    throw Error("--int8: the TensorFX export '" + directory_ + "' has no int8 inference");
  std::lock_guard<std::mutex> lock(mutex_);
  serving_->use_int8(*model_);
  int8_ = true;
}

void Predictor::apply_runtime() const {
  if (!params_) return;  // TensorFX: its own settings
  config::RuntimeConfig runtime = params_->runtime;
  runtime.device = device_.str();
  garden::apply_runtime(runtime);
}

nlohmann::json Predictor::normalize_instance(const nlohmann::json& instance,
                                             std::size_t index) const {
  const auto& inputs = signature_.inputs;
  // With one input an instance may be its bare value (TF Serving's rule): a
  // number, a string, a list, or {"b64": ...}; any other object names its
  // inputs.
  const bool b64 = instance.is_object() && instance.size() == 1 && instance.contains("b64");
  if (inputs.size() == 1 && (!instance.is_object() || b64)) return {{inputs[0].first, instance}};
  if (instance.is_object()) {
    for (const auto& [key, value] : instance.items()) {
      bool known = false;
      for (const auto& input : inputs) known = known || input.first == key;
      if (!known)
        throw InputError("instance " + std::to_string(index) + " has an unknown input '" + key +
                         "'");
    }
    return instance;
  }
  if (instance.is_array()) {
    if (instance.size() != inputs.size())
      throw InputError("instance " + std::to_string(index) + " is a list of " +
                       std::to_string(instance.size()) + " values; the signature has " +
                       std::to_string(inputs.size()) + " inputs");
    nlohmann::json object = nlohmann::json::object();
    for (std::size_t i = 0; i < inputs.size(); ++i) object[inputs[i].first] = instance[i];
    return object;
  }
  throw InputError("instance " + std::to_string(index) + " is a " +
                   std::string(instance.type_name()) +
                   "; with several inputs an instance is an object of them or a list");
}

std::vector<nlohmann::json> Predictor::predict(const std::vector<nlohmann::json>& instances) const {
  if (instances.empty()) return {};
  std::vector<nlohmann::json> objects;
  objects.reserve(instances.size());
  for (std::size_t i = 0; i < instances.size(); ++i)
    objects.push_back(normalize_instance(instances[i], i));
  std::lock_guard<std::mutex> lock(mutex_);
  share_cpus();  // fewer threads while other processes (a training) keep cores busy
  c10::InferenceMode inference;
  if (fx_model_) return predict_tensorfx(objects);
  return serving_->predict(objects, [this](const Batch& inputs) {
    Batch moved;
    for (const auto& [name, tensor] : inputs) moved[name] = tensor.to(device_);
    return task_->inference_step(moved, *model_);
  });
}

Batch Predictor::predict_batch(const Batch& inputs) const {
  if (fx_model_) throw Error("a TensorFX export predicts instances, not tensors");
  std::lock_guard<std::mutex> lock(mutex_);
  share_cpus();
  c10::InferenceMode inference;
  Batch moved;
  for (const auto& [name, tensor] : inputs) moved[name] = tensor.to(device_);
  return task_->inference_step(moved, *model_);
}

std::vector<Batch> Predictor::predict_batches(const std::vector<Batch>& inputs, int threads) const {
  if (fx_model_) throw Error("a TensorFX export predicts instances, not tensors");
  if (threads < 1)
    throw Error("predict_batches: threads must be >= 1, not " + std::to_string(threads));
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Batch> outputs(inputs.size());
  std::atomic<std::size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  const auto work = [&] {
    c10::InferenceMode inference;
    for (std::size_t i = next++; i < inputs.size(); i = next++) {
      try {
        Batch moved;
        for (const auto& [name, tensor] : inputs[i]) moved[name] = tensor.to(device_);
        outputs[i] = task_->inference_step(moved, *model_);
      } catch (...) {
        std::lock_guard<std::mutex> failed(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = inputs.size();  // the others stop after their current batch
      }
    }
  };
  const std::size_t helpers =
      std::min(static_cast<std::size_t>(threads), std::max<std::size_t>(inputs.size(), 1)) - 1;
  std::vector<std::thread> pool;
  pool.reserve(helpers);
  try {
    for (std::size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started and this one do the work.
  }
  work();
  for (std::thread& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
  return outputs;
}

void Predictor::load_tensorfx(const nlohmann::json& info) {
  const fs::path model_dir = fs::path(directory_) / kTensorFxDir;
  fx_model_ = fx::Model::load(model_dir.string());
  signature_ = tensorfx_signature(*fx_model_);
  signature_def_ = signature_def_json(signature_);
  const auto step = info.find("global_step");
  global_step_ = step != info.end() && step->is_number_integer() ? step->get<int64_t>() : -1;
}

std::vector<nlohmann::json> Predictor::predict_tensorfx(
    const std::vector<nlohmann::json>& objects) const {
  // TensorFX's instances: CSV lines, or serialized tf.Examples, which JSON
  // carries as TF Serving's {"b64": "..."}.
  std::vector<std::string> lines;
  lines.reserve(objects.size());
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const auto& value = objects[i].at("inputs");
    std::string line;
    if (value.is_string()) {
      line = value.get<std::string>();
    } else if (value.is_object() && value.size() == 1 && value.contains("b64") &&
               value.at("b64").is_string()) {
      if (!base64_decode(value.at("b64").get<std::string>(), line))
        throw InputError("instance " + std::to_string(i) + ": 'b64' is not base64");
    } else {
      throw InputError("instance " + std::to_string(i) +
                       ": input 'inputs' must be a CSV line (string) or {\"b64\": ...}, not " +
                       std::string(value.type_name()));
    }
    lines.push_back(std::move(line));
  }
  std::vector<fx::Model::Prediction> predictions;
  try {
    predictions = fx_model_->predict(lines);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    // The model reads each line as its data set does: what it refuses is the
    // caller's input.
    throw InputError(e.what());
  }
  std::vector<nlohmann::json> rows;
  rows.reserve(predictions.size());
  for (const auto& p : predictions) rows.push_back({{"label", p.label}, {"scores", p.scores}});
  return rows;
}

ServingSignature tensorfx_signature(const fx::Model& model) {
  return {{{"inputs", {"DT_STRING", {}}}},
          {{"label", {"DT_STRING", {}}},
           {"scores", {"DT_FLOAT", {static_cast<int64_t>(model.labels().size())}}}}};
}

}  // namespace garden::serving
