#include "garden/nlp/beam_search.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "garden/base/error.h"

namespace garden::nlp {
namespace {

// Model Garden's finite "infinity" for float32 scores: large enough to push a
// candidate out of every top-k, yet finite so that 0 * it stays 0.
constexpr double kLargeNegative = -1e7;

void check_initial_ids(const at::Tensor& initial_ids) {
  if (initial_ids.dim() != 1 || initial_ids.size(0) == 0) {
    throw Error("beam search: initial_ids must be a non-empty 1-D tensor [batch]");
  }
}

void check_cache_rows(const Cache& cache, int64_t rows, const char* when) {
  for (const auto& [name, tensor] : cache) {
    if (tensor.dim() == 0 || tensor.size(0) != rows) {
      throw Error(std::string("beam search: cache entry '") + name + "' " + when + " must have " +
                  std::to_string(rows) + " rows on dim 0");
    }
  }
}

// Calls the model and returns normalized log-probabilities [rows, vocab] in
// double, validating the shape the caller promised.
at::Tensor next_log_probs(const SymbolsToLogitsFn& fn, const at::Tensor& ids, int64_t step,
                          Cache& cache, int64_t vocab_size) {
  at::Tensor logits = fn(ids, step, cache);
  const int64_t rows = ids.size(0);
  if (logits.dim() != 2 || logits.size(0) != rows ||
      (vocab_size > 0 && logits.size(1) != vocab_size)) {
    throw Error("beam search: symbols_to_logits_fn must return logits [" + std::to_string(rows) +
                ", vocab_size]");
  }
  check_cache_rows(cache, rows, "returned by symbols_to_logits_fn");
  return torch::log_softmax(logits.detach().to(torch::kDouble), -1);
}

// Picks beams along dim 1: out[b, j, ...] = values[b, indices[b, j], ...].
at::Tensor gather_beams(const at::Tensor& values, const at::Tensor& indices) {
  at::Tensor index = indices;
  for (int64_t d = indices.dim(); d < values.dim(); ++d) index = index.unsqueeze(-1);
  std::vector<int64_t> shape = values.sizes().vec();
  shape[1] = indices.size(1);
  return values.gather(1, index.expand(shape));
}

void reorder_cache(Cache& cache, const at::Tensor& flat_rows) {
  for (auto& entry : cache) entry.second = entry.second.index_select(0, flat_rows);
}

// The limits as host values, checked: int64 [batch], each >= 0.
std::vector<int64_t> check_limits(const at::Tensor& max_decode_lengths, int64_t batch,
                                  const char* who) {
  if (!max_decode_lengths.defined() || max_decode_lengths.dim() != 1 ||
      max_decode_lengths.size(0) != batch || max_decode_lengths.is_floating_point())
    throw Error(std::string(who) + ": max_decode_lengths must be an integer tensor [" +
                std::to_string(batch) + "], one limit per example");
  const at::Tensor host = max_decode_lengths.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<int64_t> limits(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + batch);
  for (const int64_t l : limits)
    if (l < 0)
      throw Error(std::string(who) + ": max_decode_length must be >= 0, not " + std::to_string(l));
  return limits;
}

at::Tensor same_limit(int64_t batch, int64_t max_decode_length) {
  return torch::full({batch}, max_decode_length, torch::kLong);
}

}  // namespace

double length_normalization(double alpha, int64_t length) {
  return std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

BeamSearchResult sequence_beam_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                                      const at::Tensor& initial_ids, Cache initial_cache,
                                      int64_t vocab_size, int64_t beam_size, double alpha,
                                      int64_t max_decode_length, int64_t eos_id) {
  check_initial_ids(initial_ids);
  return sequence_beam_search(symbols_to_logits_fn, initial_ids, std::move(initial_cache),
                              vocab_size, beam_size, alpha,
                              same_limit(initial_ids.size(0), max_decode_length), eos_id);
}

BeamSearchResult sequence_beam_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                                      const at::Tensor& initial_ids, Cache initial_cache,
                                      int64_t vocab_size, int64_t beam_size, double alpha,
                                      const at::Tensor& max_decode_lengths, int64_t eos_id) {
  check_initial_ids(initial_ids);
  if (vocab_size < 1 || beam_size < 1)
    throw Error("beam search: vocab_size and beam_size must be >= 1");
  torch::NoGradGuard no_grad;
  const int64_t batch = initial_ids.size(0);
  const int64_t beams = beam_size;
  const std::vector<int64_t> limits = check_limits(max_decode_lengths, batch, "beam search");
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong);
  const auto score_opts = torch::TensorOptions().dtype(torch::kDouble);

  // Every example's cache rows are repeated beam_size times (row b*beam + k).
  check_cache_rows(initial_cache, batch, "given to beam search");
  Cache cache = std::move(initial_cache);
  for (auto& entry : cache) entry.second = entry.second.repeat_interleave(beams, 0);

  at::Tensor alive_seq =
      initial_ids.to(torch::kLong).view({batch, 1, 1}).expand({batch, beams, 1}).contiguous();
  // Only beam 0 is live at first; the copies must not be grown again.
  at::Tensor alive_log_probs =
      torch::full({batch, beams}, -std::numeric_limits<double>::infinity(), score_opts);
  alive_log_probs.select(1, 0).fill_(0.0);
  at::Tensor finished_seq = torch::zeros({batch, beams, 1}, long_opts);
  at::Tensor finished_scores = torch::full({batch, beams}, kLargeNegative, score_opts);
  at::Tensor finished_flags = torch::zeros({batch, beams}, torch::kBool);

  // Row offset of each example in the flattened [batch * beams] layout.
  const at::Tensor batch_offsets = torch::arange(batch, long_opts).mul(beams).unsqueeze(1);
  const at::Tensor own_rows = batch_offsets + torch::arange(beams, long_opts).unsqueeze(0);
  const at::Tensor limit = torch::tensor(limits, long_opts);
  // Each example's length normalization at its own limit.
  std::vector<double> norms;
  for (const int64_t l : limits) norms.push_back(length_normalization(alpha, l));
  const at::Tensor max_length_norm = torch::tensor(norms, score_opts);

  // An example is done at its limit, or once its worst finished score beats
  // its best alive log-probability divided by its largest length
  // normalization (no alive sequence can then enter its finished set). A done
  // example keeps its sequences while the others go on, so it ends as it
  // would alone (Model Garden's search, run on that example by itself).
  auto done = [&](int64_t step) {
    const at::Tensor best_alive = alive_log_probs.select(1, 0) / max_length_norm;
    // Empty finished slots count as 0 so the minimum is over real entries.
    at::Tensor lowest_finished =
        torch::where(finished_flags, finished_scores, torch::zeros_like(finished_scores)).amin(1);
    lowest_finished = torch::where(finished_flags.any(1), lowest_finished,
                                   torch::full_like(lowest_finished, kLargeNegative));
    return limit.le(step).logical_or(lowest_finished.gt(best_alive));
  };
  // Appends a 0 column to a done example's sequences [batch, beams, length].
  auto pad_one = [&](const at::Tensor& seq) { return torch::constant_pad_nd(seq, {0, 1}, 0); };

  int64_t step = 0;
  for (;; ++step) {
    const at::Tensor active = done(step).logical_not();
    if (!active.any().item<bool>()) break;
    const at::Tensor active2 = active.view({batch, 1});
    const at::Tensor active3 = active.view({batch, 1, 1});
    const int64_t length = step + 1;  // tokens so far, initial id included
    const at::Tensor flat_ids = alive_seq.view({batch * beams, length});
    const at::Tensor log_probs =
        next_log_probs(symbols_to_logits_fn, flat_ids, step, cache, vocab_size)
            .view({batch, beams, vocab_size}) +
        alive_log_probs.unsqueeze(2);

    // Grow: the best 2 * beams (beam, token) extensions of each example.
    const int64_t candidates = std::min(2 * beams, beams * vocab_size);
    auto [top_log_probs, top_indices] =
        log_probs.view({batch, beams * vocab_size}).topk(candidates, 1);
    const at::Tensor top_beams = at::div(top_indices, vocab_size, "floor");
    const at::Tensor top_ids = top_indices.remainder(vocab_size);
    const at::Tensor top_seq =
        torch::cat({gather_beams(alive_seq, top_beams), top_ids.unsqueeze(2)}, 2);
    const at::Tensor top_finished = top_ids.eq(eos_id);

    // Alive: the best candidates that did not just produce EOS.
    const at::Tensor alive_candidates =
        top_log_probs + top_finished.to(torch::kDouble) * kLargeNegative;
    const at::Tensor alive_pick = std::get<1>(alive_candidates.topk(beams, 1));
    // One index_select per cache entry: straight from the old beam rows.
    const at::Tensor source_rows =
        torch::where(active2, batch_offsets + top_beams.gather(1, alive_pick), own_rows);
    reorder_cache(cache, source_rows.view({-1}));
    alive_seq = torch::where(active3, gather_beams(top_seq, alive_pick), pad_one(alive_seq));
    alive_log_probs =
        torch::where(active2, alive_candidates.gather(1, alive_pick), alive_log_probs);

    // Finished: merge the candidates that just produced EOS, scored with
    // length normalization, into the finished set (padded with 0).
    finished_seq = pad_one(finished_seq);
    const at::Tensor new_scores = top_log_probs / length_normalization(alpha, length) +
                                  (~top_finished).to(torch::kDouble) * kLargeNegative;
    const at::Tensor all_seq = torch::cat({finished_seq, top_seq}, 1);
    const at::Tensor all_scores = torch::cat({finished_scores, new_scores}, 1);
    const at::Tensor all_flags = torch::cat({finished_flags, top_finished}, 1);
    const at::Tensor finished_pick = std::get<1>(all_scores.topk(beams, 1));
    finished_seq = torch::where(active3, gather_beams(all_seq, finished_pick), finished_seq);
    finished_scores = torch::where(active2, all_scores.gather(1, finished_pick), finished_scores);
    finished_flags = torch::where(active2, all_flags.gather(1, finished_pick), finished_flags);
  }

  // Examples with nothing finished fall back to their alive sequences.
  const at::Tensor has_finished = finished_flags.any(1);
  BeamSearchResult result;
  result.sequences = torch::where(has_finished.view({batch, 1, 1}), finished_seq, alive_seq);
  result.scores = torch::where(has_finished.view({batch, 1}), finished_scores, alive_log_probs);
  return result;
}

