#include "garden/nlp/beam_search.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "garden/base/error.h"
#include "garden/nlp/kernels.h"

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

// "per_example/" entries hold one row per example, every other entry one row
// per beam (rows = examples * beams).
void check_cache_rows(const Cache& cache, int64_t examples, int64_t rows, const char* when) {
  for (const auto& [name, tensor] : cache) {
    const int64_t want = is_per_example_entry(name) ? examples : rows;
    if (tensor.dim() == 0 || tensor.size(0) != want) {
      throw Error(std::string("beam search: cache entry '") + name + "' " + when + " must have " +
                  std::to_string(want) + " rows on dim 0");
    }
  }
}

// Calls the model and returns its logits [rows, vocab], validating the shape
// the caller promised.
at::Tensor next_logits(const SymbolsToLogitsFn& fn, const at::Tensor& ids, int64_t step,
                       Cache& cache, int64_t examples, int64_t vocab_size) {
  at::Tensor logits = fn(ids, step, cache);
  const int64_t rows = ids.size(0);
  if (logits.dim() != 2 || logits.size(0) != rows ||
      (vocab_size > 0 && logits.size(1) != vocab_size)) {
    throw Error("beam search: symbols_to_logits_fn must return logits [" + std::to_string(rows) +
                ", vocab_size]");
  }
  check_cache_rows(cache, examples, rows, "returned by symbols_to_logits_fn");
  return logits.detach();
}

// Picks beams along dim 1: out[b, j, ...] = values[b, indices[b, j], ...].
at::Tensor gather_beams(const at::Tensor& values, const at::Tensor& indices) {
  at::Tensor index = indices;
  for (int64_t d = indices.dim(); d < values.dim(); ++d) index = index.unsqueeze(-1);
  std::vector<int64_t> shape = values.sizes().vec();
  shape[1] = indices.size(1);
  return values.gather(1, index.expand(shape));
}

// The host copy of an int64 index tensor.
std::vector<int64_t> host_indices(const at::Tensor& indices) {
  const at::Tensor host = indices.to(torch::kCPU, torch::kLong).contiguous();
  return {host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel()};
}

// Rows `rows` of a cache entry, as a new tensor. A "steps/" entry keeps its
// capacity; only its first `filled` positions are copied (the rest was never
// written). `into`, when it has the result's shape, is reused.
at::Tensor select_rows(const std::string& name, const at::Tensor& tensor, const at::Tensor& rows,
                       int64_t filled, at::Tensor into = {}) {
  if (!is_steps_entry(name) || tensor.dim() < 3 || tensor.size(2) < filled)
    return tensor.index_select(0, rows);
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[0] = rows.size(0);
  if (!into.defined() || into.sizes() != at::IntArrayRef(shape) ||
      into.scalar_type() != tensor.scalar_type() || into.device() != tensor.device())
    into = at::empty(shape, tensor.options());
  at::Tensor out = into.narrow(2, 0, filled);
  at::index_select_out(out, tensor.narrow(2, 0, filled), 0, rows);
  return into;
}

// Whether a "steps/" entry can be reordered in place: a contiguous CPU
// buffer [rows, H, capacity, Dh] holding `filled` positions.
bool reorders_in_place(const at::Tensor& tensor, int64_t rows, int64_t filled) {
  return tensor.device().is_cpu() && tensor.dim() == 4 && tensor.is_contiguous() &&
         tensor.size(0) == rows && tensor.size(2) >= filled;
}

