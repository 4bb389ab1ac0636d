// The ELECTRA pretraining task's config: Model Garden's ElectraPretrainConfig
// (official/nlp/tasks/electra_task.py) with ElectraPretrainerConfig
// (official/nlp/configs/electra.py): their keys and defaults. The encoder's
// and the heads' configs are garden/nlp/modeling/encoder_config.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/nlp/data/bert_pretrain_data.h"
#include "garden/nlp/modeling/electra_pretrainer.h"
#include "garden/nlp/modeling/encoder_config.h"

namespace garden::nlp {

// Model Garden's ElectraPretrainerConfig.
struct ElectraPretrainerConfig : config::Config {
  int64_t num_masked_tokens = 76;
  int64_t sequence_length = 512;
  int64_t num_classes = 2;
  double discriminator_loss_weight = 50.0;
  bool tie_embeddings = true;
  bool disallow_correct = false;
  EncoderConfig generator_encoder;
  EncoderConfig discriminator_encoder;
  std::vector<ClsHeadConfig> cls_heads;
  void visit(config::Visitor& v) override;
  void validate() const override;
  ElectraPretrainerOptions options() const;
};

// Model Garden's ElectraPretrainConfig: its default model carries one
// classification head, next_sentence (inner_dim 768, dropout 0.1).
struct ElectraPretrainConfig
    : config::TaskConfigWith<ElectraPretrainerConfig, BertPretrainDataConfig> {
  ElectraPretrainConfig();
  void validate() const override;

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

}  // namespace garden::nlp
