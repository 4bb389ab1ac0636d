#include "garden/nlp/data/bert_pretrain_data.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/config/validation.h"
#include "garden/data/example.h"
#include "garden/data/parse_spec.h"
#include "garden/data/pipeline.h"

namespace garden::nlp {

void BertPretrainDataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("seq_length", seq_length, "Tokens per sequence: the length of input_ids/input_word_ids.");
  v("max_predictions_per_seq", max_predictions_per_seq,
    "Masked positions per sequence: the length of the masked_lm_* features.");
  v("use_next_sentence_label", use_next_sentence_label,
    "Read next_sentence_labels (one int64 per record) into the batches.");
  v("use_position_id", use_position_id, "Read position_ids (seq_length int64) into the batches.");
  v("use_v2_feature_names", use_v2_feature_names,
    "The records name the ids input_word_ids/input_type_ids instead of input_ids/segment_ids.");
}

void BertPretrainDataConfig::validate() const {
  using config::check_range;
  using config::Range;
  validate_reading();
  if (file_type != "tfrecord" && file_type != "tfrecord_compressed")
    config::refuse("file_type", "'" + file_type + "' is not one of tfrecord, tfrecord_compressed");
  check_range("seq_length", seq_length, Range::at_least(2));
  check_range("max_predictions_per_seq", max_predictions_per_seq,
              Range::at_least(1).at_most(static_cast<double>(seq_length)));
}

namespace {

// What a record holds, by its name in the record, and the name the batch
// gives it (the v2 names, whatever the records use).
struct PretrainFeature {
  std::string record_name;
  std::string batch_name;
};

std::vector<PretrainFeature> id_features(const BertPretrainDataConfig& params) {
  if (params.use_v2_feature_names)
    return {{"input_word_ids", "input_word_ids"}, {"input_type_ids", "input_type_ids"}};
  return {{"input_ids", "input_word_ids"}, {"segment_ids", "input_type_ids"}};
}

// pretrain_dataloader's _name_to_features, keyed by the record's names.
data::ParseSpec pretrain_spec(const BertPretrainDataConfig& params) {
  using data::DType;
  using data::FixedLenFeature;
  const auto ints = [](int64_t n) { return FixedLenFeature{{n}, DType::kInt64, std::nullopt}; };
  const int64_t seq = params.seq_length;
  const int64_t predictions = params.max_predictions_per_seq;
  data::ParseSpec spec;
  for (const auto& f : id_features(params)) spec[f.record_name] = ints(seq);
  spec["input_mask"] = ints(seq);
  spec["masked_lm_positions"] = ints(predictions);
  spec["masked_lm_ids"] = ints(predictions);
  spec["masked_lm_weights"] = FixedLenFeature{{predictions}, DType::kFloat, std::nullopt};
  if (params.use_next_sentence_label) spec["next_sentence_labels"] = ints(1);
  if (params.use_position_id) spec["position_ids"] = ints(seq);
  return spec;
}

// Model Garden's dummy_data (electra_task.build_inputs and
// masked_lm.build_inputs for input_path "dummy"): zeros of the real shapes,
// for ever. Its only position is how many batches it gave.
class DummyPretrainData : public Dataset {
 public:
  DummyPretrainData(const BertPretrainDataConfig& params, int64_t batch_size)
      : params_(params), batch_size_(batch_size) {}

  std::optional<Batch> next() override {
    ++batches_;
    // Fresh tensors each time: a consumer that edits a batch in place (say,
    // masking tokens) must not change the next one.
    const auto ids = [&](int64_t n) { return torch::zeros({batch_size_, n}, torch::kLong); };
    Batch batch{
        {"input_word_ids", ids(params_.seq_length)},
        {"input_mask", ids(params_.seq_length)},
        {"input_type_ids", ids(params_.seq_length)},
        {"masked_lm_positions", ids(params_.max_predictions_per_seq)},
        {"masked_lm_ids", ids(params_.max_predictions_per_seq)},
        {"masked_lm_weights",
         torch::zeros({batch_size_, params_.max_predictions_per_seq}, torch::kFloat)},
    };
    if (params_.use_next_sentence_label)
      batch["next_sentence_labels"] = torch::zeros({batch_size_}, torch::kLong);
    if (params_.use_position_id) batch["position_ids"] = ids(params_.seq_length);
    return batch;
  }
  void reset() override { batches_ = 0; }
  nlohmann::json state() const override { return {{"dummy_batches", batches_}}; }
  void restore(const nlohmann::json& state) override {
    if (!state.is_object() || !state.contains("dummy_batches") ||
        !state["dummy_batches"].is_number_integer())
      throw Error("the input state to restore is not that of input_path dummy: " + state.dump());
    batches_ = state["dummy_batches"].get<int64_t>();
  }

