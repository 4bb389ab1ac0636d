// MarianMT (transformers' MarianMTModel, the OPUS-MT family) as Garden's
// Seq2SeqTransformer, in both directions:
//
//   model.shared (= encoder/decoder embed_tokens, lm_head)  -> embedding (rows rotated)
//   final_logits_bias [1, V]                                 -> final_logits_bias [V] (rotated)
//   model.encoder.layers.<i>.self_attn.{q,k,v}_proj          ->
//   encoder_layer_<i>.self_attention.query_key_value
//     .self_attn.out_proj, .self_attn_layer_norm             -> .self_attention.output,
//     .self_attention_layer_norm .fc1, .fc2, .final_layer_norm                          ->
//     .feed_forward.intermediate, .output, .output_layer_norm
//   model.decoder.layers.<i>: the same as decoder_layer_<i>, plus
//     .encoder_attn.q_proj, .{k,v}_proj, .out_proj           -> .encdec_attention.query,
//     .key_value, .output .encoder_attn_layer_norm                               ->
//     .encdec_attention_layer_norm
//
// The vocabulary is rotated so that <pad> is Garden's id 0
// (garden/nlp/data/marian_tokenizer.h); the sinusoids are MarianMT's
// (task.model.position_encoding: marian), computed, not stored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/modeling/transformer.h"

namespace garden::nlp {

// config.json's `key`, or MarianConfig's default when it is absent or null
// (a key without one throws naming it).
nlohmann::json marian_config_value(const HuggingFaceModel& model, const char* key);
// Garden's name of config.json's activation_function (swish for silu);
// one the Transformer does not compute throws naming it.
std::string marian_activation(const HuggingFaceModel& model);

// Compares config.json (model_type marian) with the model Garden would
// build. `marian_pad` and `marian_eos` are the tokenizer's (vocab.json's)
// <pad> and </s>. Throws naming the first key that differs, as
// "DIR/config.json: d_model 32 differs from task.model.embedding_width 512".
void check_marian_config(const HuggingFaceModel& model, const Seq2SeqTransformerOptions& options,
                         double embedding_dropout, int64_t marian_pad, int64_t marian_eos);

// The model's tensors under Seq2SeqTransformer's names, embedding rows and
// logit biases rotated by `marian_pad`. Throws naming a missing tensor, an
// lm_head that is not the shared embedding, a <pad> row that is not zero
// while task.model.zero_pad_embedding is true, a final_logits_bias
// that is not zero for a model without output_bias, and stored sinusoids that
// are not MarianMT's.
std::map<std::string, at::Tensor> marian_to_garden(const HuggingFaceModel& model,
                                                   const Seq2SeqTransformerOptions& options,
                                                   int64_t marian_pad);

// The other direction: MarianMTModel's tensors, the file's id of Garden's
// id g being (g + marian_pad) mod V, and its config.json. Refuses, one line
// each, what MarianMT does not compute: pre-layer-norm blocks, Model
// Garden's sinusoids, a layer-norm epsilon other than 1e-5, two dropout
// rates. Biases a Garden model lacks (use_bias false) are written as zeros;
// with zero_pad_embedding the <pad> row as zero (Garden zeroes it as an
// input, and MarianMT starts decoding with it; then only the <pad> logit,
// which generation_config.json forbids, differs).
std::vector<std::pair<std::string, at::Tensor>> garden_to_marian(Seq2SeqTransformerImpl& model,
                                                                 int64_t marian_pad);
nlohmann::json marian_config(const Seq2SeqTransformerOptions& options, double embedding_dropout,
                             int64_t marian_pad, int64_t marian_eos);
// generation_config.json: decoding starts with <pad>, ends with </s>, never
// emits <pad> (as OPUS-MT's), with `beam_size` beams.
// A no_repeat_ngram_size above 0 is written as generate's key of that name.
nlohmann::json marian_generation_config(int64_t marian_pad, int64_t marian_eos, int64_t beam_size,
                                        int64_t no_repeat_ngram_size = 0);

}  // namespace garden::nlp
