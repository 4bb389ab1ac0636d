#include "garden/nlp/modeling/beam_search.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "beam_rows.h"
#include "garden/base/error.h"
#include "garden/kernels/beam_candidates.h"
#include "garden/kernels/linear.h"

namespace garden::nlp {

using namespace beam;

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

namespace {

// The search with its state in tensors, on the device of the ids (a GPU's
// when the model decodes there).
BeamSearchResult tensor_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                               const at::Tensor& initial_ids, Cache initial_cache,
                               int64_t vocab_size, int64_t beams, double alpha,
                               const std::vector<int64_t>& limits, int64_t eos_id,
                               const BannedTokensFn& banned) {
  const int64_t batch = initial_ids.size(0);
  // The search's state lives on the device of the ids it extends (the
  // model's: a GPU's when it decodes there).
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(initial_ids.device());
  const auto score_opts = long_opts.dtype(torch::kDouble);

  // Every example's cache rows are repeated beam_size times (row b*beam + k),
  // except the "per_example/" entries, which its beams share.
  check_cache_rows(initial_cache, batch, batch, "given to beam search");
  Cache cache = std::move(initial_cache);
  // This search moves the keys and values themselves: the model reads row r
  // at row r.
  cache.erase(kStepRowsEntry);
  for (auto& [name, tensor] : cache)
    if (!is_per_example_entry(name)) tensor = rows_per_beam(name, tensor, beams);
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
    at::Tensor logits = next_logits(symbols_to_logits_fn, flat_ids, step, cache, n, vocab_size);
    const at::Tensor lost = ban_tokens(banned, flat_ids, logits);

    // Grow: the best 2 * beams (beam, token) extensions of each example, by
    // log-probability plus the beam's own, in double.
    const int64_t candidates = std::min(2 * beams, beams * vocab_size);
    auto [top_log_probs, top_indices] = kernels::top_log_prob_extensions(
        logits,
        lost.defined() ? alive_log_probs - lost.to(alive_log_probs.device()).view({n, beams})
                       : alive_log_probs,
        candidates);
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

// The same search with its state on the host, for ids on the CPU. A step of
// the tensor version is some sixty LibTorch operations on [n, 2k] tensors,
// each with its dispatch; here they are loops over the same numbers. The model call, the
// candidates kernel, the scaling by the length normalization, both top-k
// selections and the cache moves are the same operations on the same values,
// so both versions give the same bits (tested).
BeamSearchResult host_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                             const at::Tensor& initial_ids, Cache initial_cache, int64_t vocab_size,
                             int64_t beams, double alpha, const std::vector<int64_t>& limits,
                             int64_t eos_id, BeamSearchRules rules, const BannedTokensFn& banned) {
  const bool transformers = rules == BeamSearchRules::kTransformers;
  const int64_t batch = initial_ids.size(0);
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong);
  const auto score_opts = long_opts.dtype(torch::kDouble);
  check_cache_rows(initial_cache, batch, batch, "given to beam search");
  Cache cache = std::move(initial_cache);
  for (auto& [name, tensor] : cache)
    if (!is_per_example_entry(name)) tensor = rows_per_beam(name, tensor, beams);
  Cache spare;
  // With "step_rows", each row of the flattened batch owns one buffer row of
  // the "steps/" entries (its home; they were made above, a row per beam)
  // and writes there; what it read before comes with the indices of the beam
  // it extends. Homes stay with their rows when beams reorder, and move with
  // them when examples leave.
  const bool indexed = reads_step_rows(cache);
  std::vector<int64_t> home(static_cast<std::size_t>(batch * beams));
  for (std::size_t r = 0; r < home.size(); ++r) home[r] = static_cast<int64_t>(r);
  if (indexed) {
    at::Tensor& rows = cache.at(kStepRowsEntry);
    if (rows.dim() != 2 || rows.scalar_type() != torch::kLong || !rows.device().is_cpu())
      throw Error("beam search: cache entry 'step_rows' must be int64 [rows, capacity] on the CPU");
    rows = torch::arange(batch * beams, long_opts).unsqueeze(1).expand_as(rows).contiguous();
  }

