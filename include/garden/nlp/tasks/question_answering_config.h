// Model Garden's QuestionAnsweringConfig (official/nlp/tasks/
// question_answering.py) with its ModelConfig: its keys and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "garden/config/definitions.h"
#include "garden/config/validation.h"
#include "garden/nlp/data/squad_data.h"
#include "garden/nlp/modeling/bert_classifier.h"
#include "garden/nlp/modeling/encoder_config.h"

namespace garden::nlp {

struct QuestionAnsweringModelConfig : config::Config {
  EncoderConfig encoder;
  void visit(config::Visitor& v) override;
};

struct QuestionAnsweringConfig
    : config::TaskConfigWith<QuestionAnsweringModelConfig, QADataConfig> {
  // init_checkpoint_modules starts as [encoder], as for sentence prediction.
  QuestionAnsweringConfig();
  std::string hub_module_url;
  // ELECTRA's layerwise_lr_decay (nlp::layerwise_learning_rate_scales).
  double layerwise_lr_decay = 1.0;
  std::string learning_rate_scales_setting() const override {
    return layerwise_lr_decay == 1.0
               ? ""
               : "task.layerwise_lr_decay=" + config::number_text(layerwise_lr_decay);
  }
  int64_t n_best_size = 20;
  int64_t max_answer_length = 30;
  double null_score_diff_threshold = 0.0;
  void validate() const override;
  // The SQuAD meta data create_finetuning_data wrote beside the training
  // records (task_type bert_squad) must agree on version_2_with_negative:
  // v2 records trained and evaluated as v1 would score unanswerable
  // questions as answerable, with no word.
  void resolve_from_files() override;
  BertSpanLabelerOptions model_options() const;

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

}  // namespace garden::nlp
