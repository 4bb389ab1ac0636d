#include "garden/tabular/classification.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "garden/base/encoding.h"
#include "garden/core/config/registry.h"
#include "garden/core/config/validation.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/base/paths.h"
#include "garden/data/csv.h"

namespace garden::tabular {

void FeedForwardConfig::visit(config::Visitor& v) {
  v("hidden_layer_sizes", hidden_layer_sizes, "Width of each hidden layer.");
  v("activation", activation, "relu, gelu or tanh.");
  v("dropout_rate", dropout_rate, "Dropout after each hidden layer.");
}

void FeedForwardConfig::validate() const {
  config::check_each("hidden_layer_sizes", hidden_layer_sizes, config::Range::at_least(1));
  if (activation != "relu" && activation != "gelu" && activation != "tanh")
    config::refuse("activation", "'" + activation + "' is not one of relu, gelu, tanh");
  config::check_range("dropout_rate", dropout_rate, config::Range::at_least(0).below(1));
}

void TabularClassificationConfig::visit_task_fields(config::Visitor& v) {
  v("label_column", label_column, "Name of the label column.");
  v("feature_columns", feature_columns, "Feature columns; empty means every other column.");
  v("validation_split", validation_split,
    "Fraction of the training rows held out for validation when validation_data.input_path is "
    "empty.");
  v("split_seed", split_seed, "Seed of the validation split.");
}

void TabularClassificationConfig::validate() const {
  if (label_column.empty()) config::refuse("label_column", "is empty; name the label column");
  config::check_range("validation_split", validation_split, config::Range::at_least(0).below(1));
  config::check_range("split_seed", split_seed, config::Range::at_least(0));
  if (train_data.input_path.empty())
    config::refuse("train_data.input_path", "is empty; it must name a CSV file");
  // The CSV file is read into memory once and served by TableDataset: these
  // DataConfig keys of the file pipeline would have no effect.
  const config::DataConfig defaults;
  for (const auto& [name, data] :
       {std::pair<std::string, const config::DataConfig*>{"train_data", &train_data},
        {"validation_data", &validation_data}}) {
    const auto refuse_set = [&](const char* key, bool is_default, const std::string& value) {
      if (!is_default)
        config::refuse(name + "." + key,
                       value +
                           " has no effect here: the table is read into memory and fully "
                           "shuffled each epoch; leave " +
                           key + " at its default");
    };
    refuse_set("shuffle_buffer_size", data->shuffle_buffer_size == defaults.shuffle_buffer_size,
               std::to_string(data->shuffle_buffer_size));
    refuse_set("cache", data->cache == defaults.cache, data->cache ? "true" : "false");
    refuse_set("cycle_length", data->cycle_length == defaults.cycle_length,
               data->cycle_length ? std::to_string(*data->cycle_length) : "null");
    refuse_set("block_length", data->block_length == defaults.block_length,
               std::to_string(data->block_length));
    refuse_set("prefetch_buffer_size", data->prefetch_buffer_size == defaults.prefetch_buffer_size,
               data->prefetch_buffer_size ? std::to_string(*data->prefetch_buffer_size) : "null");
    refuse_set("compression_type", data->compression_type == defaults.compression_type,
               "'" + data->compression_type + "'");
    refuse_set("skip_corrupt_records", data->skip_corrupt_records == defaults.skip_corrupt_records,
               data->skip_corrupt_records ? "true" : "false");
    // Always CSV; the generic default (tfrecord) stands for "unset".
    if (data->file_type != defaults.file_type && data->file_type != "csv")
      config::refuse(name + ".file_type",
                     "'" + data->file_type + "' is not csv; this task reads CSV files only");
  }
}

// ---- model -------------------------------------------------------------------

FeedForwardClassifierImpl::FeedForwardClassifierImpl(const FeedForwardConfig& config,
                                                     const TableSchema& schema)
    : activation_(config.activation), dropout_rate_(config.dropout_rate) {
  const auto width = static_cast<int64_t>(schema.feature_columns.size());
  mean_ = register_buffer("feature_mean",
                          torch::tensor(schema.mean, torch::kDouble).to(torch::kFloat));
  stddev_ = register_buffer("feature_stddev",
                            torch::tensor(schema.stddev, torch::kDouble).to(torch::kFloat));
  int64_t in = width;
  std::vector<int64_t> sizes = config.hidden_layer_sizes;
  sizes.push_back(static_cast<int64_t>(schema.classes.size()));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    layers_.push_back(register_module("dense_" + std::to_string(i), torch::nn::Linear(in, sizes[i])));
    in = sizes[i];
  }
}