  // Per example still searching (n of them): its index in the batch, limit
  // and largest length normalization; per beam (n * beams): the alive and
  // the finished sequences (`capacity` tokens each, 0 after their length),
  // the alive log-probability, the finished score and whether it is set.
  int64_t capacity = 1;
  for (const int64_t l : limits) capacity = std::max(capacity, l + 1);
  const auto cap = static_cast<std::size_t>(capacity);
  const auto K = static_cast<std::size_t>(beams);
  std::vector<int64_t> examples(static_cast<std::size_t>(batch));
  std::vector<int64_t> limit = limits;
  std::vector<double> norm;
  for (int64_t e = 0; e < batch; ++e) {
    examples[static_cast<std::size_t>(e)] = e;
    norm.push_back(length_normalization(alpha, limits[static_cast<std::size_t>(e)]));
  }
  const at::Tensor first_ids = initial_ids.to(torch::kLong).contiguous();
  std::vector<int64_t> alive_seq(examples.size() * K * cap, 0), finished_seq(alive_seq.size(), 0);
  for (std::size_t r = 0; r < examples.size() * K; ++r)
    alive_seq[r * cap] = first_ids.data_ptr<int64_t>()[r / K];
  std::vector<double> alive_log_probs(examples.size() * K,
                                      -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < examples.size(); ++i) alive_log_probs[i * K] = 0.0;
  std::vector<double> finished_scores(examples.size() * K, kLargeNegative);
  std::vector<char> finished_flags(examples.size() * K, 0);
  std::vector<at::Tensor> result_sequences(static_cast<std::size_t>(batch));
  std::vector<at::Tensor> result_scores(static_cast<std::size_t>(batch));
  std::vector<int64_t> next_seq;  // the next step's alive or finished sequences
  const auto as_tensor = [](auto& values, std::vector<int64_t> shape, at::TensorOptions options) {
    return torch::from_blob(values.data(), shape, options);
  };

