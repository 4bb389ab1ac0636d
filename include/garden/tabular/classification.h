// Task `tabular/classification`: a CSV file with a header, a label column and
// numeric feature columns; a feed-forward network over standardized features.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "garden/core/config/definitions.h"
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "garden/core/task.h"

namespace garden::tabular {

struct FeedForwardConfig : config::Config {
  std::vector<int64_t> hidden_layer_sizes = {64, 64};
  std::string activation = "relu";
  double dropout_rate = 0.0;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct TabularClassificationConfig
    : config::TaskConfigWith<FeedForwardConfig, config::DataConfig> {
  std::string label_column = "label";
  std::vector<std::string> feature_columns;  // empty: every column but the label
  double validation_split = 0.0;
  int64_t split_seed = 0;
  void validate() const override;

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

// What the task learns from the training data and saves with the model.
struct TableSchema {
  std::vector<std::string> feature_columns;
  std::vector<std::string> classes;  // sorted; a label's index is its class id
  std::vector<double> mean;          // per feature, from the training rows
  std::vector<double> stddev;
};

// A feed-forward classifier that standardizes its inputs with buffers
// (feature_mean, feature_stddev), so the saved model needs nothing else.
class FeedForwardClassifierImpl : public torch::nn::Module {
 public:
  FeedForwardClassifierImpl(const FeedForwardConfig& config, const TableSchema& schema);
  at::Tensor forward(const at::Tensor& features);

 private:
  at::Tensor mean_, stddev_;
  std::vector<torch::nn::Linear> layers_;
  std::string activation_;
  double dropout_rate_;
};
TORCH_MODULE(FeedForwardClassifier);

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

// An in-memory table served in batches: a seeded full shuffle per epoch and
// repetition when training, one ordered pass otherwise.
class TableDataset : public Dataset {
 public:
  TableDataset(at::Tensor features, at::Tensor labels, int64_t batch_size, bool training,
               bool drop_remainder, uint64_t seed);
  std::optional<Batch> next() override;
  void reset() override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  int64_t size() const { return features_.size(0); }

 private:
  void start_epoch();

  at::Tensor features_, labels_;
  int64_t batch_size_;
  bool training_;
  bool drop_remainder_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  at::Tensor order_;
};

void register_tabular();

}  // namespace garden::tabular