BeamSearchResult greedy_decode(const SymbolsToLogitsFn& symbols_to_logits_fn,
                               const at::Tensor& initial_ids, Cache initial_cache,
                               int64_t max_decode_length, int64_t eos_id) {
  check_initial_ids(initial_ids);
  return greedy_decode(symbols_to_logits_fn, initial_ids, std::move(initial_cache),
                       same_limit(initial_ids.size(0), max_decode_length), eos_id);
}

BeamSearchResult greedy_decode(const SymbolsToLogitsFn& symbols_to_logits_fn,
                               const at::Tensor& initial_ids, Cache initial_cache,
                               const at::Tensor& max_decode_lengths, int64_t eos_id) {
  check_initial_ids(initial_ids);
  torch::NoGradGuard no_grad;
  const int64_t batch = initial_ids.size(0);
  const at::Tensor limit =
      torch::tensor(check_limits(max_decode_lengths, batch, "greedy decode"), torch::kLong);
  check_cache_rows(initial_cache, batch, "given to greedy decode");
  Cache cache = std::move(initial_cache);

  at::Tensor seq = initial_ids.to(torch::kLong).view({batch, 1});
  at::Tensor scores = torch::zeros({batch}, torch::kDouble);
  // A row is finished by its EOS or at its own limit.
  at::Tensor finished = limit.le(0);
  for (int64_t step = 0; !finished.all().item<bool>(); ++step) {
    const at::Tensor log_probs = next_log_probs(symbols_to_logits_fn, seq, step, cache, -1);
    auto [best_log_prob, best_id] = log_probs.max(1);
    // Finished rows keep their score and are padded with 0.
    scores = scores + torch::where(finished, torch::zeros_like(best_log_prob), best_log_prob);
    best_id = best_id.masked_fill(finished, 0);
    seq = torch::cat({seq, best_id.unsqueeze(1)}, 1);
    finished = finished.logical_or(best_id.eq(eos_id)).logical_or(limit.le(step + 1));
  }
  return {seq.unsqueeze(1), scores.unsqueeze(1)};
}

}  // namespace garden::nlp
