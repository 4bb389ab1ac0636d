#include "garden/nlp/tasks/translation_config.h"

#include "garden/config/validation.h"

namespace garden::nlp {

void EncDecoderConfig::visit(config::Visitor& v) {
  v("num_layers", num_layers, "Transformer blocks in the stack.");
  v("num_attention_heads", num_attention_heads, "Attention heads per block.");
  v("intermediate_size", intermediate_size, "Width of the feed-forward layer.");
  v("activation", activation, "Feed-forward activation: relu, gelu or swish.");
  v("dropout_rate", dropout_rate, "Dropout on each sublayer's output.");
  v("attention_dropout_rate", attention_dropout_rate, "Dropout on the attention probabilities.");
  v("intermediate_dropout", intermediate_dropout, "Dropout after the feed-forward activation.");
  v("use_bias", use_bias, "Biases in the attention and feed-forward projections.");
  v("norm_first", norm_first, "Pre-layer-norm blocks (with a final layer norm) when true.");
  v("norm_epsilon", norm_epsilon, "Layer-norm epsilon.");
}

void EncDecoderConfig::validate() const {
  using config::check_range;
  using config::Range;
  check_range("num_layers", num_layers, Range::at_least(1));
  check_range("num_attention_heads", num_attention_heads, Range::at_least(1));
  check_range("intermediate_size", intermediate_size, Range::at_least(1));
  if (activation != "relu" && activation != "gelu" && activation != "swish")
    config::refuse("activation", "'" + activation + "' is not one of relu, gelu, swish");
  check_range("dropout_rate", dropout_rate, Range::at_least(0).below(1));
  check_range("attention_dropout_rate", attention_dropout_rate, Range::at_least(0).below(1));
  check_range("intermediate_dropout", intermediate_dropout, Range::at_least(0).below(1));
  check_range("norm_epsilon", norm_epsilon, Range::above(0));
}

void TranslationModelConfig::visit(config::Visitor& v) {
  v("encoder", encoder, "The encoder stack.");
  v("decoder", decoder, "The decoder stack.");
  v("embedding_width", embedding_width, "Width of the shared embedding and of the model.");
  v("dropout_rate", dropout_rate,
    "Dropout on the embeddings plus positions (the blocks use encoder.dropout_rate).");
  v("padded_decode", padded_decode,
    "Model Garden pads decoding to decode_max_length for TPUs; accepted, and results are the "
    "same either way.");
  v("decode_max_length", decode_max_length,
    "Longest output in tokens; null: the input length plus extra_decode_length.");
  v("extra_decode_length", extra_decode_length, "Tokens allowed beyond the input length.");
  v("beam_size", beam_size, "Beam width; 1 decodes greedily.");
  v("alpha", alpha, "Length penalty ((5 + length) / 6)^alpha of beam search.");
  v("no_repeat_ngram_size", no_repeat_ngram_size,
    "Decoding never repeats an n-gram of this many tokens in an output (transformers' "
    "no_repeat_ngram_size); 0: off.");
  v("label_smoothing", label_smoothing, "Label smoothing of the training loss.");
  v("position_encoding", position_encoding,
    "Sinusoids added to the embeddings: model_garden, or marian (MarianMT's timescales).");
  v("output_bias", output_bias,
    "A bias on the tied output projection (MarianMT's final_logits_bias; not trained).");
  v("beam_search", beam_search,
    "Beam search rules: model_garden, or transformers (generate's; alpha is its length_penalty).");
  v("zero_pad_embedding", zero_pad_embedding,
    "Zero the padding id's embedding (Model Garden); false reads its row (MarianMT).");
}

void TranslationModelConfig::validate() const {
  using config::check_range;
  using config::Range;
  check_range("embedding_width", embedding_width, Range::at_least(2));
  if (embedding_width % 2)
    config::refuse("embedding_width", std::to_string(embedding_width) + " is odd; it must be even");
  for (const auto* stack : {&encoder, &decoder})
    if (embedding_width % stack->num_attention_heads)
      config::refuse("embedding_width", std::to_string(embedding_width) +
                                            " is not divisible by num_attention_heads " +
                                            std::to_string(stack->num_attention_heads));
  // One block configuration for both stacks (the hand-written model shares
  // it); the depths may differ.
  const auto same = [&](auto a, auto b, const char* key) {
    if (a != b)
      config::refuse(std::string("decoder.") + key,
                     "must equal encoder." + std::string(key) + " (only num_layers may differ)");
  };
  same(encoder.num_attention_heads, decoder.num_attention_heads, "num_attention_heads");
  same(encoder.intermediate_size, decoder.intermediate_size, "intermediate_size");
  same(encoder.activation, decoder.activation, "activation");
  same(encoder.dropout_rate, decoder.dropout_rate, "dropout_rate");
  same(encoder.attention_dropout_rate, decoder.attention_dropout_rate, "attention_dropout_rate");
  same(encoder.intermediate_dropout, decoder.intermediate_dropout, "intermediate_dropout");
  same(encoder.use_bias, decoder.use_bias, "use_bias");
  same(encoder.norm_first, decoder.norm_first, "norm_first");
  same(encoder.norm_epsilon, decoder.norm_epsilon, "norm_epsilon");
  check_range("dropout_rate", dropout_rate, Range::at_least(0).below(1));
  check_range("decode_max_length", decode_max_length, Range::at_least(1));
  check_range("extra_decode_length", extra_decode_length, Range::at_least(0));
  check_range("beam_size", beam_size, Range::at_least(1));
  check_range("alpha", alpha, Range::at_least(0));
  check_range("no_repeat_ngram_size", no_repeat_ngram_size, Range::at_least(0));
  check_range("label_smoothing", label_smoothing, Range::at_least(0).below(1));
  if (beam_search != "model_garden" && beam_search != "transformers")
    config::refuse("beam_search", "'" + beam_search + "' is not one of model_garden, transformers");
  if (position_encoding != "model_garden" && position_encoding != "marian")
    config::refuse("position_encoding",
                   "'" + position_encoding + "' is not one of model_garden, marian");
}

std::vector<config::IgnoredKey> TranslationModelConfig::ignored_keys() const {
  std::vector<config::IgnoredKey> out;
  config::note_ignored(out, "padded_decode", padded_decode, TranslationModelConfig().padded_decode,
                       "TPU padding; the translations are the same either way");
  return out;
}

void TranslationConfig::visit_task_fields(config::Visitor& v) {
  v("sentencepiece_model_path", sentencepiece_model_path,
    "SentencePiece model; empty: train one on train_data into model_dir/sentencepiece.model.");
  v("print_translations", print_translations, "Log every validation input, output and reference.");
  v("sentencepiece_vocab_size", sentencepiece_vocab_size,
    "Vocabulary size of the SentencePiece model trained when sentencepiece_model_path is "
    "empty.");
}

void TranslationConfig::validate() const {
  config::check_range("sentencepiece_vocab_size", sentencepiece_vocab_size,
                      config::Range::at_least(8));
}

}  // namespace garden::nlp
