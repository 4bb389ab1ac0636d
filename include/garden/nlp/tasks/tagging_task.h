// Model Garden's TaggingTask (official/nlp/tasks/tagging.py): a label per
// word (on its first sub-word), fine-tuning a pretrained encoder.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "garden/core/task.h"
#include "garden/nlp/data/finetuning_tokenizer.h"
#include "garden/nlp/tasks/tagging_config.h"

namespace garden::nlp {

struct HuggingFaceExport;

class TaggingTask : public Task {
 public:
  // garden export --format=huggingface: the model as BertForTokenClassification or
  // ElectraForTokenClassification; registered for the task's config beside register_task.
  static HuggingFaceExport to_huggingface(Task& task, Model& model);

  TaggingTask(std::shared_ptr<const TaggingConfig> params, std::string logging_dir = "");

  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  // task.init_checkpoint: a Garden checkpoint, or a Hugging Face BERT or
  // ELECTRA directory (its encoder).
  void initialize(Model& model) override;
  // logits [B, S, classes].
  Batch call_model(Model& model, const Batch& features, bool training) override;
  // Softmax cross-entropy over the tokens whose label id is >= 0.
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  // accuracy over the labelled tokens.
  MetricList build_metrics(bool training = true) override;
  void process_metrics(MetricList& metrics, const Batch& labels,
                       const Batch& model_outputs) override;
  // Keeps each sequence's labelled tokens' label and
  // prediction ids.
  void add_validation_outputs(const Batch& inputs, const Batch& outputs, Logs& logs) override;
  // seqeval's precision, recall, f1 (entity spans) and accuracy over the
  // class names, as Model Garden reports them.
  Logs reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step) override;
  std::vector<std::string> aggregated_log_names() const override {
    return {"precision", "recall", "f1", "accuracy"};
  }
  // task.layerwise_lr_decay over the encoder's layers.
  std::vector<double> learning_rate_scales(
      const std::vector<optim::NamedParameter>& parameters) const override {
    return encoder_learning_rate_scales(parameters, config_);
  }
  std::map<std::string, std::string> checkpoint_items() const override {
    return {{"encoder", "encoder"}};
  }

  // Adds predictions [B, S] (class ids) and passes word_positions through.
  Batch inference_step(const Batch& inputs, Model& model) override;

  const TaggingConfig& config() const { return config_; }
  // The raw-text tokenizer (train_data's, or the export's asset).
  const FinetuningTokenizer& tokenizer();
  TaskTextTokenizer& text_tokenizer() { return text_tokenizer_; }

 private:
  const TaggingConfig& config_;
  TaskTextTokenizer text_tokenizer_;
};

}  // namespace garden::nlp