at::Tensor FeedForwardClassifierImpl::forward(const at::Tensor& features) {
  at::Tensor x = (features - mean_) / stddev_;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    x = layers_[i]->forward(x);
    if (i + 1 == layers_.size()) break;
    if (activation_ == "relu")
      x = torch::relu(x);
    else if (activation_ == "gelu")
      x = torch::gelu(x);
    else
      x = torch::tanh(x);
    if (dropout_rate_ > 0) x = torch::dropout(x, dropout_rate_, is_training());
  }
  return x;
}

// ---- dataset -----------------------------------------------------------------

TableDataset::TableDataset(at::Tensor features, at::Tensor labels, int64_t batch_size,
                           bool training, bool drop_remainder, uint64_t seed)
    : features_(std::move(features)),
      labels_(std::move(labels)),
      batch_size_(batch_size),
      training_(training),
      drop_remainder_(drop_remainder),
      seed_(seed) {
  if (batch_size_ < 1) throw Error("global_batch_size must be >= 1");
  start_epoch();
}

void TableDataset::start_epoch() {
  const int64_t n = features_.size(0);
  if (!training_) {
    order_ = torch::arange(n, torch::kLong);
    return;
  }
  // Each epoch's order depends only on (seed, epoch): a restored position
  // sees exactly the rows an uninterrupted run would.
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  std::mt19937_64 engine(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch_));
  for (int64_t i = n - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(pick(engine))]);
  }
  order_ = torch::tensor(order, torch::kLong);
}

std::optional<Batch> TableDataset::next() {
  const int64_t n = features_.size(0);
  if (n == 0) return std::nullopt;
  int64_t remaining = n - position_;
  if (remaining <= 0 || (drop_remainder_ && remaining < batch_size_)) {
    if (!training_) return std::nullopt;
    ++epoch_;
    position_ = 0;
    start_epoch();
    remaining = n;
    if (drop_remainder_ && remaining < batch_size_)
      throw Error("the training data has " + std::to_string(n) +
                  " rows, fewer than global_batch_size " + std::to_string(batch_size_) +
                  " with drop_remainder: true");
  }
  const int64_t size = std::min(batch_size_, remaining);
  const at::Tensor index = order_.narrow(0, position_, size);
  position_ += size;
  return Batch{{"features", features_.index_select(0, index)},
               {"label", labels_.index_select(0, index)}};
}

void TableDataset::reset() {
  epoch_ = 0;
  position_ = 0;
  start_epoch();
}

nlohmann::json TableDataset::state() const {
  return {{"epoch", epoch_}, {"position", position_}, {"seed", seed_}};
}

void TableDataset::restore(const nlohmann::json& state) {
  if (state.value("seed", seed_) != seed_)
    throw Error("the checkpoint's data seed differs from this run's; set the same task.*_data.seed");
  epoch_ = state.at("epoch");
  position_ = state.at("position");
  start_epoch();
}

// ---- task --------------------------------------------------------------------

TabularClassificationTask::TabularClassificationTask(
    std::shared_ptr<const TabularClassificationConfig> params, std::string logging_dir)
    : Task(params, std::move(logging_dir)), config_(*params) {}

