#include "garden/nlp/modeling/encoder_config.h"

#include "garden/config/validation.h"

namespace garden::nlp {

using config::check_range;
using config::Range;

namespace {
const char* const kActivations[] = {"gelu", "relu"};

void check_activation(const std::string& key, const std::string& value,
                      const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (value == a) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  config::refuse(key, "'" + value + "' is not one of " + list);
}
}  // namespace

void BertEncoderConfig::visit(config::Visitor& v) {
  v("vocab_size", vocab_size, "Word-piece vocabulary size.");
  v("hidden_size", hidden_size, "Width of the Transformer blocks.");
  v("num_layers", num_layers, "Transformer blocks.");
  v("num_attention_heads", num_attention_heads, "Attention heads per block.");
  v("hidden_activation", hidden_activation, "Feed-forward activation: gelu or relu.");
  v("intermediate_size", intermediate_size, "Width of the feed-forward layer.");
  v("dropout_rate", dropout_rate, "Dropout on the embeddings and each sublayer's output.");
  v("attention_dropout_rate", attention_dropout_rate, "Dropout on the attention probabilities.");
  v("max_position_embeddings", max_position_embeddings, "Longest sequence (position table).");
  v("type_vocab_size", type_vocab_size, "Segment (token type) ids.");
  v("initializer_range", initializer_range, "Stddev of the truncated-normal initializer.");
  v("embedding_size", embedding_size,
    "Width of the embeddings, projected to hidden_size; null: hidden_size.");
  v("output_range", output_range,
    "Model Garden: outputs for the first tokens only; not in Garden.");
  v("return_all_encoder_outputs", return_all_encoder_outputs,
    "Model Garden: every block's output; not in Garden.");
  v("return_attention_scores", return_attention_scores,
    "Model Garden: the attention scores; not in Garden.");
  v("norm_first", norm_first, "Pre-layer-norm blocks (with a final layer norm) when true.");
  v("alibi_slope", alibi_slope,
    "Garden's: linear attention biases (ALiBi, as MosaicBERT): head h (from 0) adds "
    "-alibi_slope * 2^-h * |i - j| to its scores; 0: none, as BERT.");
}

void BertEncoderConfig::validate() const {
  check_range("vocab_size", vocab_size, Range::at_least(1));
  check_range("hidden_size", hidden_size, Range::at_least(1));
  check_range("num_layers", num_layers, Range::at_least(1));
  check_range("num_attention_heads", num_attention_heads, Range::at_least(1));
  if (hidden_size % num_attention_heads)
    config::refuse("hidden_size", std::to_string(hidden_size) +
                                      " is not divisible by num_attention_heads " +
                                      std::to_string(num_attention_heads));
  check_activation("hidden_activation", hidden_activation,
                   {std::begin(kActivations), std::end(kActivations)});
  check_range("intermediate_size", intermediate_size, Range::at_least(1));
  check_range("dropout_rate", dropout_rate, Range::at_least(0).below(1));
  check_range("attention_dropout_rate", attention_dropout_rate, Range::at_least(0).below(1));
  check_range("max_position_embeddings", max_position_embeddings, Range::at_least(1));
  check_range("type_vocab_size", type_vocab_size, Range::at_least(1));
  check_range("initializer_range", initializer_range, Range::above(0));
  check_range("embedding_size", embedding_size, Range::at_least(1));
  check_range("alibi_slope", alibi_slope, Range::at_least(0));
  if (output_range)
    config::refuse("output_range", std::to_string(*output_range) +
                                       " is not implemented in Garden; only null is accepted");
  if (return_all_encoder_outputs)
    config::refuse("return_all_encoder_outputs",
                   "true is not implemented in Garden; only false is accepted");
  if (return_attention_scores)
    config::refuse("return_attention_scores",
                   "true is not implemented in Garden; only false is accepted");
}

void BertEncoderConfig::check_fits(const std::string& which, int64_t seq_length) const {
  if (seq_length > max_position_embeddings)
    config::refuse(which + ".seq_length",
                   std::to_string(seq_length) +
                       " is longer than model.encoder.bert.max_position_embeddings " +
                       std::to_string(max_position_embeddings));
}

BertEncoderOptions BertEncoderConfig::options() const {
  const auto& c = *this;
  BertEncoderOptions o;
  o.vocab_size = c.vocab_size;
  o.hidden_size = c.hidden_size;
  o.num_layers = c.num_layers;
  o.num_attention_heads = c.num_attention_heads;
  o.hidden_activation = c.hidden_activation;
  o.intermediate_size = c.intermediate_size;
  o.dropout_rate = c.dropout_rate;
  o.attention_dropout_rate = c.attention_dropout_rate;
  o.max_position_embeddings = c.max_position_embeddings;
  o.type_vocab_size = c.type_vocab_size;
  o.initializer_range = c.initializer_range;
  o.embedding_size = c.embedding_size.value_or(-1);
  o.norm_first = c.norm_first;
  o.alibi_slope = c.alibi_slope;
  return o;
}

void EncoderConfig::visit(config::Visitor& v) {
  v("type", type, "The encoder: bert.");
  v("bert", bert, "The BERT encoder.");
}

void EncoderConfig::validate() const {
  OneOfConfig::validate();
  if (type != "bert") config::refuse("type", "'" + type + "' is not one of: bert");
}

void ClsHeadConfig::visit(config::Visitor& v) {
  v("inner_dim", inner_dim, "Width of the dense layer before the logits; 0: none.");
  v("num_classes", num_classes, "Classes (logits).");
  v("activation", activation, "Activation of the inner layer: tanh, gelu or relu.");
  v("dropout_rate", dropout_rate, "Dropout before the logits.");
  v("cls_token_idx", cls_token_idx, "Position of the token the head reads.");
  v("name", name, "The head's name: its logits are the model output of that name.");
}

void ClsHeadConfig::validate() const {
  check_range("inner_dim", inner_dim, Range::at_least(0));
  check_range("num_classes", num_classes, Range::at_least(1));
  check_activation("activation", activation, {"tanh", "gelu", "relu"});
  check_range("dropout_rate", dropout_rate, Range::at_least(0).below(1));
  check_range("cls_token_idx", cls_token_idx, Range::at_least(0));
  if (name.empty()) config::refuse("name", "is empty; each head needs a name");
}

}  // namespace garden::nlp
