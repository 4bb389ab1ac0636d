// Model Garden's QuestionAnsweringTask (official/nlp/tasks/
// question_answering.py): SQuAD v1.1 and v2.0 span prediction, fine-tuning
// a pretrained encoder. Training reads the records create_finetuning_data
// wrote; evaluation converts the SQuAD JSON itself, merges the windows'
// logits into one answer per question and scores them by the official
// evaluation's rules.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "garden/core/task.h"
#include "garden/nlp/data/finetuning_tokenizer.h"
#include "garden/nlp/data/squad_data.h"
#include "garden/nlp/tasks/question_answering_config.h"

namespace garden::nlp {

struct HuggingFaceExport;

class QuestionAnsweringTask : public Task {
 public:
  // garden export --format=huggingface: the model as BertForQuestionAnswering or
  // ElectraForQuestionAnswering; registered for the task's config beside register_task.
  static HuggingFaceExport to_huggingface(Task& task, Model& model);

  QuestionAnsweringTask(std::shared_ptr<const QuestionAnsweringConfig> params,
                        std::string logging_dir = "");
  ~QuestionAnsweringTask() override;

  // Training: the records. Evaluation: validation_data.input_path is the
  // SQuAD JSON, converted with the tokenizer into windows written to
  // input_preprocessed_data_path (or a temporary folder) and read back.
  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  // task.init_checkpoint: a Garden checkpoint, or a Hugging Face BERT or
  // ELECTRA directory (its encoder).
  void initialize(Model& model) override;
  // start_logits, end_logits [B, S].
  Batch call_model(Model& model, const Batch& features, bool training) override;
  // The mean of the start and end positions' softmax cross-entropies.
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  // start_position_accuracy, end_position_accuracy.
  MetricList build_metrics(bool training = true) override;
  // Keeps each window's unique id and logits.
  void add_validation_outputs(const Batch& inputs, const Batch& outputs, Logs& logs) override;
  // exact_match and final_f1 in [0, 1] (Model Garden's names and scale),
  // from the answers postprocess_squad merges; writes them to
  // predictions.json in the logging folder.
  Logs reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step) override;
  std::vector<std::string> aggregated_log_names() const override {
    return {"exact_match", "final_f1"};
  }
  // task.layerwise_lr_decay over the encoder's layers.
  std::vector<double> learning_rate_scales(
      const std::vector<optim::NamedParameter>& parameters) const override {
    return encoder_learning_rate_scales(parameters, config_);
  }
  std::map<std::string, std::string> checkpoint_items() const override {
    return {{"encoder", "encoder"}};
  }

  // The evaluation set as last converted (for tests and tools).
  const std::vector<SquadExample>& eval_examples() const { return eval_examples_; }
  const std::vector<SquadFeature>& eval_features() const { return eval_features_; }

  // What evaluation and serving share, so that a served question is
  // answered as the evaluation answers it. The tokenizer: validation_data's
  // vocab_file, else train_data's (an export's asset once served).
  const QuestionAnsweringConfig& config() const { return config_; }
  TaskTextTokenizer& text_tokenizer() { return text_tokenizer_; }
  const FinetuningTokenizer& tokenizer();
  // Questions cut into windows: validation_data's seq_length, doc_stride
  // and query_length.
  std::vector<SquadFeature> windows(const std::vector<SquadExample>& examples);
  // The windows' logits merged into one answer per question: n_best_size,
  // max_answer_length, and for v2.0 the null-score rule with
  // null_score_diff_threshold.
  SquadPredictions merge_answers(const std::vector<SquadExample>& examples,
                                 const std::vector<SquadFeature>& windows,
                                 const std::vector<SquadRawResult>& results);

 private:
  const QuestionAnsweringConfig& config_;
  TaskTextTokenizer text_tokenizer_;
  std::vector<SquadExample> eval_examples_;
  std::vector<SquadFeature> eval_features_;
  std::string temporary_dir_;
};

}  // namespace garden::nlp
