#include "garden/tabular/classification_config.h"

#include <string>
#include <utility>

#include "garden/config/validation.h"

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
  // An empty train_data.input_path is refused when the CSV is read, not
  // here: `garden config` shows an experiment before its paths are set.
  // The CSV file is read into memory once and served by TableDataset: these
  // DataConfig keys of the file pipeline would have no effect.
  const config::DataConfig defaults;
  for (const auto& [name, data] :
       {std::pair<std::string, const config::DataConfig*>{"train_data", &train_data},
        {"validation_data", &validation_data}}) {
    const auto refuse_set = [&, &name = name](const char* key, bool is_default,
                                              const std::string& value) {
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
    if (data->file_type != "csv")
      config::refuse(name + ".file_type",
                     "'" + data->file_type + "' is not csv; this task reads CSV files only");
  }
}

}  // namespace garden::tabular