  int64_t step = 0;
  for (;; ++step) {
    const auto length = static_cast<std::size_t>(step + 1);  // tokens so far
    std::size_t n = examples.size();
    // Done at its limit, or once its worst finished score (empty slots count
    // as 0; none set: kLargeNegative) beats its best alive log-probability
    // over its largest length normalization.
    std::vector<char> done(n, 0);
    bool any_done = false;
    for (std::size_t i = 0; i < n; ++i) {
      const double best_alive = alive_log_probs[i * K] / norm[i];
      double lowest = std::numeric_limits<double>::infinity();
      bool any_finished = false;
      for (std::size_t k = 0; k < K; ++k) {
        const double v = finished_flags[i * K + k] ? finished_scores[i * K + k] : 0.0;
        lowest = std::isnan(v) || std::isnan(lowest) ? std::nan("") : std::min(lowest, v);
        any_finished = any_finished || finished_flags[i * K + k];
      }
      if (!any_finished) lowest = kLargeNegative;
      if (transformers) {
        // Every slot set, and the best alive over the tokens so far no better.
        bool full = true;
        for (std::size_t k = 0; k < K; ++k) full = full && finished_flags[i * K + k];
        done[i] = limit[i] <= step ||
                  (full &&
                   !(alive_log_probs[i * K] / std::pow(static_cast<double>(step), alpha) > lowest));
      } else {
        done[i] = limit[i] <= step || lowest > best_alive;
      }
      any_done = any_done || done[i];
    }
    if (any_done) {
      std::vector<int64_t> staying;
      for (std::size_t i = 0; i < n; ++i) {
        if (!done[i]) {
          staying.push_back(static_cast<int64_t>(i));
          continue;
        }
        // Its finished set, or its alive one when nothing finished.
        bool has_finished = false;
        for (std::size_t k = 0; k < K; ++k)
          has_finished = has_finished || finished_flags[i * K + k];
        const std::vector<int64_t>& seq = has_finished ? finished_seq : alive_seq;
        const std::vector<double>& scores = has_finished ? finished_scores : alive_log_probs;
        at::Tensor out_seq = torch::empty({beams, step + 1}, long_opts);
        for (std::size_t k = 0; k < K; ++k)
          std::copy_n(seq.begin() + static_cast<std::ptrdiff_t>((i * K + k) * cap), length,
                      out_seq.data_ptr<int64_t>() + k * length);
        at::Tensor out_scores = torch::empty({beams}, score_opts);
        std::copy_n(scores.begin() + static_cast<std::ptrdiff_t>(i * K), K,
                    out_scores.data_ptr<double>());
        const auto e = static_cast<std::size_t>(examples[i]);
        result_sequences[e] = out_seq;
        result_scores[e] = out_scores;
      }
      if (staying.empty()) break;
      // Keep the rows of the examples staying, in order.
      std::vector<int64_t> rows;
      for (std::size_t j = 0; j < staying.size(); ++j) {
        const auto i = static_cast<std::size_t>(staying[j]);
        examples[j] = examples[i];
        limit[j] = limit[i];
        norm[j] = norm[i];
        for (std::size_t k = 0; k < K; ++k) {
          const std::size_t to = j * K + k, from = i * K + k;
          rows.push_back(static_cast<int64_t>(from));
          home[to] = home[from];
          std::copy_n(alive_seq.begin() + static_cast<std::ptrdiff_t>(from * cap), cap,
                      alive_seq.begin() + static_cast<std::ptrdiff_t>(to * cap));
          std::copy_n(finished_seq.begin() + static_cast<std::ptrdiff_t>(from * cap), cap,
                      finished_seq.begin() + static_cast<std::ptrdiff_t>(to * cap));
          alive_log_probs[to] = alive_log_probs[from];
          finished_scores[to] = finished_scores[from];
          finished_flags[to] = finished_flags[from];
        }
      }
      n = staying.size();
      examples.resize(n);
      limit.resize(n);
      norm.resize(n);
      keep_rows(cache, as_tensor(staying, {static_cast<int64_t>(n)}, long_opts).clone(),
                as_tensor(rows, {static_cast<int64_t>(n * K)}, long_opts).clone(), step);
      spare.clear();  // its buffers have the old row count
    }
    const auto rows_now = static_cast<int64_t>(n * K);
    if (indexed) {
      // This step's keys and values go to each row's own buffer row.
      at::Tensor& rows = cache.at(kStepRowsEntry);
      if (rows.size(1) <= step || !rows.is_contiguous())
        throw Error("beam search: cache entry 'step_rows' has room for " +
                    std::to_string(rows.size(1)) + " steps; step " + std::to_string(step) +
                    " needs more");
      int64_t* at_step = rows.data_ptr<int64_t>() + step;
      for (std::size_t r = 0; r < n * K; ++r)
        at_step[static_cast<int64_t>(r) * rows.size(1)] = home[r];
    }
    at::Tensor flat_ids = torch::empty({rows_now, step + 1}, long_opts);
    for (std::size_t r = 0; r < n * K; ++r)
      std::copy_n(alive_seq.begin() + static_cast<std::ptrdiff_t>(r * cap), length,
                  flat_ids.data_ptr<int64_t>() + r * length);
    at::Tensor logits = next_logits(symbols_to_logits_fn, flat_ids, step, cache,
                                    static_cast<int64_t>(n), vocab_size);
    if (transformers) {
      // MarianMT's forced_eos_token_id: an example's last token is EOS.
      for (std::size_t i = 0; i < n; ++i) {
        if (step + 1 < limit[i]) continue;
        at::Tensor rows = logits.narrow(0, static_cast<int64_t>(i * K), beams);
        rows.fill_(-std::numeric_limits<float>::infinity());
        rows.select(1, eos_id).fill_(0.0);
      }
    }

    // Grow: the best 2 * beams (beam, token) extensions of each example.
    const int64_t candidates = std::min(2 * beams, beams * vocab_size);
    const auto C = static_cast<std::size_t>(candidates);
    at::Tensor alive_tensor =
        as_tensor(alive_log_probs, {static_cast<int64_t>(n), beams}, score_opts).clone();
    const at::Tensor lost = ban_tokens(banned, flat_ids, logits);
    if (lost.defined())
      alive_tensor.sub_(lost.to(torch::kCPU).view({static_cast<int64_t>(n), beams}));
    auto [top_log_probs, top_indices] =
        kernels::top_log_prob_extensions(logits, alive_tensor, candidates);
    top_log_probs = top_log_probs.contiguous();
    top_indices = top_indices.contiguous();
    // Finished candidates are scored with the length normalization.
    const at::Tensor scaled =
        (top_log_probs / (transformers ? std::pow(static_cast<double>(step + 1), alpha)
                                       : length_normalization(alpha, step + 1)))
            .contiguous();
    const double* top_lp = top_log_probs.data_ptr<double>();
    const int64_t* top_index = top_indices.data_ptr<int64_t>();
    const double* top_scaled = scaled.data_ptr<double>();
    std::vector<int64_t> top_beam(n * C), top_id(n * C);
    std::vector<double> alive_candidates(n * C), new_scores(n * C);
    std::vector<char> top_finished(n * C);
    for (std::size_t c = 0; c < n * C; ++c) {
      top_beam[c] = top_index[c] / vocab_size;
      top_id[c] = top_index[c] % vocab_size;
      // transformers: at the limit every candidate ends (MaxLengthCriteria).
      top_finished[c] = top_id[c] == eos_id || (transformers && step + 1 >= limit[c / C]);
      // transformers: only those ranked in the first `beams` may finish.
      const bool may_finish = top_finished[c] && (!transformers || c % C < K);
      // As the tensor version computes them: x + flag * kLargeNegative.
      alive_candidates[c] = top_lp[c] + (top_finished[c] ? 1.0 : 0.0) * kLargeNegative;
      new_scores[c] = top_scaled[c] + (may_finish ? 0.0 : 1.0) * kLargeNegative;
      if (transformers) top_finished[c] = may_finish;
    }
    // The candidate's sequence: its beam's tokens, then its token.
    const auto candidate_token = [&](std::size_t i, std::size_t c, std::size_t t) {
      return t < length
                 ? alive_seq[(i * K + static_cast<std::size_t>(top_beam[i * C + c])) * cap + t]
                 : top_id[i * C + c];
    };

    // Alive: the best candidates that did not just produce EOS.
    const at::Tensor alive_pick =
        std::get<1>(as_tensor(alive_candidates, {static_cast<int64_t>(n), candidates}, score_opts)
                        .topk(beams, 1))
            .contiguous();
    const int64_t* pick = alive_pick.data_ptr<int64_t>();
    std::vector<int64_t> source_rows(n * K);
    next_seq.assign(n * K * cap, 0);
    std::vector<double> next_log_probs(n * K);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < K; ++j) {
        const auto c = static_cast<std::size_t>(pick[i * K + j]);
        source_rows[i * K + j] = static_cast<int64_t>(i * K) + top_beam[i * C + c];
        for (std::size_t t = 0; t <= length; ++t)
          next_seq[(i * K + j) * cap + t] = candidate_token(i, c, t);
        next_log_probs[i * K + j] = alive_candidates[i * C + c];
      }
    reorder_beams(cache, spare, as_tensor(source_rows, {rows_now}, long_opts).clone(), step + 1);

