// Model Garden's BertPretrainDataConfig and BertPretrainDataLoader
// (official/nlp/data/pretrain_dataloader.py): BERT pretraining tf.Examples
// read into batches.
#pragma once

#include <cstdint>

#include "garden/base/dataset.h"
#include "garden/base/types.h"
#include "garden/config/definitions.h"

namespace garden::nlp {

struct BertPretrainDataConfig : config::DataConfig {
  BertPretrainDataConfig() { global_batch_size = 512; }
  int64_t seq_length = 512;
  int64_t max_predictions_per_seq = 76;
  bool use_next_sentence_label = true;
  bool use_position_id = false;
  // false: the records name the ids input_ids and segment_ids (BERT's
  // create_pretraining_data); true: input_word_ids and input_type_ids.
  bool use_v2_feature_names = false;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

// The batches of `params` (input_path "dummy": endless all-zero batches, as
// Model Garden's ELECTRA and BERT tasks give). Every batch holds, whatever
// the feature names in the records:
//   input_word_ids, input_mask, input_type_ids   [B, seq_length] int64
//   masked_lm_positions, masked_lm_ids           [B, max_predictions_per_seq] int64
//   masked_lm_weights                            [B, max_predictions_per_seq] float
//   next_sentence_labels [B] int64               when use_next_sentence_label
//   position_ids [B, seq_length] int64           when use_position_id
// A record missing a feature or with a feature of another length, a
// masked_lm_position outside the sequence, or (when `bounds` gives them) a
// token id outside the model's vocabulary or a type id outside its type
// vocabulary is one garden::Error naming the file, the record and the
// feature.
struct PretrainIdBounds {
  int64_t vocab_size = 0;       // 0: ids unchecked
  int64_t type_vocab_size = 0;  // 0: type ids unchecked
};
DatasetPtr build_bert_pretrain_inputs(const BertPretrainDataConfig& params,
                                      const InputContext& input_context = {},
                                      const PretrainIdBounds& bounds = {});

}  // namespace garden::nlp
