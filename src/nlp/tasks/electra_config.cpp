#include "garden/nlp/tasks/electra_config.h"

#include "garden/config/validation.h"

namespace garden::nlp {

using config::check_range;
using config::Range;

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
