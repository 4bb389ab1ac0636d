#include "garden/tabular/classification_serving.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <utility>

#include "garden/base/error.h"
#include "garden/tabular/classification.h"

namespace garden::tabular {

TabularClassificationServing::TabularClassificationServing(TabularClassificationTask& task)
    : ServingModule(task), classification_(task) {}

ServingSignature TabularClassificationServing::signature() {
  const TableSchema& table = classification_.schema();
  ServingSignature signature;
  for (const auto& column : table.feature_columns)
    signature.inputs.push_back({column, {"DT_FLOAT", {}}});
  const int64_t classes = static_cast<int64_t>(table.classes.size());
  signature.outputs = {{"logits", {"DT_FLOAT", {classes}}},
                       {"probabilities", {"DT_FLOAT", {classes}}},
                       {"class_ids", {"DT_INT64", {}}},
                       {"classes", {"DT_STRING", {}}}};
  return signature;
}

void TabularClassificationServing::prepare(const nlohmann::json& task_metadata,
                                           const std::map<std::string, std::string>&) {
  if (!task_metadata.contains("classes") || !task_metadata.contains("feature_columns"))
    throw Error("the checkpoint's task metadata has no classes or feature_columns");
  TableSchema schema;
  schema.classes = task_metadata.at("classes").get<std::vector<std::string>>();
  schema.feature_columns = task_metadata.at("feature_columns").get<std::vector<std::string>>();
  // Placeholders of the right size: the model's buffers hold the real ones.
  schema.mean.assign(schema.feature_columns.size(), 0.0);
  schema.stddev.assign(schema.feature_columns.size(), 1.0);
  classification_.use_schema(std::move(schema));
}

Batch TabularClassificationServing::inputs(const std::vector<nlohmann::json>& instances) {
  const auto& columns = classification_.schema().feature_columns;
  std::vector<float> flat;
  flat.reserve(instances.size() * columns.size());
  for (std::size_t i = 0; i < instances.size(); ++i) {
    for (const auto& column : columns) {
      const auto it = instances[i].find(column);
      if (it == instances[i].end())
        throw InputError("instance " + std::to_string(i) + " has no input '" + column + "'");
      if (!it->is_number())
        throw InputError("instance " + std::to_string(i) + ": input '" + column +
                         "' must be a number, not " + std::string(it->type_name()));
      const double value = it->get<double>();
      if (!std::isfinite(value) || std::fabs(value) > std::numeric_limits<float>::max())
        throw InputError("instance " + std::to_string(i) + ": input '" + column +
                         "' is out of float range: " + it->dump());
      flat.push_back(static_cast<float>(value));
    }
  }
  at::Tensor features =
      torch::tensor(flat, torch::kFloat)
          .reshape({static_cast<int64_t>(instances.size()), static_cast<int64_t>(columns.size())});
  return {{"features", features}};
}

std::vector<nlohmann::json> TabularClassificationServing::outputs(const Batch& outputs,
                                                                  std::size_t count) {
  const at::Tensor logits = outputs.at("logits").to(torch::kCPU, torch::kDouble).contiguous();
  const at::Tensor probabilities =
      outputs.at("probabilities").to(torch::kCPU, torch::kDouble).contiguous();
  const at::Tensor ids = outputs.at("class_ids").to(torch::kCPU).contiguous();
  const auto& classes = classification_.schema().classes;
  const int64_t width = logits.size(1);
  std::vector<nlohmann::json> rows;
  rows.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const int64_t row = static_cast<int64_t>(i);
    const double* l = logits.data_ptr<double>() + row * width;
    const double* p = probabilities.data_ptr<double>() + row * width;
    const int64_t id = ids.data_ptr<int64_t>()[row];
    rows.push_back({{"logits", std::vector<double>(l, l + width)},
                    {"probabilities", std::vector<double>(p, p + width)},
                    {"class_ids", id},
                    {"classes", classes.at(static_cast<std::size_t>(id))}});
  }
  return rows;
}

}  // namespace garden::tabular
