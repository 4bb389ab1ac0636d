// The translation task's config: Model Garden's translation TaskConfig
// (official/nlp/tasks/translation.py) with its ModelConfig, EncDecoder and
// WMTDataConfig keys and defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "garden/config/definitions.h"
#include "garden/nlp/data/translation_data_config.h"

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
  // transformers' generate option: no output repeats an n-gram this long;
  // 0 (its default): off.
  int64_t no_repeat_ngram_size = 0;
  double label_smoothing = 0.1;
  // Garden's: the sinusoids added to the embeddings (model_garden, or marian
  // for MarianMT checkpoints), a bias on the tied output projection
  // (MarianMT's final_logits_bias), and whether the padding id's embedding
  // is zeroed (Model Garden) or read (MarianMT).
  std::string position_encoding = "model_garden";
  bool output_bias = false;
  bool zero_pad_embedding = true;
  // Garden's: model_garden, or transformers (generate's rules, alpha as its
  // length_penalty) as MarianMT users decode.
  std::string beam_search = "model_garden";
  void visit(config::Visitor& v) override;
  void validate() const override;
  std::vector<config::IgnoredKey> ignored_keys() const override;
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

}  // namespace garden::nlp
