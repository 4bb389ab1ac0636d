// Task `tabular/classification`: a CSV file with a header, a label column and
// numeric feature columns; a feed-forward network over standardized features.
// Its config, model and dataset have headers of their own, included here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "garden/core/task.h"
#include "garden/tabular/classification_config.h"
#include "garden/tabular/feed_forward_classifier.h"
#include "garden/tabular/table_dataset.h"

namespace garden::tabular {

class TabularClassificationTask : public Task {
 public:
  TabularClassificationTask(std::shared_ptr<const TabularClassificationConfig> params,
                            std::string logging_dir = "");

  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  Batch call_model(Model& model, const Batch& features, bool training) override;
  // Cross-entropy averaged over the batch's rows.
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  MetricList build_metrics(bool training = true) override;
  // The columns and the split decide the classes and the standardization.
  std::vector<std::string> keys_fixed_by_training() const override {
    return {"task.label_column", "task.feature_columns", "task.validation_split",
            "task.split_seed"};
  }
  // Adds probabilities and class ids to the logits.
  Batch inference_step(const Batch& inputs, Model& model) override;
  nlohmann::json checkpoint_metadata() const override;
  void restore_checkpoint_metadata(const nlohmann::json& metadata) override;

  // The schema learned from the training data (read on first use).
  const TableSchema& schema();
  // `schema` from now on, no training data read (an export's: its columns
  // and classes from the checkpoint's metadata).
  void use_schema(TableSchema schema);

 private:
  struct Table {
    at::Tensor features;  // [rows, features] float32, raw values
    at::Tensor labels;    // [rows] int64 class ids
  };
  // Rows of `params` (the held-out split when it comes from the training file).
  Table load(const config::DataConfig& params, bool training);
  void read_training_rows();

  const TabularClassificationConfig& config_;
  bool schema_ready_ = false;
  TableSchema schema_;
  std::vector<std::vector<double>> train_rows_;
  std::vector<int64_t> train_labels_;
  std::vector<std::vector<double>> holdout_rows_;
  std::vector<int64_t> holdout_labels_;
};

}  // namespace garden::tabular
