// Translating source ids with a trained Seq2SeqTransformer: Model Garden's
// beam search (or greedy decoding) over the model's KV-cached decoder.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "garden/nlp/modeling/beam_search.h"
#include "garden/nlp/modeling/transformer.h"

namespace garden::nlp {

// How to decode; built from TranslationModelConfig by decode_options().
struct DecodeOptions {
  int64_t beam_size = 4;  // 1: greedy
  double alpha = 0.6;
  // The longest output of a sentence in tokens (EOS included):
  // decode_max_length when set, otherwise the sentence's own length (its
  // non-pad tokens, EOS included) + extra_decode_length, whatever the batch's
  // padded length (Model Garden uses that one), so a sentence translates the
  // same in any batch.
  std::optional<int64_t> decode_max_length;
  int64_t extra_decode_length = 0;
  // Model Garden's beam search, or transformers' (alpha its length_penalty).
  BeamSearchRules rules = BeamSearchRules::kModelGarden;
  // transformers' no_repeat_ngram_size: no output repeats an n-gram of this
  // many tokens (no_repeat_ngram_ban); 0: off.
  int64_t no_repeat_ngram_size = 0;
};

// The tokens that may not follow `tokens` (length of them) without repeating
// an n-gram of `ngram_size` tokens already in it: for every earlier n-gram
// whose first ngram_size - 1 tokens equal the last ngram_size - 1 of
// `tokens`, its last token (each n-gram's once, in order; with ngram_size 1
// every token of `tokens`). Empty when ngram_size is 0 or `tokens` is
// shorter than ngram_size - 1.
std::vector<int64_t> repeated_ngram_tokens(const int64_t* tokens, int64_t length,
                                           int64_t ngram_size);

// transformers' no_repeat_ngram_size (fairseq's --no-repeat-ngram-size) as
// the searches' BannedTokensFn (beam_search.h): in each row the tokens
// repeated_ngram_tokens names for the row's generated tokens (its ids after
// the initial id). Empty (no ban) for ngram_size 0.
BannedTokensFn no_repeat_ngram_ban(int64_t ngram_size);

// Translates a batch of source ids [B, S] (pad 0, each row ending in EOS);
// returns each row's best output ids without the EOS.
std::vector<std::vector<int64_t>> translate_ids(Seq2SeqTransformerImpl& model,
                                                const at::Tensor& source_ids, int64_t eos_id,
                                                const DecodeOptions& options);

}  // namespace garden::nlp