namespace {

struct RawTable {
  std::vector<std::vector<double>> rows;
  std::vector<std::string> labels;
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
  for (const auto& name : feature_columns) {
    if (name == label_column)
      throw Error("feature_columns lists the label column '" + name + "'");
    feature_index.push_back(reader.column(name));
  }
  if (feature_index.empty()) throw Error("CSV file '" + path + "' has no feature column");
  RawTable table;
  std::vector<std::string> fields;
  while (reader.next(fields)) {
    std::vector<double> row(feature_index.size());
    for (std::size_t f = 0; f < feature_index.size(); ++f) {
      if (!data::parse_double(fields[feature_index[f]], row[f]))
        throw Error("CSV file '" + path + "' line " + std::to_string(reader.line()) +
                    ": column '" + feature_columns[f] + "' is not a number: '" +
                    fields[feature_index[f]] + "'");
    }
    if (fields[label_index].empty())
      throw Error("CSV file '" + path + "' line " + std::to_string(reader.line()) +
                  ": empty label");
    check_utf8(fields[label_index], reader, "label column '" + label_column + "'");
    table.rows.push_back(std::move(row));
    table.labels.push_back(fields[label_index]);
  }
  if (table.rows.empty()) throw Error("CSV file '" + path + "' has no data rows");
  return table;
}

}  // namespace

void TabularClassificationTask::read_training_rows() {
  if (schema_ready_) return;
  TableSchema schema;
  schema.feature_columns = config_.feature_columns;
  RawTable table = read_table(config_.train_data.input_path, config_.label_column,
                              schema.feature_columns);
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
      // Held-out labels unseen in training cannot be scored.
      const auto it = class_id.find(table.labels[i]);
      if (it == class_id.end()) continue;
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
                    "' to evaluate on (or only rows whose labels are not training "
                    "classes); raise it or set validation_data.input_path");
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
      throw Error("CSV file '" + params.input_path + "': label '" + table.labels[i] +
                  "' (data row " + std::to_string(i + 1) + ") is not a class of the training data");
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
}

// ---- registration ------------------------------------------------------------

namespace {
std::shared_ptr<config::ExperimentConfig> iris_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = std::make_shared<TabularClassificationConfig>();
  task->name = "iris";
  task->label_column = "label";
  task->validation_split = 0.2;
  task->split_seed = 1;
  task->model.hidden_layer_sizes = {32, 32};
  task->model.dropout_rate = 0.1;
  task->train_data.input_path = bundled_data_path("iris/iris.csv");
  task->train_data.global_batch_size = 16;
  task->train_data.is_training = true;
  task->validation_data.global_batch_size = 32;
  task->validation_data.is_training = false;
  task->validation_data.drop_remainder = false;
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = 400;
  trainer.steps_per_loop = 50;
  trainer.summary_interval = 50;
  trainer.checkpoint_interval = 100;
  trainer.validation_interval = 100;
  trainer.max_to_keep = 3;
  trainer.optimizer_config.optimizer.type = "adam";
  trainer.optimizer_config.learning_rate.type = "constant";
  trainer.optimizer_config.learning_rate.constant.learning_rate = 0.01;
  experiment->runtime.distribution_strategy = "one_device";
  experiment->runtime.seed = 1;
  return experiment;
}

std::shared_ptr<config::ExperimentConfig> classification_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = std::make_shared<TabularClassificationConfig>();
  task->train_data.is_training = true;
  task->train_data.global_batch_size = 32;
  task->validation_data.is_training = false;
  task->validation_data.drop_remainder = false;
  task->validation_data.global_batch_size = 32;
  experiment->task = task;
  experiment->trainer.optimizer_config.optimizer.type = "adam";
  experiment->trainer.optimizer_config.learning_rate.constant.learning_rate = 0.001;
  experiment->runtime.distribution_strategy = "one_device";
  return experiment;
}
}  // namespace

void register_tabular() {
  register_task<TabularClassificationConfig, TabularClassificationTask>("tabular/classification");
  config::register_experiment("tabular/classification",
                              "feed-forward classifier for any numeric CSV (set input paths)",
                              classification_experiment);
  config::register_experiment("tabular/iris",
                              "iris species from 4 measurements, bundled data (the demo)",
                              iris_experiment);
}

}  // namespace garden::tabular
