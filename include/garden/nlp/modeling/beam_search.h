// Sequence beam search with Model Garden's semantics
// (official/nlp/modeling/ops/beam_search.py: sequence_beam_search /
// SequenceBeamSearch, non-padded decode), plus plain greedy decoding.
//
// What follows Model Garden exactly:
//  * Two sets per example: `beam_size` alive sequences (no EOS yet), ranked by
//    raw log-probability, and `beam_size` finished sequences (ended by EOS),
//    ranked by log-probability / ((5 + length) / 6)^alpha, where length is the
//    number of generated tokens including the EOS (not the initial id).
//  * Each step grows the alive set to the best 2 * beam_size candidates, so at
//    least beam_size of them are still alive (each beam has only one EOS).
//  * At the start only beam 0 is live (the others start at -inf), so the first
//    step does not pick the same token beam_size times.
//  * The search stops after max_decode_length steps, or earlier once, for
//    every example, the worst finished score beats the best alive
//    log-probability divided by the largest length normalization (no alive
//    sequence can then enter the finished set).
//  * The result is the finished set; an example with no finished sequence at
//    all falls back to its alive sequences and their raw log-probabilities.
//  * sequences include the initial id at position 0 (callers drop it with
//    sequences[:, :, 1:], as seq2seq_transformer.py does); positions after a
//    sequence's EOS hold 0, as Model Garden fills finished sequences with 0.
//  * The symbols-to-logits function returns LOGITS; the search applies
//    log_softmax itself (already-normalized log-probabilities also work, since
//    log_softmax leaves them unchanged).
//
// Differences: scores are kept in double whatever the logits' dtype, and the
// length of the returned sequences is 1 + the number of steps actually run
// (like Model Garden's non-padded decode), not always max_decode_length + 1.
// The limit may differ per example, and the stopping rule above is applied to
// each example by itself: a done example keeps its alive and finished sets
// (0-padded) while the others go on, so every example ends exactly as it
// would in a batch of its own. (Model Garden stops the batch as a whole, so
// an example's lower-ranked finished slots may fill after it is done.)
//
// Note on beam_size 1: because 2 * beam_size candidates are grown, a beam of 1
// can keep an EOS-ended sequence that is not on the greedy path (the
// second-best token at some step) if it scores better than where the greedy
// path finishes. It equals greedy_decode whenever the greedy path's own
// finished sequence is the best such candidate (with alpha 0 and a model whose
// EOS is unlikely until the greedy path picks it). Use greedy_decode for strict
// argmax decoding.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "garden/nlp/modeling/cache.h"

namespace garden::nlp {

// Cache (garden/nlp/modeling/cache.h): decoder state carried between steps (e.g. attention
// keys/values, encoder outputs). Every tensor has the flattened batch on dim 0: batch on input to
// the search, batch * beam_size inside it, row b * beam_size + k being beam k of example b. The
// search expands it once and reorders its rows after every step so each row follows its beam
// ("per_example/" entries keep one row per example and stay, "steps/" entries move only their
// filled positions, or nothing when the model reads them through "step_rows": see cache.h). An
// example that is done leaves the batch: its rows are dropped from every entry and the ids, so the
// model decodes only the examples still searching (N shrinks; the results keep every example).

// Returns logits [N, vocab_size] for the next token, where ids [N, step + 1]
// holds the tokens decoded so far (initial id first) and N = examples still
// searching * beam_size (rows still decoding for greedy_decode). It may
// replace or add cache entries; every entry must keep N rows on dim 0, and
// every "per_example/" entry one row per example still searching.
using SymbolsToLogitsFn =
    std::function<at::Tensor(const at::Tensor& ids, int64_t step, Cache& cache)>;

// Tokens a row may not take next (no_repeat_ngram_ban in
// garden/nlp/modeling/decoding.h is one). Given a step's ids [N, step + 1]
// (initial id first, on the search's device), returns (row, token) pairs.
// The searches give them log-probability -inf after the log_softmax, as
// transformers' logits processors and fairseq's no-repeat blocking do: the
// other tokens keep their probabilities (they are not renormalized). The
// search may then change the step's logits in place (a model's step returns
// a tensor of its own). A row may not have every token banned.
using BannedTokensFn =
    std::function<std::vector<std::pair<int64_t, int64_t>>(const at::Tensor& ids)>;

struct BeamSearchResult {
  at::Tensor sequences;  // int64 [batch, beam_size, steps + 1], best first
  at::Tensor scores;     // double [batch, beam_size], best first
};

// Model Garden's length normalization ((5 + length) / 6)^alpha.
double length_normalization(double alpha, int64_t length);

// initial_ids: int64 [batch], the first token of every sequence (Model
// Garden's Transformer passes 0). alpha >= 0 is expected (the stopping bound
// assumes longer sequences are normalized by a larger factor).
// max_decode_lengths: integer [batch], the most tokens each example may
// generate (its EOS included); a single max_decode_length applies to all.
BeamSearchResult sequence_beam_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                                      const at::Tensor& initial_ids, Cache initial_cache,
                                      int64_t vocab_size, int64_t beam_size, double alpha,
                                      const at::Tensor& max_decode_lengths, int64_t eos_id);
