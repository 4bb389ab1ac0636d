#include "garden/nlp/data/sentence_prediction_data.h"

#include <ATen/ATen.h>

#include <memory>
#include <utility>

#include "garden/base/error.h"
#include "garden/config/validation.h"
#include "garden/data/example.h"
#include "garden/data/parse_spec.h"
#include "garden/data/pipeline.h"

namespace garden::nlp {

void SentencePredictionDataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("seq_length", seq_length, "Tokens per sequence: the length of input_ids in the records.");
  v("label_type", label_type, "int (a class index) or float (a regression target).");
  v("include_example_id", include_example_id,
    "Read example_id (not implemented: nothing in Garden reads it yet; false only).");
  v("label_field", label_field, "The record's feature holding the label.");
  v("vocab_file", vocab_file,
    "The tokenizer the records were made with (vocab.txt, or a SentencePiece .model): serving "
    "takes raw text with it. Empty: serving takes token ids.");
  v("tokenization", tokenization, "WordPiece or SentencePiece: what vocab_file is.");
  v("lower_case", lower_case, "Lower-case (and strip accents) before tokenizing.");
  v("text_fields", text_fields, "The serving inputs holding raw text: one, or two for a pair.");
}

void SentencePredictionDataConfig::validate() const {
  using config::check_range;
  using config::Range;
  validate_reading();
  if (file_type != "tfrecord" && file_type != "tfrecord_compressed")
    config::refuse("file_type", "'" + file_type + "' is not one of tfrecord, tfrecord_compressed");
  check_range("seq_length", seq_length, Range::at_least(3));
  if (label_type != "int" && label_type != "float")
    config::refuse("label_type", "'" + label_type + "' is not one of int, float");
  if (label_field.empty()) config::refuse("label_field", "is empty");
  if (include_example_id)
    config::refuse("include_example_id",
                   "true is not implemented: nothing in Garden reads "
                   "example_id yet");
  if (tokenization != "WordPiece" && tokenization != "SentencePiece")
    config::refuse("tokenization", "'" + tokenization + "' is not one of WordPiece, SentencePiece");
  if (text_fields.empty() || text_fields.size() > 2)
    config::refuse("text_fields", "names " + std::to_string(text_fields.size()) +
                                      " fields; give one, or two for a pair");
}

void check_validation_tokenizer_keys(const std::string& train_vocab_file,
                                     const std::string& train_tokenization, bool train_lower_case,
                                     const std::string& vocab_file, const std::string& tokenization,
                                     bool lower_case) {
  if (vocab_file != train_vocab_file && !vocab_file.empty())
    config::refuse("validation_data.vocab_file",
                   "'" + vocab_file +
                       "' differs from train_data.vocab_file, which serving reads; leave it empty");
  if (tokenization != train_tokenization)
    config::refuse(
        "validation_data.tokenization",
        "'" + tokenization + "' differs from train_data.tokenization '" + train_tokenization + "'");
  if (lower_case != train_lower_case)
    config::refuse("validation_data.lower_case", "differs from train_data.lower_case");
}

void check_input_ids(const at::Tensor& ids, int64_t vocab_size, const std::string& where) {
  if (vocab_size <= 0) return;
  const int64_t* v = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (v[i] < 0 || v[i] >= vocab_size)
      throw data::DataError(where + ": feature 'input_ids' holds " + std::to_string(v[i]) +
                            " at index " + std::to_string(i) +
                            ", outside the model's vocabulary (vocab_size) of " +
                            std::to_string(vocab_size));
}

std::string record_place(const data::RecordLocation& where) {
  return "TFRecord file '" + where.file + "', record " + std::to_string(where.index);
}

Batch parse_record(const std::string& record, const data::RecordLocation& where,
                   const data::ParseSpec& spec, const std::string& at) {
  data::Example example;
  try {
    example = data::parse_example(record);
  } catch (const data::DataError& e) {
    throw data::DataError(at + ": " + e.what());
  }
  return data::parse(example, spec, where).tensors;
}

DatasetPtr build_sentence_prediction_inputs(const SentencePredictionDataConfig& params,
                                            const InputContext& input_context, int64_t vocab_size) {
  if (params.input_path.empty())
    config::refuse("input_path", "is empty; name the TFRecord files create_finetuning_data wrote");
  using data::DType;
  using data::FixedLenFeature;
  const int64_t seq = params.seq_length;
  auto spec = std::make_shared<data::ParseSpec>();
  for (const char* name : {"input_ids", "input_mask", "segment_ids"})
    (*spec)[name] = FixedLenFeature{{seq}, DType::kInt64, std::nullopt};
  const bool float_label = params.label_type == "float";
  (*spec)[params.label_field] =
      FixedLenFeature{{1}, float_label ? DType::kFloat : DType::kInt64, std::nullopt};
  const std::string label_field = params.label_field;
  std::shared_ptr<const data::ParseSpec> frozen = spec;
  data::LocatedMapFn map_fn = [frozen, label_field, vocab_size](const std::string& record,
                                                                const data::RecordLocation& where) {
    const std::string at = record_place(where);
    Batch parsed = parse_record(record, where, *frozen, at);
    Batch out;
    out["input_word_ids"] = parsed.at("input_ids");
    out["input_mask"] = parsed.at("input_mask");
    out["input_type_ids"] = parsed.at("segment_ids");
    check_input_ids(out["input_word_ids"], vocab_size, at);
    out["label_ids"] = parsed.at(label_field).reshape({});
    return out;
  };
  return std::make_shared<data::InputPipeline>(params, std::move(map_fn), data::BatchingOptions{},
                                               input_context);
}

}  // namespace garden::nlp