// Row r of a "steps/" buffer takes the first `filled` positions of row
// source[r], in place. Beams mostly extend their own row, and those rows are
// not touched; a row that is both overwritten and read by another is read
// from a copy made first. (Copying every row into a second buffer, as
// index_select did, was 5 to 10 % of an int8 beam-4 run.)
void reorder_in_place(at::Tensor& tensor, const std::vector<int64_t>& source, int64_t filled) {
  const auto rows = static_cast<int64_t>(source.size());
  const int64_t heads = tensor.size(1);
  const auto element = static_cast<int64_t>(tensor.element_size());
  const int64_t span = filled * tensor.size(3) * element;  // a head's filled bytes
  const int64_t head_stride = tensor.size(2) * tensor.size(3) * element;
  char* base = static_cast<char*>(tensor.data_ptr());
  auto row = [&](int64_t r) { return base + r * heads * head_stride; };
  std::vector<int64_t> stash_slot(static_cast<std::size_t>(rows), -1);
  std::vector<char> stash;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = source[static_cast<std::size_t>(r)];
    if (from == r || source[static_cast<std::size_t>(from)] == from ||
        stash_slot[static_cast<std::size_t>(from)] >= 0)
      continue;
    // `from` is read by r and overwritten itself: keep its filled positions.
    stash_slot[static_cast<std::size_t>(from)] = static_cast<int64_t>(stash.size());
    stash.resize(stash.size() + static_cast<std::size_t>(heads * span));
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(stash.data() + stash_slot[static_cast<std::size_t>(from)] + h * span,
                  row(from) + h * head_stride, static_cast<std::size_t>(span));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = source[static_cast<std::size_t>(r)];
    if (from == r) continue;
    const int64_t slot = stash_slot[static_cast<std::size_t>(from)];
    for (int64_t h = 0; h < heads; ++h) {
      const char* read = slot >= 0 ? stash.data() + slot + h * span : row(from) + h * head_stride;
      std::memcpy(row(r) + h * head_stride, read, static_cast<std::size_t>(span));
    }
  }
}

// After a step, row r takes the state of row flat_rows[r], a beam of its own
// example: "per_example/" entries (one row per example) stay as they are,
// "steps/" entries move their `filled` positions (in place on the CPU;
// elsewhere into the spare buffer, which becomes the entry, so no step
// allocates), every other entry is index-selected.
void reorder_beams(Cache& cache, Cache& spare, const at::Tensor& flat_rows, int64_t filled) {
  std::vector<int64_t> source;  // flat_rows on the host, when an entry needs it
  for (auto& [name, tensor] : cache) {
    if (is_per_example_entry(name)) continue;
    if (is_steps_entry(name) && reorders_in_place(tensor, flat_rows.size(0), filled)) {
      if (source.empty()) source = host_indices(flat_rows);
      reorder_in_place(tensor, source, filled);
    } else if (is_steps_entry(name)) {
      at::Tensor& other = spare[name];
      other = select_rows(name, tensor, flat_rows, filled, other);
      std::swap(tensor, other);
    } else {
      tensor = tensor.index_select(0, flat_rows);
    }
  }
}

// Keeps examples `examples` (rows `rows` of the per-beam entries): examples
// that are done leave the batch.
void keep_rows(Cache& cache, const at::Tensor& examples, const at::Tensor& rows, int64_t filled) {
  for (auto& [name, tensor] : cache)
    tensor = is_per_example_entry(name) ? tensor.index_select(0, examples)
                                        : select_rows(name, tensor, rows, filled);
}

