// Model Garden's SentencePredictionConfig (official/nlp/tasks/
// sentence_prediction.py) with its ModelConfig: its keys and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "garden/config/definitions.h"
#include "garden/config/validation.h"
#include "garden/nlp/data/sentence_prediction_data.h"
#include "garden/nlp/modeling/bert_classifier.h"
#include "garden/nlp/modeling/encoder_config.h"

namespace garden::nlp {

struct SentencePredictionModelConfig : config::Config {
  int64_t num_classes = 0;  // 1: regression
  bool use_encoder_pooler = false;
  // Garden's: "cls" (Model Garden's head) or "mean" (BertClassifierOptions).
  std::string pooling = "cls";
  EncoderConfig encoder;
  void visit(config::Visitor& v) override;
  void validate() const override;
  BertClassifierOptions options() const;
};

struct SentencePredictionConfig
    : config::TaskConfigWith<SentencePredictionModelConfig, SentencePredictionDataConfig> {
  // init_checkpoint_modules starts as [encoder]: Model Garden restores the
  // encoder alone (a pretrainer's through its checkpoint_items).
  SentencePredictionConfig();
  bool init_cls_pooler = false;
  std::string hub_module_url;
  // ELECTRA's layerwise_lr_decay (nlp::layerwise_learning_rate_scales).
  double layerwise_lr_decay = 1.0;
  std::string learning_rate_scales_setting() const override {
    return layerwise_lr_decay == 1.0 ? ""
                                     : "task.layerwise_lr_decay=" + config::number_text(layerwise_lr_decay);
  }
  std::string metric_type = "accuracy";  // accuracy, matthews_corrcoef, pearson_spearman_corr
  // Garden: the name of each class, which serving answers as `label`.
  config::NameList class_names;
  void validate() const override;

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

}  // namespace garden::nlp
