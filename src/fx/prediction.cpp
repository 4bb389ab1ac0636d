#include "garden/fx/prediction.h"

#include <torch/torch.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/safetensors.h"
#include "garden/core/task.h"

namespace fs = std::filesystem;

namespace garden::fx {

void export_model(ModelBuilder& builder, const std::string& path) {
  if (builder.model_name().empty())
    throw Error(
        "the model cannot be exported for prediction: its ModelBuilder has no "
        "model_name() (register it with garden::fx::register_model)");
  const DataSet& dataset = builder.dataset();
  if (!dataset.features() || dataset.features()->text().empty())
    throw Error("the model cannot be exported for prediction without its features file");
  const fs::path target(path);
  const fs::path staging = target.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(staging);
  fs::create_directories(staging);
  CheckpointData weights;
  for (const auto& [name, tensor] : model_state(builder.module()))
    weights.tensors["model/" + name] = tensor;
  weights.meta = {{"model", builder.model_name()}};
  write_checkpoint_file((staging / "weights").string(), weights);
  // The same weights under PyTorch's names, for Python's own tools.
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& [name, tensor] : model_state(builder.module())) named.emplace_back(name, tensor);
  write_safetensors((staging / "weights.safetensors").string(), named,
                    {{"format", "pt"}, {"model", builder.model_name()}});
  write_file_atomically((staging / "schema.yaml").string(), dataset.schema().text());
  write_file_atomically((staging / "metadata.json").string(), dataset.metadata().text());
  write_file_atomically((staging / "features.yaml").string(), dataset.features()->text());
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "model" << YAML::Value << builder.model_name() << YAML::Key
      << "format" << YAML::Value << (dataset.format() == DataSet::Format::kCsv ? "csv" : "examples")
      << YAML::Key << "args" << YAML::Value << builder.args().raw_args << YAML::EndMap;
  write_file_atomically((staging / "model.yaml").string(), std::string(out.c_str()) + "\n");
  sync_directory(staging.string());
  // The old export goes only once the new one is complete.
  const fs::path old = target.string() + ".old-" + std::to_string(::getpid());
  if (fs::exists(target)) fs::rename(target, old);
  fs::rename(staging, target);
  fs::remove_all(old);
  sync_directory(target.parent_path().empty() ? "." : target.parent_path().string());
}

std::shared_ptr<Model> Model::load(const std::string& path) {
  const fs::path root(path);
  for (const char* file :
       {"model.yaml", "weights", "schema.yaml", "metadata.json", "features.yaml"})
    if (!fs::exists(root / file))
      throw Error("'" + path + "' is not an exported fx model: it has no " + file +
                  " (garden fx train writes <output>/model)");
  YAML::Node spec;
  try {
    spec = YAML::LoadFile((root / "model.yaml").string());
  } catch (const YAML::Exception& e) {
    throw Error((root / "model.yaml").string() + " is not valid YAML: " + e.what());
  }
  auto model = std::shared_ptr<Model>(new Model());
  model->path_ = path;
  const auto type_name = spec["model"].as<std::string>();
  const ModelType& type = model_type(type_name);
  const auto args = type.parse(spec["args"] ? spec["args"].as<std::vector<std::string>>()
                                            : std::vector<std::string>{});
  const auto format = spec["format"] && spec["format"].as<std::string>() == "examples"
                          ? DataSet::Format::kExamples
                          : DataSet::Format::kCsv;
  model->dataset_ = std::make_unique<DataSet>(format, Schema::load((root / "schema.yaml").string()),
                                              Metadata::load((root / "metadata.json").string()),
                                              FeatureSet::load((root / "features.yaml").string()),
                                              std::map<std::string, std::string>{});
  model->builder_ = type.build(args);
  model->builder_->prepare(*model->dataset_);
  const CheckpointData weights = read_checkpoint_file((root / "weights").string());
  load_model_state(model->builder_->module(), weights.tensors, "model/", /*strict=*/true);
  model->graph_ = model->builder_->build_prediction_graph();
  if (const Feature* target = model->dataset_->features()->target()) {
    const SchemaField* field = model->dataset_->schema().find(target->fields.front());
    if (field && !field->numeric())
      model->labels_ = model->dataset_->metadata().entries(field->name);
  }
  return model;
}

std::vector<Model::Prediction> Model::predict(const std::vector<std::string>& instances) const {
  std::vector<Prediction> predictions;
  if (instances.empty()) return predictions;
  const Values outputs = graph_.predict(instances);
  const auto labels = outputs.strings.find("label");
  const auto scores = outputs.tensors.find("scores");
  for (std::size_t i = 0; i < instances.size(); ++i) {
    Prediction p;
    if (labels != outputs.strings.end()) p.label = labels->second.at(i);
    if (scores != outputs.tensors.end()) {
      const at::Tensor row =
          scores->second[static_cast<int64_t>(i)].to(torch::kDouble).contiguous();
      p.scores.assign(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
    }
    predictions.push_back(std::move(p));
  }
  return predictions;
}

}  // namespace garden::fx