 private:
  BertPretrainDataConfig params_;
  int64_t batch_size_;
  int64_t batches_ = 0;
};

// The first value of `values` (a parsed int64 feature) outside [0, bound),
// as one error naming where it is and what bounds it.
void check_ids(const at::Tensor& values, int64_t bound, const std::string& feature,
               const std::string& what, const data::RecordLocation& where) {
  const at::Tensor flat = values.contiguous();
  const int64_t* v = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (v[i] >= 0 && v[i] < bound) continue;
    throw data::DataError("TFRecord file '" + where.file + "', record " +
                          std::to_string(where.index) + ": feature '" + feature + "' holds " +
                          std::to_string(v[i]) + " at index " + std::to_string(i) + ", outside " +
                          what + " of " + std::to_string(bound));
  }
}

}  // namespace

DatasetPtr build_bert_pretrain_inputs(const BertPretrainDataConfig& params,
                                      const InputContext& input_context,
                                      const PretrainIdBounds& bounds) {
  if (params.input_path == "dummy")
    return std::make_shared<DummyPretrainData>(
        params, input_context.per_replica_batch_size(params.global_batch_size));
  // Checked here rather than in validate(): a config may leave a data set it
  // does not use (validation_data when only training) without a path.
  if (params.input_path.empty())
    config::refuse("input_path", "is empty; name the pretraining TFRecord files, or \"dummy\"");

  auto spec = std::make_shared<const data::ParseSpec>(pretrain_spec(params));
  const std::vector<PretrainFeature> ids = id_features(params);
  const bool next_sentence = params.use_next_sentence_label;
  const int64_t seq_length = params.seq_length;
  data::LocatedMapFn map_fn = [spec, ids, next_sentence, bounds, seq_length](
                                  const std::string& record, const data::RecordLocation& where) {
    data::Example example;
    try {
      example = data::parse_example(record);
    } catch (const data::DataError& e) {
      throw data::DataError("TFRecord file '" + where.file + "', record " +
                            std::to_string(where.index) + ": " + e.what());
    }
    // parse() copies each feature's values into one tensor (no per-value
    // tensor work); the pipeline stacks them once per batch.
    data::ParsedFeatures parsed = data::parse(example, *spec, where);
    Batch out = std::move(parsed.tensors);
    // ids[0] names the token ids, ids[1] the type ids, as the record does.
    check_ids(out.at("masked_lm_positions"), seq_length, "masked_lm_positions",
              "the sequence length (seq_length)", where);
    if (bounds.vocab_size > 0) {
      check_ids(out.at(ids[0].record_name), bounds.vocab_size, ids[0].record_name,
                "the model's vocabulary (vocab_size)", where);
      check_ids(out.at("masked_lm_ids"), bounds.vocab_size, "masked_lm_ids",
                "the model's vocabulary (vocab_size)", where);
    }
    if (bounds.type_vocab_size > 0)
      check_ids(out.at(ids[1].record_name), bounds.type_vocab_size, ids[1].record_name,
                "the model's type vocabulary (type_vocab_size)", where);
    for (const auto& f : ids) {
      if (f.record_name == f.batch_name) continue;
      auto node = out.extract(f.record_name);
      out[f.batch_name] = std::move(node.mapped());
    }
    // One label per record: [B] once batched, not [B, 1].
    if (next_sentence) out["next_sentence_labels"] = out["next_sentence_labels"].reshape({});
    return out;
  };
  return std::make_shared<data::InputPipeline>(params, std::move(map_fn), data::BatchingOptions{},
                                               input_context);
}

}  // namespace garden::nlp
