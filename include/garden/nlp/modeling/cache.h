// The decoding cache that the Transformer fills and beam search reorders.
#pragma once

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace garden::nlp {

// Named tensors, each with the batch (batch × beam, flattened) on dim 0, so
// that beam search can reorder every entry with index_select(0, rows).
//
// Two name prefixes let the search do less; any other entry is reordered
// with its beams after every step:
//  - "per_example/": what every beam of an example shares (the encoder's
//    keys, values and padding mask), with one row per example, not per beam:
//    the search never repeats or reorders them, and selects their rows only
//    when finished examples leave the batch. A model reading them alongside
//    rows of the flattened batch [examples * beams] finds the beam count as
//    rows / examples (row e * beams + k is beam k of example e).
//  - "steps/": a buffer preallocated along dim 2 (time) whose first step + 1
//    positions hold what decoding steps 0..step wrote (step `step` writes
//    position `step`). The search reorders only those positions, into a
//    second buffer it keeps, so nothing grows or is reallocated per step.
//  - "step_rows": int64 [rows, capacity], only in a cache whose model reads
//    its "steps/" entries through it (Seq2SeqTransformer::init_cache with
//    step_rows on; translate_ids asks for it on the CPU).
//    Position s of row r is then at position s of buffer row step_rows[r][s]
//    of every "steps/" entry, and the step `step` writes row
//    step_rows[r][step]. The "steps/" entries keep the rows they were made
//    with. Garden's beam search on the CPU keeps this index instead of moving
//    keys and values: a beam that extends another copies that beam's
//    indices, and every row writes its own buffer row, so nothing of the
//    "steps/" entries is copied when beams reorder or examples leave. Greedy
//    decoding keeps each row's own indices, and moves them with the row when
//    rows leave. Beam search with its state in tensors (a GPU's) removes the
//    entry, and the model then reads row r at row r; a search that moves
//    rows with index_select must remove it too.
using Cache = std::map<std::string, at::Tensor>;

inline constexpr char kPerExampleEntry[] = "per_example/";
inline constexpr char kStepsEntry[] = "steps/";
inline constexpr char kStepRowsEntry[] = "step_rows";

inline bool is_per_example_entry(const std::string& name) {
  return name.rfind(kPerExampleEntry, 0) == 0;
}
inline bool is_steps_entry(const std::string& name) { return name.rfind(kStepsEntry, 0) == 0; }

}  // namespace garden::nlp
