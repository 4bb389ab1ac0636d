// The translation data's config: Model Garden's WMTDataConfig
// (official/nlp/data/wmt_dataloader.py) keys and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "garden/config/definitions.h"

namespace garden::nlp {

// Model Garden's WMTDataConfig. file_type adds, for parallel text:
//   tsv      one pair a line, source<TAB>target
//   aligned  input_path names the source-side files (train.en); each one's
//            target side is the same name with the tgt_lang extension
//            (train.de)
// and tfrecord / tfrecord_compressed hold tf.Examples whose string features
// src_lang and tgt_lang are the pair (Model Garden's format).
struct TranslationDataConfig : config::DataConfig {
  int64_t max_seq_length = 64;
  bool static_batch = false;
  std::string src_lang;
  std::string tgt_lang;
  // Garden: the length buckets (Model Garden's wmt_dataloader hard-codes 8
  // and 1.1). Boundaries start at bucket_min_boundary and grow by
  // max(x + 1, int(x * bucket_boundary_scale)).
  int64_t bucket_min_boundary = 8;
  double bucket_boundary_scale = 1.1;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

}  // namespace garden::nlp
