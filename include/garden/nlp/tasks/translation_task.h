// Model Garden's translation task (official/nlp/tasks/translation.py) with its
// data (official/nlp/data/wmt_dataloader.py) and model
// (official/nlp/modeling/models/seq2seq_transformer.py): a Transformer trained
// on sentence pairs tokenized by one joint SentencePiece model, validated by
// teacher-forced loss plus beam-search decoding scored with BLEU.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "garden/core/task.h"
#include "garden/nlp/data/sentence_pairs.h"
#include "garden/nlp/modeling/decoding.h"
#include "garden/nlp/tasks/translation_config.h"

namespace garden::data {
class Tokenizer;
}

namespace garden::nlp {

struct HuggingFaceExport;
class Seq2SeqTransformerImpl;

class TranslationTask : public Task {
 public:
  // garden export --format=huggingface: the model as MarianMTModel with its tokenizer files;
  // registered for the task's config beside register_task.
  static HuggingFaceExport to_huggingface(Task& task, Model& model);

  // The file name, in model_dir, of the SentencePiece model the task trains.
  static constexpr const char* kSentencePieceFile = "sentencepiece.model";

  TranslationTask(std::shared_ptr<const TranslationConfig> params, std::string logging_dir = "");
  ~TranslationTask() override;

  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  // task.init_checkpoint a MarianMT directory (garden/nlp/interop/marian.h):
  // its config.json checked against task.model, its weights loaded;
  // otherwise Task::initialize.
  void initialize(Model& model) override;
  // features: "inputs" [B, S], "targets" [B, T]; returns "logits" [B, T, V]
  // with the decoder input being the targets shifted right (0 first).
  Batch call_model(Model& model, const Batch& features, bool training) override;
  // Label-smoothed cross-entropy averaged over the non-pad target tokens
  // (their number is the loss's count).
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  // bleu_score and sacrebleu_score.
  std::vector<std::string> aggregated_log_names() const override;
  // The tokenizer: a resumed run keeps the one model_dir holds.
  std::vector<std::string> keys_fixed_by_training() const override {
    return {"task.sentencepiece_model_path", "task.sentencepiece_vocab_size"};
  }
  // The teacher-forced loss plus the decoded outputs ("translations": ids)
  // of each example ("unique_ids").
  Logs validation_step(const Batch& inputs, Model& model, MetricList& metrics) override;
  // Adds "outputs": the decoded ids [B, L] (0-padded, without EOS).
  Batch inference_step(const Batch& inputs, Model& model) override;
  // bleu_score (Model Garden's, uncased) and sacrebleu_score (13a, cased)
  // against the references read from validation_data, plus a few examples
  // as text ("translations").
  Logs reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step) override;
  nlohmann::json checkpoint_metadata() const override;
  void restore_checkpoint_metadata(const nlohmann::json& metadata) override;
  // Sentences, not tokens.
  int64_t num_examples(const Batch& batch) const override;

  // The tokenizer: sentencepiece_model_path (a SentencePiece model, or a
  // MarianMT directory: garden/nlp/data/marian_tokenizer.h), else the
  // MarianMT directory task.init_checkpoint names, else model_dir's trained
  // model, trained now when it is not there yet (unless training is off: then
  // its absence is an error).
  const data::Tokenizer& tokenizer();
  void set_tokenizer_training(bool allowed) { tokenizer_training_ = allowed; }
  std::string tokenizer_path() const;
  // The tokenizer from `path` from now on (a SentencePiece model, or a
  // MarianMT tokenizer's folder), never trained: an export's asset.
  void use_tokenizer(const std::string& path);

  // Source text -> ids ending in EOS, at most `max_length` of them (the
  // last kept one is EOS). `truncated` tells whether tokens were cut.
  std::vector<int64_t> encode_source(const std::string& text, int64_t max_length,
                                     bool* truncated = nullptr);
  DecodeOptions decode_options() const;
  const TranslationConfig& config() const { return config_; }
  // The model build_model makes, as its Seq2SeqTransformer; a garden::Error
  // for any other.
  static Seq2SeqTransformerImpl& as_transformer(Model& model);

 private:
  const TranslationConfig& config_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  bool tokenizer_training_ = true;
  std::string fixed_tokenizer_path_;  // set by use_tokenizer
};

}  // namespace garden::nlp
