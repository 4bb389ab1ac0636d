// The config of task `tabular/classification`: the feed-forward model's keys
// and the task's (label and feature columns, the validation split).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "garden/config/definitions.h"

namespace garden::tabular {

struct FeedForwardConfig : config::Config {
  std::vector<int64_t> hidden_layer_sizes = {64, 64};
  std::string activation = "relu";
  double dropout_rate = 0.0;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct TabularClassificationConfig : config::TaskConfigWith<FeedForwardConfig, config::DataConfig> {
  std::string label_column = "label";
  std::vector<std::string> feature_columns;  // empty: every column but the label
  double validation_split = 0.0;
  int64_t split_seed = 0;
  // The task reads CSV files only; params.yaml says so.
  TabularClassificationConfig() {
    train_data.file_type = "csv";
    validation_data.file_type = "csv";
  }
  void validate() const override;

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

}  // namespace garden::tabular
