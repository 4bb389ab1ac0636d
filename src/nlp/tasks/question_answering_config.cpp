#include "garden/nlp/tasks/question_answering_config.h"

#include "garden/base/error.h"
#include "garden/config/validation.h"
#include "garden/nlp/data/tagging_data.h"  // meta_data_beside

namespace garden::nlp {

void QuestionAnsweringModelConfig::visit(config::Visitor& v) {
  v("encoder", encoder, "The encoder a pretraining run's checkpoint fills.");
}

void QuestionAnsweringConfig::resolve_from_files() {
  for (const auto& [path, meta] : meta_data_beside(train_data.input_path, "bert_squad")) {
    const auto v2 = meta.find("version_2_with_negative");
    if (v2 == meta.end() || !v2->is_boolean()) continue;
    const bool records_v2 = v2->get<bool>();
    if (records_v2 == train_data.version_2_with_negative) continue;
    const std::string value = records_v2 ? "true" : "false";
    throw Error("'" + path + "' says the records beside it were made with " +
                "version_2_with_negative " + value +
                ", but task.train_data.version_2_with_negative is " +
                (records_v2 ? "false" : "true") + ": set task.train_data." +
                "version_2_with_negative=" + value + ",task.validation_data." +
                "version_2_with_negative=" + value);
  }
}

QuestionAnsweringConfig::QuestionAnsweringConfig() {
  init_checkpoint_modules = config::NameList{{"encoder"}};
  validation_data.is_training = false;
  validation_data.drop_remainder = false;
}

void QuestionAnsweringConfig::visit_task_fields(config::Visitor& v) {
  v("hub_module_url", hub_module_url, "A TF Hub encoder (not supported: leave empty).");
  v("n_best_size", n_best_size,
    "Start and end logits kept per window when spans are paired, and answers kept per question.");
  v("max_answer_length", max_answer_length, "Tokens in an answer at most.");
  v("null_score_diff_threshold", null_score_diff_threshold,
    "SQuAD v2.0: answer nothing when the no-answer score beats the best span's by more.");
  v("layerwise_lr_decay", layerwise_lr_decay,
    "ELECTRA's fine-tuning flag: each encoder layer learns at this factor of the rate of the "
    "layer above it (the embeddings lowest, the task's head at the rate itself); 1: one rate for "
    "all.");
}

void QuestionAnsweringConfig::validate() const {
  config::check_range("layerwise_lr_decay", layerwise_lr_decay,
                      config::Range::above(0.0).at_most(1.0));
  const auto& t = train_data;
  const auto& e = validation_data;
  // Evaluation tokenizes the JSON with validation_data's tokenizer (Model
  // Garden's); train_data's is the records'. Either may be left empty.
  if (!e.vocab_file.empty() && !t.vocab_file.empty() && e.vocab_file != t.vocab_file)
    config::refuse(
        "validation_data.vocab_file",
        "'" + e.vocab_file + "' differs from train_data.vocab_file '" + t.vocab_file + "'");
  if (e.tokenization != t.tokenization)
    config::refuse(
        "validation_data.tokenization",
        "'" + e.tokenization + "' differs from train_data.tokenization '" + t.tokenization + "'");
  if (e.do_lower_case != t.do_lower_case)
    config::refuse("validation_data.do_lower_case", "differs from train_data.do_lower_case");
  if (e.version_2_with_negative != t.version_2_with_negative)
    config::refuse("validation_data.version_2_with_negative",
                   "differs from train_data.version_2_with_negative");
  if (!hub_module_url.empty())
    config::refuse("hub_module_url", "TF Hub modules are not supported; use init_checkpoint");
  config::check_range("n_best_size", n_best_size, config::Range::at_least(1));
  config::check_range("max_answer_length", max_answer_length, config::Range::at_least(1));
  config::check_range("null_score_diff_threshold", null_score_diff_threshold, config::Range::any());
  model.encoder.bert.check_fits("train_data", train_data.seq_length);
  model.encoder.bert.check_fits("validation_data", validation_data.seq_length);
}

BertSpanLabelerOptions QuestionAnsweringConfig::model_options() const {
  BertSpanLabelerOptions o;
  o.encoder = model.encoder.bert.options();
  o.initializer_range = model.encoder.bert.initializer_range;
  return o;
}

}  // namespace garden::nlp
