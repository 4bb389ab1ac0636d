#include "garden/tabular/classification.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/validation.h"
#include "garden/data/csv.h"

namespace garden::tabular {

TabularClassificationTask::TabularClassificationTask(
    std::shared_ptr<const TabularClassificationConfig> params, std::string logging_dir)
    : Task(params, std::move(logging_dir)), config_(*params) {}

namespace {

struct RawTable {
  std::vector<std::vector<double>> rows;
  std::vector<std::string> labels;
  std::vector<int64_t> lines;  // the line each row starts on
};

// Column names and labels end up in the checkpoint's metadata (JSON), which
// takes UTF-8 only: anything else must fail here, naming the line, not when
// the first checkpoint is written.
void check_utf8(const std::string& text, const data::CsvReader& reader, const std::string& what) {
  const std::string problem = unicode::utf8_error(text);
  if (!problem.empty())
    throw Error("CSV file '" + reader.path() + "' line " + std::to_string(reader.line()) + ", " +
                what + ": " + problem);
}

RawTable read_table(const std::string& path, const std::string& label_column,
                    std::vector<std::string>& feature_columns) {
  data::CsvReader reader(path);
  for (std::size_t i = 0; i < reader.header().size(); ++i)
    check_utf8(reader.header()[i], reader, "the name of column " + std::to_string(i + 1));
  const std::size_t label_index = reader.column(label_column);
  std::vector<std::size_t> feature_index;
  if (feature_columns.empty()) {
    for (std::size_t i = 0; i < reader.header().size(); ++i)
      if (i != label_index) feature_columns.push_back(reader.header()[i]);
  }
  for (std::size_t i = 0; i < feature_columns.size(); ++i) {
    const std::string& name = feature_columns[i];
    if (name == label_column) throw Error("feature_columns lists the label column '" + name + "'");
    if (std::find(feature_columns.begin(), feature_columns.begin() + static_cast<long>(i), name) !=
        feature_columns.begin() + static_cast<long>(i))
      throw Error("task.feature_columns lists '" + name + "' twice");
    feature_index.push_back(reader.column(name));
  }
  if (feature_index.empty()) throw Error("CSV file '" + path + "' has no feature column");
  RawTable table;
  std::vector<std::string> fields;
  while (reader.next(fields)) {
    std::vector<double> row(feature_index.size());
    for (std::size_t f = 0; f < feature_index.size(); ++f) {
      if (!data::parse_double(fields[feature_index[f]], row[f]))
        throw Error("CSV file '" + path + "' line " + std::to_string(reader.line()) + ": column '" +
                    feature_columns[f] + "' is not a number: '" + fields[feature_index[f]] + "'");
    }
    if (fields[label_index].empty())
      throw Error("CSV file '" + path + "' line " + std::to_string(reader.line()) +
                  ": empty label");
    check_utf8(fields[label_index], reader, "label column '" + label_column + "'");
    table.rows.push_back(std::move(row));
    table.labels.push_back(fields[label_index]);
    table.lines.push_back(reader.line());
  }
  if (table.rows.empty()) throw Error("CSV file '" + path + "' has no data rows");
  return table;
}

}  // namespace

void TabularClassificationTask::read_training_rows() {
  if (schema_ready_) return;
  if (config_.train_data.input_path.empty())
    throw config::ConfigError("task.train_data.input_path: is empty; it must name a CSV file");
  TableSchema schema;
  schema.feature_columns = config_.feature_columns;
  RawTable table =
      read_table(config_.train_data.input_path, config_.label_column, schema.feature_columns);
  // A seeded split of the training file into training and held-out rows.
  std::vector<std::size_t> order(table.rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<bool> held_out(order.size(), false);
  if (config_.validation_split > 0) {
    std::mt19937_64 engine(static_cast<uint64_t>(config_.split_seed));
    std::shuffle(order.begin(), order.end(), engine);
    const auto count = static_cast<std::size_t>(
        std::llround(config_.validation_split * static_cast<double>(order.size())));
    for (std::size_t i = 0; i < count; ++i) held_out[order[i]] = true;
  }
  std::set<std::string> classes;
  for (std::size_t i = 0; i < table.rows.size(); ++i)
    if (!held_out[i]) classes.insert(table.labels[i]);
  schema.classes.assign(classes.begin(), classes.end());
  if (schema.classes.size() < 2) {
    const std::size_t kept =
        static_cast<std::size_t>(std::count(held_out.begin(), held_out.end(), false));
    std::string why = "'" + config_.train_data.input_path + "' has " +
                      std::to_string(schema.classes.size()) + " class(es) in column '" +
                      config_.label_column + "'";
    if (kept < table.rows.size())
      why = "task.validation_split " + config::number_text(config_.validation_split) + " left " +
            std::to_string(kept) + " of " + std::to_string(table.rows.size()) + " rows of '" +
            config_.train_data.input_path + "' for training, with " +
            std::to_string(schema.classes.size()) + " class(es) in column '" +
            config_.label_column + "'";
    throw Error(why + "; classification needs at least 2 classes in the training rows");
  }
  std::map<std::string, int64_t> class_id;
  for (std::size_t i = 0; i < schema.classes.size(); ++i)
    class_id[schema.classes[i]] = static_cast<int64_t>(i);

  const std::size_t width = schema.feature_columns.size();
  schema.mean.assign(width, 0.0);
  schema.stddev.assign(width, 0.0);
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    if (held_out[i]) {
      // A held-out label unseen in training cannot be scored; leaving the
      // row out would change what the accuracy is out of.
      const auto it = class_id.find(table.labels[i]);
      if (it == class_id.end())
        throw Error("CSV file '" + config_.train_data.input_path + "' line " +
                    std::to_string(table.lines[i]) + ": label '" + table.labels[i] +
                    "' is held out for validation (task.validation_split " +
                    config::number_text(config_.validation_split) +
                    ") but is in no training row; change task.split_seed or give the class more "
                    "rows");
      holdout_rows_.push_back(table.rows[i]);
      holdout_labels_.push_back(it->second);
    } else {
      train_rows_.push_back(table.rows[i]);
      train_labels_.push_back(class_id.at(table.labels[i]));
    }
  }
  // Statistics from the training rows only.
  for (const auto& row : train_rows_)
    for (std::size_t f = 0; f < width; ++f) schema.mean[f] += row[f];
  for (auto& m : schema.mean) m /= static_cast<double>(train_rows_.size());
  for (const auto& row : train_rows_)
    for (std::size_t f = 0; f < width; ++f)
      schema.stddev[f] += (row[f] - schema.mean[f]) * (row[f] - schema.mean[f]);
  for (auto& s : schema.stddev) {
    s = std::sqrt(s / static_cast<double>(train_rows_.size()));
    if (s == 0.0 || !std::isfinite(s)) s = 1.0;  // a constant column passes through
  }
  schema_ = std::move(schema);
  schema_ready_ = true;
}

const TableSchema& TabularClassificationTask::schema() {
  read_training_rows();
  return schema_;
}

namespace {
at::Tensor rows_to_tensor(const std::vector<std::vector<double>>& rows, std::size_t width) {
  std::vector<float> flat;
  flat.reserve(rows.size() * width);
  for (const auto& row : rows)
    for (double v : row) flat.push_back(static_cast<float>(v));
  return torch::tensor(flat, torch::kFloat)
      .reshape({static_cast<int64_t>(rows.size()), static_cast<int64_t>(width)});
}
}  // namespace

TabularClassificationTask::Table TabularClassificationTask::load(const config::DataConfig& params,
                                                                 bool training) {
  read_training_rows();
  const std::size_t width = schema_.feature_columns.size();
  const bool training_file =
      params.input_path.empty() || params.input_path == config_.train_data.input_path;
  if (training_file) {
    if (!training && config_.validation_split > 0) {
      if (holdout_rows_.empty())
        throw Error("task.validation_split holds out no row of '" + config_.train_data.input_path +
                    "' to evaluate on; raise it or set validation_data.input_path");
      return {rows_to_tensor(holdout_rows_, width), torch::tensor(holdout_labels_, torch::kLong)};
    }
    if (!training)
      log_warning() << "evaluating on the training file itself (set validation_split or "
                       "validation_data.input_path)";
    return {rows_to_tensor(train_rows_, width), torch::tensor(train_labels_, torch::kLong)};
  }
  std::vector<std::string> columns = schema_.feature_columns;
  RawTable table = read_table(params.input_path, config_.label_column, columns);
  std::vector<int64_t> labels;
  for (std::size_t i = 0; i < table.labels.size(); ++i) {
    const auto it = std::find(schema_.classes.begin(), schema_.classes.end(), table.labels[i]);
    if (it == schema_.classes.end())
      throw Error("CSV file '" + params.input_path + "' line " + std::to_string(table.lines[i]) +
                  ": label '" + table.labels[i] + "' is not a class of the training data");
    labels.push_back(it - schema_.classes.begin());
  }
  return {rows_to_tensor(table.rows, width), torch::tensor(labels, torch::kLong)};
}

DatasetPtr TabularClassificationTask::build_inputs(const config::DataConfig& params,
                                                   const InputContext& input_context) {
  const bool training = params.is_training.value_or(false);
  Table table = load(params, training);
  const int64_t batch = input_context.per_replica_batch_size(params.global_batch_size);
  // Shard by row across input pipelines.
  if (input_context.num_input_pipelines > 1 && params.sharding) {
    const at::Tensor rows = torch::arange(input_context.input_pipeline_id, table.features.size(0),
                                          input_context.num_input_pipelines);
    table.features = table.features.index_select(0, rows);
    table.labels = table.labels.index_select(0, rows);
  }
  if (!training && params.drop_remainder && table.features.size(0) < batch)
    throw Error("validation data has " + std::to_string(table.features.size(0)) +
                " rows, fewer than global_batch_size " + std::to_string(batch) +
                " with drop_remainder: true, so it would yield no batch");
  return std::make_shared<TableDataset>(table.features, table.labels, batch, training,
                                        params.drop_remainder,
                                        static_cast<uint64_t>(params.seed.value_or(0)));
}

ModelPtr TabularClassificationTask::build_model() {
  return FeedForwardClassifier(config_.model, schema()).ptr();
}

Batch TabularClassificationTask::call_model(Model& model, const Batch& features, bool) {
  auto* classifier = model.as<FeedForwardClassifierImpl>();
  if (!classifier) throw Error("tabular/classification needs its FeedForwardClassifier model");
  return {{"logits", classifier->forward(features.at("features"))}};
}

Losses TabularClassificationTask::build_losses(const Batch& labels, const Batch& outputs,
                                               const at::Tensor& aux_losses) {
  const at::Tensor& label = labels.at("label");
  Losses losses(torch::nn::functional::cross_entropy(outputs.at("logits"), label),
                torch::full({}, static_cast<double>(label.size(0))));
  losses.add_aux(aux_losses);
  return losses;
}

MetricList TabularClassificationTask::build_metrics(bool) {
  return {std::make_shared<SparseCategoricalAccuracy>("accuracy")};
}

Batch TabularClassificationTask::inference_step(const Batch& inputs, Model& model) {
  Batch outputs = Task::inference_step(inputs, model);
  const at::Tensor logits = outputs.at("logits");
  outputs["probabilities"] = torch::softmax(logits, -1);
  outputs["class_ids"] = logits.argmax(-1);
  return outputs;
}

nlohmann::json TabularClassificationTask::checkpoint_metadata() const {
  return {{"classes", schema_.classes},
          {"feature_columns", schema_.feature_columns},
          {"label_column", config_.label_column}};
}

void TabularClassificationTask::restore_checkpoint_metadata(const nlohmann::json& metadata) {
  if (!metadata.contains("classes")) return;
  const std::vector<std::string> classes = metadata.at("classes");
  if (schema_ready_ && classes != schema_.classes)
    throw Error("the checkpoint's classes differ from those of the training data '" +
                config_.train_data.input_path + "'");
  // The model standardizes and weighs its inputs in the checkpoint's column
  // order: a file whose columns were reordered or renamed would feed it the
  // wrong ones.
  if (schema_ready_ && metadata.contains("feature_columns")) {
    const std::vector<std::string> columns = metadata.at("feature_columns");
    if (columns != schema_.feature_columns) {
      const auto list = [](const std::vector<std::string>& names) {
        std::string out;
        for (const auto& name : names) out += (out.empty() ? "" : ",") + name;
        return "[" + out + "]";
      };
      throw Error("the checkpoint's feature columns " + list(columns) + " differ from " +
                  list(schema_.feature_columns) + " of '" + config_.train_data.input_path +
                  "'; set task.feature_columns=" + list(columns) +
                  " to read the file's columns by name");
    }
  }
}

void TabularClassificationTask::use_schema(TableSchema schema) {
  schema_ = std::move(schema);
  schema_ready_ = true;
}

}  // namespace garden::tabular
