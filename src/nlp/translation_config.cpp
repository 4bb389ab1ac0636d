#include "garden/nlp/translation_config.h"

namespace garden::nlp {

void EncDecoderConfig::visit(config::Visitor& v) {
  v("num_layers", num_layers, "Transformer blocks in the stack.");
  v("num_attention_heads", num_attention_heads, "Attention heads per block.");
  v("intermediate_size", intermediate_size, "Width of the feed-forward layer.");
  v("activation", activation, "Feed-forward activation: relu or gelu.");
  v("dropout_rate", dropout_rate, "Dropout on each sublayer's output.");
  v("attention_dropout_rate", attention_dropout_rate, "Dropout on the attention probabilities.");
  v("intermediate_dropout", intermediate_dropout, "Dropout after the feed-forward activation.");
  v("use_bias", use_bias, "Biases in the attention and feed-forward projections.");
  v("norm_first", norm_first, "Pre-layer-norm blocks (with a final layer norm) when true.");
  v("norm_epsilon", norm_epsilon, "Layer-norm epsilon.");
}

void EncDecoderConfig::validate() const {
  if (num_layers < 1) throw config::ConfigError("num_layers must be >= 1");
  if (num_attention_heads < 1) throw config::ConfigError("num_attention_heads must be >= 1");
  if (intermediate_size < 1) throw config::ConfigError("intermediate_size must be >= 1");
  if (activation != "relu" && activation != "gelu")
    throw config::ConfigError("activation '" + activation + "' is not one of relu, gelu");
  for (double rate : {dropout_rate, attention_dropout_rate, intermediate_dropout})
    if (!(rate >= 0 && rate < 1)) throw config::ConfigError("dropout rates must be in [0, 1)");
  if (!(norm_epsilon > 0)) throw config::ConfigError("norm_epsilon must be > 0");
}

void TranslationModelConfig::visit(config::Visitor& v) {
  v("encoder", encoder, "The encoder stack.");
  v("decoder", decoder, "The decoder stack.");
  v("embedding_width", embedding_width, "Width of the shared embedding and of the model.");
  v("dropout_rate", dropout_rate, "Dropout on the embeddings plus positions.");
  v("padded_decode", padded_decode,
    "Model Garden pads decoding to decode_max_length for TPUs; accepted, and results are the "
    "same either way.");
  v("decode_max_length", decode_max_length,
    "Longest output in tokens; null: the input length plus extra_decode_length.");
  v("extra_decode_length", extra_decode_length, "Tokens allowed beyond the input length.");
  v("beam_size", beam_size, "Beam width; 1 decodes greedily.");
  v("alpha", alpha, "Length penalty ((5 + length) / 6)^alpha of beam search.");
  v("label_smoothing", label_smoothing, "Label smoothing of the training loss.");
}

void TranslationModelConfig::validate() const {
  if (embedding_width < 2 || embedding_width % 2)
    throw config::ConfigError("embedding_width must be even and >= 2");
  for (const auto* stack : {&encoder, &decoder})
    if (embedding_width % stack->num_attention_heads)
      throw config::ConfigError("embedding_width " + std::to_string(embedding_width) +
                                " is not divisible by num_attention_heads " +
                                std::to_string(stack->num_attention_heads));
  // One block configuration for both stacks (the hand-written model shares
  // it); the depths may differ.
  const auto same = [&](auto a, auto b, const char* key) {
    if (a != b)
      throw config::ConfigError(std::string("encoder.") + key + " and decoder." + key +
                                " must be equal (only num_layers may differ)");
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
  if (!(dropout_rate >= 0 && dropout_rate < 1))
    throw config::ConfigError("dropout_rate must be in [0, 1)");
  if (decode_max_length && *decode_max_length < 1)
    throw config::ConfigError("decode_max_length must be >= 1 or null");
  if (extra_decode_length < 0) throw config::ConfigError("extra_decode_length must be >= 0");
  if (beam_size < 1) throw config::ConfigError("beam_size must be >= 1");
  if (!(alpha >= 0)) throw config::ConfigError("alpha must be >= 0");
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    throw config::ConfigError("label_smoothing must be in [0, 1)");
}

void TranslationDataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("max_seq_length", max_seq_length,
    "Training drops pairs with more tokens (EOS included) on either side; evaluation "
    "truncates them.");
  v("static_batch", static_batch,
    "Pad every batch to max_seq_length with global_batch_size // max_seq_length pairs, instead "
    "of token-budget length buckets.");
  v("src_lang", src_lang, "Source language: the tf.Example feature, or the aligned extension.");
  v("tgt_lang", tgt_lang, "Target language: the tf.Example feature, or the aligned extension.");
  v("bucket_min_boundary", bucket_min_boundary,
    "Length buckets start here (Garden; Model Garden's is 8).");
  v("bucket_boundary_scale", bucket_boundary_scale,
    "Each bucket boundary is max(x + 1, int(x * scale)) of the last (Garden; Model Garden's is "
    "1.1).");
}

void TranslationDataConfig::validate() const {
  // The file types are this task's own (tsv, aligned, tf.Example records).
  validate_reading();
  if (file_type == "aligned" && (src_lang.empty() || tgt_lang.empty()))
    throw config::ConfigError("file_type aligned needs src_lang and tgt_lang (the extensions)");
  if (file_type != "tsv" && file_type != "aligned" && file_type != "tfrecord" &&
      file_type != "tfrecord_compressed")
    throw config::ConfigError("file_type '" + file_type +
                              "' is not one of tsv, aligned, tfrecord, tfrecord_compressed");
  if ((file_type == "tfrecord" || file_type == "tfrecord_compressed") &&
      (src_lang.empty() || tgt_lang.empty()))
    throw config::ConfigError("tf.Example data needs src_lang and tgt_lang (the feature names)");
  if (max_seq_length < 2) throw config::ConfigError("max_seq_length must be >= 2");
  if (bucket_min_boundary < 1) throw config::ConfigError("bucket_min_boundary must be >= 1");
  if (!(bucket_boundary_scale >= 1))
    throw config::ConfigError("bucket_boundary_scale must be >= 1");
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
  if (sentencepiece_vocab_size < 8)
    throw config::ConfigError("sentencepiece_vocab_size must be >= 8");
}

}  // namespace garden::nlp
