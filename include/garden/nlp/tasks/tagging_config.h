// Model Garden's TaggingConfig (official/nlp/tasks/tagging.py) with its
// ModelConfig: its keys and defaults.
#pragma once

#include "garden/config/definitions.h"
#include "garden/config/validation.h"
#include "garden/nlp/data/tagging_data.h"
#include "garden/nlp/modeling/bert_classifier.h"
#include "garden/nlp/modeling/encoder_config.h"

namespace garden::nlp {

struct TaggingModelConfig : config::Config {
  EncoderConfig encoder;
  double head_dropout = 0.1;
  double head_initializer_range = 0.02;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct TaggingConfig : config::TaskConfigWith<TaggingModelConfig, TaggingDataConfig> {
  // init_checkpoint_modules starts as [encoder], as for sentence prediction.
  TaggingConfig();
  std::string hub_module_url;
  // ELECTRA's layerwise_lr_decay (nlp::layerwise_learning_rate_scales).
  double layerwise_lr_decay = 1.0;
  std::string learning_rate_scales_setting() const override {
    return layerwise_lr_decay == 1.0 ? ""
                                     : "task.layerwise_lr_decay=" + config::number_text(layerwise_lr_decay);
  }
  // The label of each id, in order: BIO tags for entities. Unset: the
  // label_list of the meta data beside train_data's records.
  config::NameList class_names;
  // Garden: how evaluation finds entities, as seqeval's mode: default
  // (conlleval's chunks) or strict (IOB2: an entity starts at B-).
  std::string seqeval_mode = "default";
  void validate() const override;
  // class_names from the tagging meta data in the folder of
  // train_data.input_path (validation_data's when that is empty): taken when
  // unset, compared when set; unset with no meta data found is an error.
  void resolve_from_files() override;
  BertTokenClassifierOptions model_options() const;

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

}  // namespace garden::nlp