// Sequences of different lengths [beams, length_i], one per example, as one
// tensor [batch, beams, length] padded with 0.
at::Tensor pad_and_stack(const std::vector<at::Tensor>& sequences, int64_t length) {
  std::vector<at::Tensor> padded;
  padded.reserve(sequences.size());
  for (const at::Tensor& seq : sequences)
    padded.push_back(torch::constant_pad_nd(seq, {0, length - seq.size(-1)}, 0));
  return torch::stack(padded);
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

// The limits are read on the host (check_limits), so they stay there.
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
  // The search's state lives on the device of the ids it extends (the
  // model's: a GPU's when it decodes there).
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(initial_ids.device());
  const auto score_opts = long_opts.dtype(torch::kDouble);

  // Every example's cache rows are repeated beam_size times (row b*beam + k),
  // except the "per_example/" entries, which its beams share.
  check_cache_rows(initial_cache, batch, batch, "given to beam search");
  Cache cache = std::move(initial_cache);
  for (auto& [name, tensor] : cache)
    if (!is_per_example_entry(name)) tensor = tensor.repeat_interleave(beams, 0);
  Cache spare;  // the second buffer of each "steps/" entry

  // The search runs on the examples still undecided: `examples` holds their
  // indices in the batch, and every tensor below has one row per such
  // example. A done example leaves with its result, so the model decodes
  // only the rest.
  at::Tensor examples = torch::arange(batch, long_opts);
  at::Tensor alive_seq =
      initial_ids.to(torch::kLong).view({batch, 1, 1}).expand({batch, beams, 1}).contiguous();
  // Only beam 0 is live at first; the copies must not be grown again.
  at::Tensor alive_log_probs =
      torch::full({batch, beams}, -std::numeric_limits<double>::infinity(), score_opts);
  alive_log_probs.select(1, 0).fill_(0.0);
  at::Tensor finished_seq = torch::zeros({batch, beams, 1}, long_opts);
  at::Tensor finished_scores = torch::full({batch, beams}, kLargeNegative, score_opts);
  at::Tensor finished_flags = torch::zeros({batch, beams}, long_opts.dtype(torch::kBool));
  at::Tensor limit = torch::tensor(limits, long_opts);
  // Each example's length normalization at its own limit.
  std::vector<double> norms;
  for (const int64_t l : limits) norms.push_back(length_normalization(alpha, l));
  at::Tensor max_length_norm = torch::tensor(norms, score_opts);
  const at::Tensor beam_index = torch::arange(beams, long_opts).unsqueeze(0);
  std::vector<at::Tensor> result_sequences(static_cast<std::size_t>(batch));
  std::vector<at::Tensor> result_scores(static_cast<std::size_t>(batch));

  // An example is done at its limit, or once its worst finished score beats
  // its best alive log-probability divided by its largest length
  // normalization (no alive sequence can then enter its finished set). A
  // done example keeps its sequences, so it ends as it would alone (Model
  // Garden's search, run on that example by itself).
  auto done = [&](int64_t step) {
    const at::Tensor best_alive = alive_log_probs.select(1, 0) / max_length_norm;
    // Empty finished slots count as 0 so the minimum is over real entries.
    at::Tensor lowest_finished =
        torch::where(finished_flags, finished_scores, torch::zeros_like(finished_scores)).amin(1);
    lowest_finished = torch::where(finished_flags.any(1), lowest_finished,
                                   torch::full_like(lowest_finished, kLargeNegative));
    return limit.le(step).logical_or(lowest_finished.gt(best_alive));
  };

  int64_t step = 0;
  for (;; ++step) {
    const at::Tensor is_done = done(step);
    if (is_done.any().item<bool>()) {
      // Done examples leave with their finished set, or their alive one when
      // nothing finished.
      const at::Tensor has_finished = finished_flags.any(1);
      const at::Tensor sequences =
          torch::where(has_finished.view({-1, 1, 1}), finished_seq, alive_seq);
      const at::Tensor scores =
          torch::where(has_finished.view({-1, 1}), finished_scores, alive_log_probs);
      const std::vector<int64_t> in_batch = host_indices(examples);
      for (const int64_t i : host_indices(is_done.nonzero().view({-1}))) {
        const auto e = static_cast<std::size_t>(in_batch[static_cast<std::size_t>(i)]);
        result_sequences[e] = sequences[i];
        result_scores[e] = scores[i];
      }
      const at::Tensor staying = is_done.logical_not().nonzero().view({-1});
      if (staying.numel() == 0) break;
      for (at::Tensor* t : {&examples, &alive_seq, &alive_log_probs, &finished_seq,
                            &finished_scores, &finished_flags, &limit, &max_length_norm})
        *t = t->index_select(0, staying);
      keep_rows(cache, staying, (staying.unsqueeze(1) * beams + beam_index).view({-1}), step);
      spare.clear();  // its buffers have the old row count
    }
    const int64_t n = examples.size(0);
    const int64_t length = step + 1;  // tokens so far, initial id included
    const at::Tensor flat_ids = alive_seq.view({n * beams, length});
    const at::Tensor logits =
        next_logits(symbols_to_logits_fn, flat_ids, step, cache, n, vocab_size);

    // Grow: the best 2 * beams (beam, token) extensions of each example, by
    // log-probability in double plus the beam's own.
    const int64_t candidates = std::min(2 * beams, beams * vocab_size);
    auto [top_log_probs, top_indices] =
        top_log_prob_extensions(logits, alive_log_probs, candidates);
    const at::Tensor top_beams = at::div(top_indices, vocab_size, "floor");
    const at::Tensor top_ids = top_indices.remainder(vocab_size);
    const at::Tensor top_seq =
        torch::cat({gather_beams(alive_seq, top_beams), top_ids.unsqueeze(2)}, 2);
    const at::Tensor top_finished = top_ids.eq(eos_id);

    // Alive: the best candidates that did not just produce EOS.
    const at::Tensor alive_candidates =
        top_log_probs + top_finished.to(torch::kDouble) * kLargeNegative;
    const at::Tensor alive_pick = std::get<1>(alive_candidates.topk(beams, 1));
    // Each row's state comes straight from the old beam row it extends.
    const at::Tensor source_rows =
        torch::arange(n, long_opts).mul(beams).unsqueeze(1) + top_beams.gather(1, alive_pick);
    reorder_beams(cache, spare, source_rows.view({-1}), length);
    alive_seq = gather_beams(top_seq, alive_pick);
    alive_log_probs = alive_candidates.gather(1, alive_pick);

    // Finished: merge the candidates that just produced EOS, scored with
    // length normalization, into the finished set (padded with 0).
    const at::Tensor new_scores = top_log_probs / length_normalization(alpha, length) +
                                  (~top_finished).to(torch::kDouble) * kLargeNegative;
    const at::Tensor all_seq =
        torch::cat({torch::constant_pad_nd(finished_seq, {0, 1}, 0), top_seq}, 1);
    const at::Tensor all_scores = torch::cat({finished_scores, new_scores}, 1);
    const at::Tensor all_flags = torch::cat({finished_flags, top_finished}, 1);
    const at::Tensor finished_pick = std::get<1>(all_scores.topk(beams, 1));
    finished_seq = gather_beams(all_seq, finished_pick);
    finished_scores = all_scores.gather(1, finished_pick);
    finished_flags = all_flags.gather(1, finished_pick);
  }

  // Every sequence is as long as the steps run, 0 after where it ended.
  BeamSearchResult result;
  result.sequences = pad_and_stack(result_sequences, step + 1);
  result.scores = torch::stack(result_scores);
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
  // On the device of the ids, as in the beam search.
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(initial_ids.device());
  const auto score_opts = long_opts.dtype(torch::kDouble);
  at::Tensor limit =
      torch::tensor(check_limits(max_decode_lengths, batch, "greedy decode"), long_opts);
  check_cache_rows(initial_cache, batch, batch, "given to greedy decode");
  Cache cache = std::move(initial_cache);

  // As in the beam search, only the rows still decoding are run: a row is
  // finished by its EOS or at its own limit, and then leaves the batch.
  at::Tensor examples = torch::arange(batch, long_opts);
  at::Tensor seq = initial_ids.to(torch::kLong).view({batch, 1});
  at::Tensor scores = torch::zeros({batch}, score_opts);
  at::Tensor finished = limit.le(0);
  std::vector<at::Tensor> result_sequences(static_cast<std::size_t>(batch));
  std::vector<at::Tensor> result_scores(static_cast<std::size_t>(batch));
  int64_t step = 0;
  for (;; ++step) {
    if (finished.any().item<bool>()) {
      const std::vector<int64_t> in_batch = host_indices(examples);
      for (const int64_t i : host_indices(finished.nonzero().view({-1}))) {
        const auto e = static_cast<std::size_t>(in_batch[static_cast<std::size_t>(i)]);
        result_sequences[e] = seq[i].unsqueeze(0);
        result_scores[e] = scores[i].unsqueeze(0);
      }
      const at::Tensor staying = finished.logical_not().nonzero().view({-1});
      if (staying.numel() == 0) break;
      for (at::Tensor* t : {&examples, &seq, &scores, &limit}) *t = t->index_select(0, staying);
      keep_rows(cache, staying, staying, step);
    }
    const at::Tensor logits = next_logits(symbols_to_logits_fn, seq, step, cache, seq.size(0), -1);
    auto [best_log_prob, best_id] =
        top_log_prob_extensions(logits, torch::zeros({seq.size(0), 1}, score_opts), 1);
    scores = scores + best_log_prob.view({-1});
    seq = torch::cat({seq, best_id}, 1);
    finished = best_id.view({-1}).eq(eos_id).logical_or(limit.le(step + 1));
  }
  return {pad_and_stack(result_sequences, step + 1), torch::stack(result_scores)};
}

}  // namespace garden::nlp
