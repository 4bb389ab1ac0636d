#include "garden/nlp/tasks/sentence_prediction_config.h"

#include "garden/config/validation.h"

namespace garden::nlp {

void SentencePredictionModelConfig::visit(config::Visitor& v) {
  v("num_classes", num_classes, "Classes of the output; 1: a regression output.");
  v("use_encoder_pooler", use_encoder_pooler,
    "Classify the encoder's pooled output (Garden's encoder has no pooler: only false).");
  v("pooling", pooling,
    "Garden's: what the head classifies: cls, the [CLS] output (Model Garden's); mean, the mean "
    "of the outputs of the sequence's tokens, padding left out.");
  v("encoder", encoder, "The encoder a pretraining run's checkpoint fills.");
}

void SentencePredictionModelConfig::validate() const {
  // 0, Model Garden's default, means "not set yet": garden config shows the
  // experiment; building the model asks for it.
  config::check_range("num_classes", num_classes, config::Range::at_least(0));
  if (use_encoder_pooler)
    config::refuse("use_encoder_pooler",
                   "true is not implemented: Garden's BERT encoder has no pooler; the "
                   "classification head reads the [CLS] output (the default, false)");
  if (pooling != "cls" && pooling != "mean")
    config::refuse("pooling", "'" + pooling + "' is not one of cls, mean");
}

BertClassifierOptions SentencePredictionModelConfig::options() const {
  BertClassifierOptions o;
  o.encoder = encoder.bert.options();
  o.num_classes = num_classes;
  o.pooling = pooling;
  return o;
}

SentencePredictionConfig::SentencePredictionConfig() {
  init_checkpoint_modules = config::NameList{{"encoder"}};
  validation_data.is_training = false;
  validation_data.drop_remainder = false;
}

void SentencePredictionConfig::visit_task_fields(config::Visitor& v) {
  v("init_cls_pooler", init_cls_pooler,
    "Also start the head's dense layer from the pretrainer's next_sentence head.");
  v("hub_module_url", hub_module_url, "A TF Hub encoder (not supported: leave empty).");
  v("metric_type", metric_type,
    "What evaluations report besides cls_accuracy: accuracy, matthews_corrcoef (CoLA) or "
    "pearson_spearman_corr (STS-B).");
  v("class_names", class_names, "Garden: each class's name, which serving answers as label.");
  v("layerwise_lr_decay", layerwise_lr_decay,
    "ELECTRA's fine-tuning flag: each encoder layer learns at this factor of the rate of the "
    "layer above it (the embeddings lowest, the task's head at the rate itself); 1: one rate for "
    "all.");
}

void SentencePredictionConfig::validate() const {
  config::check_range("layerwise_lr_decay", layerwise_lr_decay,
                     config::Range::above(0.0).at_most(1.0));
  const auto& t = train_data;
  const auto& e = validation_data;
  check_validation_tokenizer_keys(t.vocab_file, t.tokenization, t.lower_case, e.vocab_file,
                                  e.tokenization, e.lower_case);
  if (e.text_fields != t.text_fields)
    config::refuse("validation_data.text_fields", "differs from train_data.text_fields");
  if (!hub_module_url.empty())
    config::refuse("hub_module_url", "TF Hub modules are not supported; use init_checkpoint");
  if (metric_type != "accuracy" && metric_type != "matthews_corrcoef" &&
      metric_type != "pearson_spearman_corr")
    config::refuse("metric_type", "'" + metric_type +
                                      "' is not one of accuracy, matthews_corrcoef, "
                                      "pearson_spearman_corr");
  const bool regression = model.num_classes == 1;
  if (metric_type == "matthews_corrcoef" && model.num_classes != 2)
    config::refuse("metric_type", "matthews_corrcoef needs model.num_classes 2");
  if (!class_names.empty() && static_cast<int64_t>(class_names.size()) != model.num_classes)
    config::refuse("class_names", std::to_string(class_names.size()) +
                                      " names for model.num_classes " +
                                      std::to_string(model.num_classes));
  const auto& encoder = model.encoder.bert;
  for (const auto* data : {&train_data, &validation_data}) {
    const std::string which = data == &train_data ? "train_data" : "validation_data";
    if ((data->label_type == "float") != regression)
      config::refuse(which + ".label_type", "'" + data->label_type + "' with model.num_classes " +
                                                std::to_string(model.num_classes) + " (use " +
                                                (regression ? "float" : "int") + ")");
    encoder.check_fits(which, data->seq_length);
  }
}

}  // namespace garden::nlp
