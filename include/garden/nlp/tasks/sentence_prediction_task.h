// Model Garden's SentencePredictionTask (official/nlp/tasks/
// sentence_prediction.py): one sentence or a pair -> a class or a number,
// fine-tuning a pretrained encoder with a classification head on [CLS].
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "garden/core/task.h"
#include "garden/nlp/data/finetuning_tokenizer.h"
#include "garden/nlp/tasks/sentence_prediction_config.h"

namespace garden::nlp {

struct HuggingFaceExport;

class SentencePredictionTask : public Task {
 public:
  // garden export --format=huggingface: the model as BertForSequenceClassification;
  // registered for the task's config beside register_task.
  static HuggingFaceExport to_huggingface(Task& task, Model& model);

  SentencePredictionTask(std::shared_ptr<const SentencePredictionConfig> params,
                         std::string logging_dir = "");

  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  // logits [B, num_classes]; for regression also predictions [B].
  Batch call_model(Model& model, const Batch& features, bool training) override;
  // Sparse softmax cross-entropy over the classes, or the mean squared error
  // of the regression output, averaged over the batch.
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  // cls_accuracy, or mean_squared_error for regression.
  MetricList build_metrics(bool training = true) override;
  // Keeps each example's label and prediction for the
  // evaluation's metric_type.
  void add_validation_outputs(const Batch& inputs, const Batch& outputs, Logs& logs) override;
  // matthews_corrcoef or pearson_spearman_corr as metric_type asks (Model
  // Garden's keys), and f1 (of class 1) for two classes.
  Logs reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step) override;
  std::vector<std::string> aggregated_log_names() const override;
  // The encoder, restored by init_checkpoint; with init_cls_pooler also the
  // head's dense layer from a pretrainer's next_sentence head.
  void initialize(Model& model) override;
  // task.layerwise_lr_decay over the encoder's layers.
  std::vector<double> learning_rate_scales(
      const std::vector<optim::NamedParameter>& parameters) const override {
    return encoder_learning_rate_scales(parameters, config_);
  }
  std::map<std::string, std::string> checkpoint_items() const override {
    return {{"encoder", "encoder"}};
  }

  // logits and probabilities (softmax), or predictions for regression.
  Batch inference_step(const Batch& inputs, Model& model) override;

  const SentencePredictionConfig& config() const { return config_; }
  // One output, a number, instead of classes.
  bool regression() const { return config_.model.num_classes == 1; }
  // The raw-text tokenizer (train_data's, or the export's asset).
  const FinetuningTokenizer& tokenizer();
  TaskTextTokenizer& text_tokenizer() { return text_tokenizer_; }

 private:
  const SentencePredictionConfig& config_;
  TaskTextTokenizer text_tokenizer_;
};

}  // namespace garden::nlp
