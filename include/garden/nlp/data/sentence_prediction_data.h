// Model Garden's SentencePredictionDataConfig and its loader
// (official/nlp/data/sentence_prediction_dataloader.py): the records
// create_finetuning_data writes, read into batches.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "garden/base/dataset.h"
#include "garden/config/definitions.h"
#include "garden/data/parse_spec.h"

namespace garden::nlp {

struct SentencePredictionDataConfig : config::DataConfig {
  SentencePredictionDataConfig() {
    global_batch_size = 32;
    is_training = true;
  }
  int64_t seq_length = 128;
  std::string label_type = "int";   // int (classes) or float (regression)
  bool include_example_id = false;  // refused when true: nothing reads it yet
  std::string label_field = "label_ids";
  // Model Garden's SentencePredictionTextDataConfig keys: the tokenizer of
  // raw text. Garden reads them to serve raw text (the file travels in the
  // export's assets); text_fields names the serving inputs (one, or two for
  // a pair).
  std::string vocab_file;
  std::string tokenization = "WordPiece";
  bool lower_case = true;
  config::NameList text_fields{{"sentence"}};
  void visit(config::Visitor& v) override;
  void validate() const override;
};

// Serving reads train_data's tokenizer keys (vocab_file, tokenization,
// lower_case); validation_data's copy may only repeat them (vocab_file may
// stay empty). Refuses a difference naming validation_data's key.
void check_validation_tokenizer_keys(const std::string& train_vocab_file,
                                     const std::string& train_tokenization, bool train_lower_case,
                                     const std::string& vocab_file, const std::string& tokenization,
                                     bool lower_case);

// Every batch holds input_word_ids, input_mask, input_type_ids
// [B, seq_length] int64 (from the records' input_ids, input_mask,
// segment_ids), label_ids [B] (int64, or float for label_type float, read
// from label_field) and example_id [B] int64 when include_example_id. A
// record without a feature, with one of another length, or with an id
// outside [0, vocab_size) (when vocab_size > 0) is one garden::Error naming
// the file, the record and the feature.
// The first id of `ids` (int64) outside [0, vocab_size), as one
// garden::DataError "WHERE: feature 'input_ids' holds ..."; nothing when
// vocab_size is 0. For the fine-tuning loaders.
void check_input_ids(const at::Tensor& ids, int64_t vocab_size, const std::string& where);

// A fine-tuning loader's record: parsed by `spec`, a bad one one
// data::DataError starting with `at` ("TFRecord file 'F', record N", which
// record_place gives).
std::string record_place(const data::RecordLocation& where);
Batch parse_record(const std::string& record, const data::RecordLocation& where,
                   const data::ParseSpec& spec, const std::string& at);

DatasetPtr build_sentence_prediction_inputs(const SentencePredictionDataConfig& params,
                                            const InputContext& input_context = {},
                                            int64_t vocab_size = 0);

}  // namespace garden::nlp
