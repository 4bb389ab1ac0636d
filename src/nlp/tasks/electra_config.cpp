#include "garden/nlp/tasks/electra_config.h"

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

void ElectraPretrainerConfig::visit(config::Visitor& v) {
  v("num_masked_tokens", num_masked_tokens,
    "Most masked-LM predictions a sequence may hold (the data's max_predictions_per_seq).");
  v("sequence_length", sequence_length,
    "Longest sequence the model takes (the data's seq_length may be shorter).");
  v("num_classes", num_classes, "Classes of the generator's sentence head (next sentence).");
  v("discriminator_loss_weight", discriminator_loss_weight,
    "Weight of the replaced-token-detection loss.");
  v("tie_embeddings", tie_embeddings, "The generator uses the discriminator's word embeddings.");
  v("disallow_correct", disallow_correct, "The generator never samples the original token.");
  v("generator_encoder", generator_encoder, "The generator's encoder.");
  v("discriminator_encoder", discriminator_encoder, "The discriminator's encoder.");
  v("cls_heads", cls_heads, "Classification heads on the discriminator's output.");
}

void ElectraPretrainerConfig::validate() const {
  check_range("num_masked_tokens", num_masked_tokens, Range::at_least(1));
  check_range("sequence_length", sequence_length, Range::at_least(2));
  check_range("num_classes", num_classes, Range::at_least(1));
  check_range("discriminator_loss_weight", discriminator_loss_weight, Range::at_least(0));
  const auto& gen = generator_encoder.bert;
  const auto& disc = discriminator_encoder.bert;
  if (gen.vocab_size != disc.vocab_size)
    config::refuse("generator_encoder.bert.vocab_size", std::to_string(gen.vocab_size) +
                                                            " differs from the discriminator's " +
                                                            std::to_string(disc.vocab_size));
  if (tie_embeddings && gen.embedding_size.value_or(gen.hidden_size) !=
                            disc.embedding_size.value_or(disc.hidden_size))
    config::refuse("tie_embeddings",
                   "needs the generator's and the discriminator's embedding widths equal (set "
                   "generator_encoder.bert.embedding_size)");
  for (const auto* encoder : {&gen, &disc})
    if (encoder->max_position_embeddings < sequence_length)
      config::refuse(encoder == &gen ? "generator_encoder.bert.max_position_embeddings"
                                     : "discriminator_encoder.bert.max_position_embeddings",
                     std::to_string(encoder->max_position_embeddings) +
                         " is shorter than sequence_length " + std::to_string(sequence_length));
  std::vector<std::string> names;
  for (std::size_t i = 0; i < cls_heads.size(); ++i) {
    const std::string key = "cls_heads[" + std::to_string(i) + "]";
    {
      config::detail::KeyPrefix prefix(config::key_path(key));
      cls_heads[i].validate();
    }
    if (cls_heads[i].cls_token_idx >= sequence_length)
      config::refuse(key + ".cls_token_idx",
                     std::to_string(cls_heads[i].cls_token_idx) + " is not below sequence_length");
    for (const auto& n : names)
      if (n == cls_heads[i].name) config::refuse(key + ".name", "'" + n + "' is used twice");
    names.push_back(cls_heads[i].name);
  }
}

ElectraPretrainerOptions ElectraPretrainerConfig::options() const {
  const auto& c = *this;
  ElectraPretrainerOptions o;
  o.generator = c.generator_encoder.bert.options();
  o.discriminator = c.discriminator_encoder.bert.options();
  o.num_classes = c.num_classes;
  o.num_token_predictions = c.num_masked_tokens;
  o.sequence_length = c.sequence_length;
  o.tie_embeddings = c.tie_embeddings;
  o.disallow_correct = c.disallow_correct;
  for (const auto& head : c.cls_heads) {
    ClassificationHeadOptions h;
    h.input_width = c.discriminator_encoder.bert.hidden_size;
    h.inner_dim = head.inner_dim;
    h.num_classes = head.num_classes;
    h.activation = head.activation;
    h.dropout_rate = head.dropout_rate;
    h.cls_token_idx = head.cls_token_idx;
    h.initializer_range = c.discriminator_encoder.bert.initializer_range;
    h.name = head.name;
    o.cls_heads.push_back(h);
  }
  return o;
}

ElectraPretrainConfig::ElectraPretrainConfig() {
  ClsHeadConfig next_sentence;
  next_sentence.inner_dim = 768;
  next_sentence.num_classes = 2;
  next_sentence.dropout_rate = 0.1;
  next_sentence.name = "next_sentence";
  model.cls_heads.push_back(next_sentence);
}

void ElectraPretrainConfig::visit_task_fields(config::Visitor&) {}

void ElectraPretrainConfig::validate() const {
  // Model Garden passes sequence_length and num_masked_tokens to the model,
  // which never reads them; here they bound what the data may hold.
  for (const auto* data : {&train_data, &validation_data}) {
    const std::string which = data == &train_data ? "train_data" : "validation_data";
    if (data->seq_length > model.sequence_length)
      config::refuse(which + ".seq_length", std::to_string(data->seq_length) +
                                                " is longer than model.sequence_length " +
                                                std::to_string(model.sequence_length));
    if (data->max_predictions_per_seq > model.num_masked_tokens)
      config::refuse(which + ".max_predictions_per_seq",
                     std::to_string(data->max_predictions_per_seq) +
                         " is more than model.num_masked_tokens " +
                         std::to_string(model.num_masked_tokens));
  }
}

}  // namespace garden::nlp