    // Finished: the best of the finished set and the candidates that just
    // produced EOS.
    std::vector<double> all_scores(n * (K + C));
    for (std::size_t i = 0; i < n; ++i) {
      std::copy_n(finished_scores.begin() + static_cast<std::ptrdiff_t>(i * K), K,
                  all_scores.begin() + static_cast<std::ptrdiff_t>(i * (K + C)));
      std::copy_n(new_scores.begin() + static_cast<std::ptrdiff_t>(i * C), C,
                  all_scores.begin() + static_cast<std::ptrdiff_t>(i * (K + C) + K));
    }
    const at::Tensor finished_pick =
        std::get<1>(as_tensor(all_scores, {static_cast<int64_t>(n), beams + candidates}, score_opts)
                        .topk(beams, 1))
            .contiguous();
    const int64_t* fpick = finished_pick.data_ptr<int64_t>();
    std::vector<int64_t> next_finished(n * K * cap, 0);
    std::vector<double> next_scores(n * K);
    std::vector<char> next_flags(n * K);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < K; ++j) {
        const auto a = static_cast<std::size_t>(fpick[i * K + j]);
        int64_t* to = next_finished.data() + (i * K + j) * cap;
        if (a < K) {  // a finished sequence, one 0 longer
          std::copy_n(finished_seq.begin() + static_cast<std::ptrdiff_t>((i * K + a) * cap), length,
                      to);
          to[length] = 0;
          next_scores[i * K + j] = finished_scores[i * K + a];
          next_flags[i * K + j] = finished_flags[i * K + a];
        } else {
          const std::size_t c = a - K;
          for (std::size_t t = 0; t <= length; ++t) to[t] = candidate_token(i, c, t);
          next_scores[i * K + j] = new_scores[i * C + c];
          next_flags[i * K + j] = top_finished[i * C + c];
        }
      }
    std::swap(alive_seq, next_seq);
    alive_log_probs = std::move(next_log_probs);
    finished_seq = std::move(next_finished);
    finished_scores = std::move(next_scores);
    finished_flags = std::move(next_flags);
  }

  BeamSearchResult result;
  result.sequences = pad_and_stack(result_sequences, step + 1);
  result.scores = torch::stack(result_scores);
  return result;
}

}  // namespace

