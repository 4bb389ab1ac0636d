#include "beam_rows.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "garden/base/error.h"

namespace garden::nlp::beam {

void check_initial_ids(const at::Tensor& initial_ids) {
  if (initial_ids.dim() != 1 || initial_ids.size(0) == 0) {
    throw Error("beam search: initial_ids must be a non-empty 1-D tensor [batch]");
  }
}

// Whether the model reads its "steps/" entries through "step_rows" (cache.h):
// then they keep the rows they were made with, and the search moves indices.
bool reads_step_rows(const Cache& cache) { return cache.count(kStepRowsEntry) > 0; }

// "per_example/" entries hold one row per example, every other entry one row
// per beam (rows = examples * beams), except "steps/" entries read through
// "step_rows".
void check_cache_rows(const Cache& cache, int64_t examples, int64_t rows, const char* when) {
  const bool indexed = reads_step_rows(cache);
  for (const auto& [name, tensor] : cache) {
    if (indexed && is_steps_entry(name)) continue;
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

at::Tensor ban_tokens(const BannedTokensFn& banned, const at::Tensor& ids, at::Tensor& logits) {
  if (!banned) return {};
  const std::vector<std::pair<int64_t, int64_t>> pairs = banned(ids);
  if (pairs.empty()) return {};
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  std::vector<int64_t> touched;  // the rows with a ban, each once, in order
  std::vector<int64_t> position(static_cast<std::size_t>(rows), -1);
  std::vector<int64_t> at_row;  // each pair's row in `touched`
  std::vector<int64_t> row_of;  // and in the logits
  std::vector<int64_t> tokens;
  for (const auto& [row, token] : pairs) {
    if (row < 0 || row >= rows || token < 0 || token >= vocab)
      throw Error("beam search: banned token (" + std::to_string(row) + ", " +
                  std::to_string(token) + ") is outside the step's logits [" +
                  std::to_string(rows) + ", " + std::to_string(vocab) + "]");
    auto& p = position[static_cast<std::size_t>(row)];
    if (p < 0) {
      p = static_cast<int64_t>(touched.size());
      touched.push_back(row);
    }
    at_row.push_back(p);
    row_of.push_back(row);
    tokens.push_back(token);
  }
  const auto device = logits.device();
  const auto to_index = [&](const std::vector<int64_t>& v) {
    return torch::tensor(v, torch::kLong).to(device);
  };
  const at::Tensor touched_index = to_index(touched);
  const at::Tensor token_index = to_index(tokens);
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor some = logits.index_select(0, touched_index).to(torch::kDouble);
  const at::Tensor before = some.logsumexp(1);
  some.index_put_({to_index(at_row), token_index}, -inf);
  const at::Tensor after = some.logsumexp(1);
  if (after.isinf().any().item<bool>()) throw Error("beam search: every token of a row is banned");
  logits.index_put_({to_index(row_of), token_index}, -inf);
  return torch::zeros({rows}, logits.options().dtype(torch::kDouble))
      .index_copy_(0, touched_index, before - after);
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
                       int64_t filled, at::Tensor into) {
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

// A cache entry given to the search, with each row repeated for every beam.
// A "steps/" entry holds nothing yet (no step has written a position), so
// it is allocated with the rows, not copied.
at::Tensor rows_per_beam(const std::string& name, const at::Tensor& tensor, int64_t beams) {
  if (!is_steps_entry(name)) return tensor.repeat_interleave(beams, 0);
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[0] *= beams;
  return at::empty(shape, tensor.options());
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
// from a copy made first, where index_select would copy every row into a
// second buffer.
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
  const bool indexed = reads_step_rows(cache);
  for (auto& [name, tensor] : cache) {
    if (is_per_example_entry(name) || (indexed && is_steps_entry(name))) continue;
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

// Whether rows of a cache entry can move within its own memory: a
// contiguous CPU tensor that nothing outside the cache refers to.
bool compacts_in_place(const at::Tensor& tensor) {
  return tensor.device().is_cpu() && tensor.dim() >= 1 && tensor.is_contiguous() &&
         tensor.use_count() == 1 && tensor.storage().use_count() == 1;
}

// Rows `keep` (increasing) of `tensor` moved to its first rows, in place, and
// the tensor narrowed to them. Of a "steps/" entry [rows, H, capacity, Dh]
// only the first `filled` positions of each head move.
void compact_rows(at::Tensor& tensor, const std::vector<int64_t>& keep, bool steps,
                  int64_t filled) {
  const auto element = static_cast<int64_t>(tensor.element_size());
  const int64_t row_bytes = tensor.size(0) > 0 ? tensor.numel() / tensor.size(0) * element : 0;
  const bool by_head = steps && tensor.dim() == 4 && tensor.size(2) >= filled;
  const int64_t heads = by_head ? tensor.size(1) : 1;
  const int64_t span = by_head ? filled * tensor.size(3) * element : row_bytes;
  const int64_t head_stride = by_head ? tensor.size(2) * tensor.size(3) * element : row_bytes;
  char* base = static_cast<char*>(tensor.data_ptr());
  for (std::size_t j = 0; j < keep.size(); ++j) {
    const int64_t from = keep[j];
    if (from == static_cast<int64_t>(j)) continue;
    for (int64_t h = 0; h < heads; ++h)
      std::memmove(base + static_cast<int64_t>(j) * row_bytes + h * head_stride,
                   base + from * row_bytes + h * head_stride, static_cast<std::size_t>(span));
  }
  tensor = tensor.narrow(0, 0, static_cast<int64_t>(keep.size()));
}

// Keeps examples `examples` (rows `rows` of the per-beam entries): examples
// that are done leave the batch. An entry only the cache holds moves its rows
// in place (an entry of the caller's is copied the first time, and is the
// cache's own from then on).
void keep_rows(Cache& cache, const at::Tensor& examples, const at::Tensor& rows, int64_t filled) {
  std::vector<int64_t> host_examples, host_rows;  // on the host, when an entry needs them
  const bool indexed = reads_step_rows(cache);
  for (auto& [name, tensor] : cache) {
    if (indexed && is_steps_entry(name)) continue;  // its rows stay; "step_rows" moves
    const bool per_example = is_per_example_entry(name);
    if (compacts_in_place(tensor)) {
      std::vector<int64_t>& keep = per_example ? host_examples : host_rows;
      if (keep.empty()) keep = host_indices(per_example ? examples : rows);
      compact_rows(tensor, keep, is_steps_entry(name), filled);
    } else {
      tensor =
          per_example ? tensor.index_select(0, examples) : select_rows(name, tensor, rows, filled);
    }
  }
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

}  // namespace garden::nlp::beam
