// What beam search does to its cache and its rows between steps (reorder,
// compact, keep), and the small checks it shares with greedy decoding.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "garden/nlp/modeling/beam_search.h"
#include "garden/nlp/modeling/cache.h"

namespace garden::nlp::beam {

// Model Garden's finite "infinity" for float32 scores: large enough to push a
// candidate out of every top-k, yet finite so that 0 * it stays 0.
inline constexpr double kLargeNegative = -1e7;

void check_initial_ids(const at::Tensor& initial_ids);
// Whether the model reads its "steps/" entries through "step_rows" (cache.h):
// then they keep the rows they were made with, and the search moves indices.
bool reads_step_rows(const Cache& cache);
// Every cache entry has the rows a step expects (examples or rows).
void check_cache_rows(const Cache& cache, int64_t examples, int64_t rows, const char* when);
// The model's logits [examples * beams, V] for the step's ids.
at::Tensor next_logits(const SymbolsToLogitsFn& fn, const at::Tensor& ids, int64_t step,
                       Cache& cache, int64_t examples, int64_t vocab_size);
// Applies `banned` (beam_search.h) to the step's logits [rows, V] in place:
// its (row, token) pairs get -inf. Returns, per row, how much the row's
// log-softmax normalizer fell (double [rows], 0 where nothing is banned):
// subtracted from the row's score, it keeps the other tokens'
// log-probabilities as the model gave them. Undefined when nothing is banned.
at::Tensor ban_tokens(const BannedTokensFn& banned, const at::Tensor& ids, at::Tensor& logits);
at::Tensor gather_beams(const at::Tensor& values, const at::Tensor& indices);
std::vector<int64_t> host_indices(const at::Tensor& indices);
at::Tensor select_rows(const std::string& name, const at::Tensor& tensor, const at::Tensor& rows,
                       int64_t filled, at::Tensor into = {});
at::Tensor rows_per_beam(const std::string& name, const at::Tensor& tensor, int64_t beams);
bool reorders_in_place(const at::Tensor& tensor, int64_t rows, int64_t filled);
void reorder_in_place(at::Tensor& tensor, const std::vector<int64_t>& source, int64_t filled);
void reorder_beams(Cache& cache, Cache& spare, const at::Tensor& flat_rows, int64_t filled);
bool compacts_in_place(const at::Tensor& tensor);
void compact_rows(at::Tensor& tensor, const std::vector<int64_t>& keep, bool steps, int64_t filled);
void keep_rows(Cache& cache, const at::Tensor& examples, const at::Tensor& rows, int64_t filled);
at::Tensor pad_and_stack(const std::vector<at::Tensor>& sequences, int64_t length);
std::vector<int64_t> check_limits(const at::Tensor& max_decode_lengths, int64_t batch,
                                  const char* who);
at::Tensor same_limit(int64_t batch, int64_t max_decode_length);

}  // namespace garden::nlp::beam
