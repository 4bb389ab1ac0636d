// Model Garden's translation task (official/nlp/tasks/translation.py) with its
// data (official/nlp/data/wmt_dataloader.py) and model
// (official/nlp/modeling/models/seq2seq_transformer.py): a Transformer trained
// on sentence pairs tokenized by one joint SentencePiece model, validated by
// teacher-forced loss plus beam-search decoding scored with BLEU.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "garden/core/config/definitions.h"
#include "garden/core/task.h"
#include "garden/nlp/transformer.h"

namespace garden::data {
class SentencePieceTokenizer;
}

namespace garden::nlp {

// Model Garden's EncDecoder: one stack of the Transformer.
struct EncDecoderConfig : config::Config {
  int64_t num_layers = 6;
  int64_t num_attention_heads = 8;
  int64_t intermediate_size = 2048;
  std::string activation = "relu";
  double dropout_rate = 0.1;
  double attention_dropout_rate = 0.1;
  double intermediate_dropout = 0.1;
  bool use_bias = false;
  bool norm_first = true;
  double norm_epsilon = 1e-6;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

// Model Garden's translation ModelConfig. The vocabulary size is not a key:
// it is the tokenizer's.
struct TranslationModelConfig : config::Config {
  EncDecoderConfig encoder;
  EncDecoderConfig decoder;
  int64_t embedding_width = 512;
  double dropout_rate = 0.1;
  bool padded_decode = false;
  std::optional<int64_t> decode_max_length;
  int64_t extra_decode_length = 0;
  int64_t beam_size = 4;
  double alpha = 0.6;
  double label_smoothing = 0.1;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

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

struct TranslationConfig : config::TaskConfigWith<TranslationModelConfig, TranslationDataConfig> {
  // A SentencePiece model; empty: train one on train_data into
  // model_dir/sentencepiece.model (or reuse the one already there).
  std::string sentencepiece_model_path;
  std::optional<bool> print_translations;
  // Garden: the vocabulary size of the SentencePiece model trained when
  // sentencepiece_model_path is empty.
  int64_t sentencepiece_vocab_size = 8000;
  void validate() const override;

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

// One sentence pair and where it came from: unique_id is
// (file index << 32) | record index, over the sorted files of input_path.
struct SentencePair {
  int64_t unique_id = 0;
  std::string source;
  std::string target;
};

// Every pair of `data`, in file order (no shuffle, no length filter).
std::vector<SentencePair> read_sentence_pairs(const TranslationDataConfig& data);

// Model Garden's unique id of record `index` of file `file_index`.
inline int64_t pair_unique_id(int64_t file_index, int64_t index) {
  return (file_index << 32) | index;
}

// How to decode; built from TranslationModelConfig by decode_options().
struct DecodeOptions {
  int64_t beam_size = 4;  // 1: greedy
  double alpha = 0.6;
  // The longest output in tokens: decode_max_length when set, otherwise the
  // input's padded length + extra_decode_length.
  std::optional<int64_t> decode_max_length;
  int64_t extra_decode_length = 0;
};

// Translates a batch of source ids [B, S] (pad 0, each row ending in EOS);
// returns each row's best output ids without the EOS.
std::vector<std::vector<int64_t>> translate_ids(Seq2SeqTransformerImpl& model,
                                                const at::Tensor& source_ids, int64_t eos_id,
                                                const DecodeOptions& options);

class TranslationTask : public Task {
 public:
  // The file name, in model_dir, of the SentencePiece model the task trains.
  static constexpr const char* kSentencePieceFile = "sentencepiece.model";

  TranslationTask(std::shared_ptr<const TranslationConfig> params, std::string logging_dir = "");
  ~TranslationTask() override;

  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  // features: "inputs" [B, S], "targets" [B, T]; returns "logits" [B, T, V]
  // with the decoder input being the targets shifted right (0 first).
  Batch call_model(Model& model, const Batch& features, bool training) override;
  // Label-smoothed cross-entropy averaged over the non-pad target tokens.
  at::Tensor build_losses(const Batch& labels, const Batch& model_outputs,
                          const at::Tensor& aux_losses = {}) override;
  // The teacher-forced loss plus the decoded outputs ("translations": ids)
  // of each example ("unique_ids").
  Logs validation_step(const Batch& inputs, Model& model, MetricList& metrics) override;
  // Adds "outputs": the decoded ids [B, L] (0-padded, without EOS).
  Batch inference_step(const Batch& inputs, Model& model) override;
  void aggregate_logs(Logs& state, const Logs& step_logs) override;
  // bleu_score (Model Garden's, uncased) and sacrebleu_score (13a, cased)
  // against the references read from validation_data, plus a few examples
  // as text ("translations").
  Logs reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step) override;
  nlohmann::json checkpoint_metadata() const override;
  void restore_checkpoint_metadata(const nlohmann::json& metadata) override;
  // Sentences, not tokens.
  int64_t num_examples(const Batch& batch) const override;

  // The tokenizer: sentencepiece_model_path, or model_dir's trained one,
  // trained now when it is not there yet (unless training is off: then its
  // absence is an error).
  const data::SentencePieceTokenizer& tokenizer();
  void set_tokenizer_training(bool allowed) { tokenizer_training_ = allowed; }
  std::string tokenizer_path() const;

  // Source text -> ids ending in EOS, at most `max_length` of them (the
  // last kept one is EOS). `truncated` tells whether tokens were cut.
  std::vector<int64_t> encode_source(const std::string& text, int64_t max_length,
                                     bool* truncated = nullptr);
  DecodeOptions decode_options() const;
  const TranslationConfig& config() const { return config_; }

 private:
  void train_tokenizer(const std::string& model_path);

  const TranslationConfig& config_;
  std::unique_ptr<data::SentencePieceTokenizer> tokenizer_;
  bool tokenizer_training_ = true;
};

void register_translation();

}  // namespace garden::nlp