BeamSearchResult sequence_beam_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                                      const at::Tensor& initial_ids, Cache initial_cache,
                                      int64_t vocab_size, int64_t beam_size, double alpha,
                                      int64_t max_decode_length, int64_t eos_id);

// Where the search keeps its own state (sequences, scores, flags): in
// tensors on the device of initial_ids, or on the host as plain arrays, which
// needs initial_ids on the CPU and spares a few dozen tensor operations a
// step. Both give the same bits. The overloads above keep it on the host for
// ids on the CPU and in tensors otherwise; this one chooses (tests compare).
enum class BeamSearchState { kTensors, kHost };
// Whose rules decide which sequences finish and when an example is done.
//   kModelGarden: as described at the top of this file.
//   kTransformers: transformers' generate(num_beams=beam_size,
//     early_stopping=False), which MarianMT users decode with: of the
//     2 * beam_size candidates only the EOS ones ranked in the first beam_size
//     enter the finished set, scored log-probability / length^alpha (alpha is
//     its length_penalty; length the generated tokens, EOS included); an
//     example is done once all beam_size finished slots are set and its best
//     alive log-probability / (tokens so far)^alpha does not beat the worst
//     of them; its last token is EOS (forced_eos_token_id, as MarianMT's
//     generation config sets it) and at its limit every candidate finishes
//     (MaxLengthCriteria). Host state only (ids on the CPU).
enum class BeamSearchRules { kModelGarden, kTransformers };
BeamSearchResult sequence_beam_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                                      const at::Tensor& initial_ids, Cache initial_cache,
                                      int64_t vocab_size, int64_t beam_size, double alpha,
                                      const at::Tensor& max_decode_lengths, int64_t eos_id,
                                      BeamSearchState state,
                                      BeamSearchRules rules = BeamSearchRules::kModelGarden,
                                      const BannedTokensFn& banned = {});

// Picks the most likely token at every step until every sequence has produced
// eos_id or its max_decode_length tokens. Returns sequences
// [batch, 1, steps + 1] (initial id first, 0 after EOS or the row's limit) and
// scores [batch, 1]: the summed log-probability of each sequence's tokens,
// not length-normalized. `banned` as for the beam search: the argmax is
// over the other tokens.
BeamSearchResult greedy_decode(const SymbolsToLogitsFn& symbols_to_logits_fn,
                               const at::Tensor& initial_ids, Cache initial_cache,
                               const at::Tensor& max_decode_lengths, int64_t eos_id,
                               const BannedTokensFn& banned = {});
BeamSearchResult greedy_decode(const SymbolsToLogitsFn& symbols_to_logits_fn,
                               const at::Tensor& initial_ids, Cache initial_cache,
                               int64_t max_decode_length, int64_t eos_id);

}  // namespace garden::nlp