BeamSearchResult sequence_beam_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                                      const at::Tensor& initial_ids, Cache initial_cache,
                                      int64_t vocab_size, int64_t beam_size, double alpha,
                                      const at::Tensor& max_decode_lengths, int64_t eos_id) {
  return sequence_beam_search(symbols_to_logits_fn, initial_ids, std::move(initial_cache),
                              vocab_size, beam_size, alpha, max_decode_lengths, eos_id,
                              initial_ids.defined() && initial_ids.device().is_cpu()
                                  ? BeamSearchState::kHost
                                  : BeamSearchState::kTensors);
}

BeamSearchResult sequence_beam_search(const SymbolsToLogitsFn& symbols_to_logits_fn,
                                      const at::Tensor& initial_ids, Cache initial_cache,
                                      int64_t vocab_size, int64_t beam_size, double alpha,
                                      const at::Tensor& max_decode_lengths, int64_t eos_id,
                                      BeamSearchState state, BeamSearchRules rules,
                                      const BannedTokensFn& banned) {
  check_initial_ids(initial_ids);
  if (vocab_size < 1 || beam_size < 1)
    throw Error("beam search: vocab_size and beam_size must be >= 1");
  torch::NoGradGuard no_grad;
  // The model's weights hold still while it decodes: its products may take
  // them laid out once for the steps' few rows.
  const kernels::FrozenWeights frozen;
  const std::vector<int64_t> limits =
      check_limits(max_decode_lengths, initial_ids.size(0), "beam search");
  if (state == BeamSearchState::kHost) {
    if (!initial_ids.device().is_cpu())
      throw Error("beam search: the host search needs initial_ids on the CPU");
    return host_search(symbols_to_logits_fn, initial_ids, std::move(initial_cache), vocab_size,
                       beam_size, alpha, limits, eos_id, rules, banned);
  }
  if (rules == BeamSearchRules::kTransformers)
    throw Error(
        "beam search: transformers' rules (task.model.beam_search: transformers) run with "
        "the search's state on the host: decode on the CPU");
  return tensor_search(symbols_to_logits_fn, initial_ids, std::move(initial_cache), vocab_size,
                       beam_size, alpha, limits, eos_id, banned);
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
                               const at::Tensor& max_decode_lengths, int64_t eos_id,
                               const BannedTokensFn& banned) {
  check_initial_ids(initial_ids);
  torch::NoGradGuard no_grad;
  const kernels::FrozenWeights frozen;  // as in the beam search
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
    at::Tensor logits = next_logits(symbols_to_logits_fn, seq, step, cache, seq.size(0), -1);
    const at::Tensor lost = ban_tokens(banned, seq, logits);
    auto [best_log_prob, best_id] = kernels::top_log_prob_extensions(
        logits,
        lost.defined() ? lost.to(score_opts.device()).neg().view({-1, 1})
                       : torch::zeros({seq.size(0), 1}, score_opts),
        1);
    scores = scores + best_log_prob.view({-1});
    seq = torch::cat({seq, best_id}, 1);
    finished = best_id.view({-1}).eq(eos_id).logical_or(limit.le(step + 1));
  }
  return {pad_and_stack(result_sequences, step + 1), torch::stack(result_scores)};
}

}  // namespace garden::nlp
