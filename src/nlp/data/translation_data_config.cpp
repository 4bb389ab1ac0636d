#include "garden/nlp/data/translation_data_config.h"

#include "garden/config/validation.h"

namespace garden::nlp {

void TranslationDataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("max_seq_length", max_seq_length,
    "Training drops pairs with more tokens (EOS included) on either side; evaluation "
    "truncates them.");
  v("static_batch", static_batch,
    "Pad every batch to max_seq_length with global_batch_size // max_seq_length pairs, instead "
    "of token-budget length buckets.");
  v("src_lang", src_lang, "Source language: the tf.Example feature, or the aligned extension.");
  v("tgt_lang", tgt_lang, "Target language: the tf.Example feature, or the aligned extension.");
  v("bucket_min_boundary", bucket_min_boundary,
    "Length buckets start here (Garden; Model Garden's is 8).");
  v("bucket_boundary_scale", bucket_boundary_scale,
    "Each bucket boundary is max(x + 1, int(x * scale)) of the last (Garden; Model Garden's is "
    "1.1).");
}

void TranslationDataConfig::validate() const {
  using config::check_range;
  using config::Range;
  // The file types are this task's own (tsv, aligned, tf.Example records).
  validate_reading();
  if (file_type != "tsv" && file_type != "aligned" && file_type != "tfrecord" &&
      file_type != "tfrecord_compressed")
    config::refuse("file_type",
                   "'" + file_type + "' is not one of tsv, aligned, tfrecord, tfrecord_compressed");
  if (file_type == "aligned" && (src_lang.empty() || tgt_lang.empty()))
    config::refuse(src_lang.empty() ? "src_lang" : "tgt_lang",
                   "is empty; file_type aligned needs src_lang and tgt_lang (the extensions)");
  if ((file_type == "tfrecord" || file_type == "tfrecord_compressed") &&
      (src_lang.empty() || tgt_lang.empty()))
    config::refuse(src_lang.empty() ? "src_lang" : "tgt_lang",
                   "is empty; tf.Example data needs src_lang and tgt_lang (the feature names)");
  // wmt_dataloader: static training batches are always full.
  if (static_batch && is_training.value_or(false) && !drop_remainder)
    config::refuse("drop_remainder",
                   "false has no effect with static_batch in training: every batch is full");
  check_range("max_seq_length", max_seq_length, Range::at_least(2));
  check_range("bucket_min_boundary", bucket_min_boundary, Range::at_least(1));
  check_range("bucket_boundary_scale", bucket_boundary_scale, Range::at_least(1));
}

}  // namespace garden::nlp
