#include "garden/nlp/tasks/tagging_config.h"

#include "garden/config/validation.h"
#include "garden/nlp/data/sentence_prediction_data.h"

namespace garden::nlp {

void TaggingModelConfig::visit(config::Visitor& v) {
  v("encoder", encoder, "The encoder a pretraining run's checkpoint fills.");
  v("head_dropout", head_dropout, "Dropout before the per-token dense layer.");
  v("head_initializer_range", head_initializer_range,
    "Stddev of the per-token dense layer's truncated-normal initializer.");
}

void TaggingModelConfig::validate() const {
  config::check_range("head_dropout", head_dropout, config::Range::at_least(0).below(1));
  config::check_range("head_initializer_range", head_initializer_range, config::Range::above(0));
}

TaggingConfig::TaggingConfig() {
  init_checkpoint_modules = config::NameList{{"encoder"}};
  validation_data.is_training = false;
  validation_data.drop_remainder = false;
}

void TaggingConfig::visit_task_fields(config::Visitor& v) {
  v("hub_module_url", hub_module_url, "A TF Hub encoder (not supported: leave empty).");
  v("class_names", class_names, "The label of each id, in order (e.g. O, B-PER, I-PER, ...).");
}

void TaggingConfig::validate() const {
  const auto& t = train_data;
  const auto& e = validation_data;
  check_validation_tokenizer_keys(t.vocab_file, t.tokenization, t.lower_case, e.vocab_file,
                                  e.tokenization, e.lower_case);
  if (!hub_module_url.empty())
    config::refuse("hub_module_url", "TF Hub modules are not supported; use init_checkpoint");
  model.encoder.bert.check_fits("train_data", train_data.seq_length);
  model.encoder.bert.check_fits("validation_data", validation_data.seq_length);
}

BertTokenClassifierOptions TaggingConfig::model_options() const {
  BertTokenClassifierOptions o;
  o.encoder = model.encoder.bert.options();
  o.num_classes = static_cast<int64_t>(class_names.size());
  o.dropout_rate = model.head_dropout;
  o.initializer_range = model.head_initializer_range;
  return o;
}

}  // namespace garden::nlp
