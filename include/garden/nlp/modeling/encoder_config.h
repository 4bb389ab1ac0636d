// The configs of the BERT-family models' parts, as every task that builds
// one reads them: Model Garden's EncoderConfig / BertEncoderConfig
// (official/nlp/configs/encoders.py) and ClsHeadConfig (configs/bert.py),
// their keys and defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "garden/config/definitions.h"
#include "garden/nlp/modeling/bert_encoder.h"

namespace garden::nlp {

// Model Garden's BertEncoderConfig.
struct BertEncoderConfig : config::Config {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_layers = 12;
  int64_t num_attention_heads = 12;
  std::string hidden_activation = "gelu";
  int64_t intermediate_size = 3072;
  double dropout_rate = 0.1;
  double attention_dropout_rate = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  std::optional<int64_t> embedding_size;  // null: hidden_size
  // Model Garden's keys that Garden does not implement: refused unless at
  // their defaults.
  std::optional<int64_t> output_range;
  bool return_all_encoder_outputs = false;
  bool return_attention_scores = false;
  bool norm_first = false;
  double alibi_slope = 0.0;  // Garden's: linear attention biases (BertEncoderOptions)
  void visit(config::Visitor& v) override;
  void validate() const override;
  BertEncoderOptions options() const;
  // A fine-tuning task's sequences must fit the position table: refuses
  // "<which>.seq_length" (train_data, validation_data) naming both values.
  void check_fits(const std::string& which, int64_t seq_length) const;
};

// Model Garden's EncoderConfig, a one-of; Garden builds `bert`.
struct EncoderConfig : config::OneOfConfig {
  EncoderConfig() { type = "bert"; }
  BertEncoderConfig bert;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

// Model Garden's ClsHeadConfig.
struct ClsHeadConfig : config::Config {
  int64_t inner_dim = 0;
  int64_t num_classes = 2;
  std::string activation = "tanh";
  double dropout_rate = 0.0;
  int64_t cls_token_idx = 0;
  std::string name;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

}  // namespace garden::nlp
