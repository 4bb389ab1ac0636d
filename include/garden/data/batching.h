// How examples become batches: stacking, padding, and Model Garden's
// translation batching (official/nlp/data/wmt_dataloader.py).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "garden/base/types.h"

namespace garden::data {

enum class BatchMode {
  kFixed,           // stack examples of equal shapes
  kPadded,          // pad each tensor to the longest in the batch
  kBucketByLength,  // wmt_dataloader's _batch_examples: token-budget batches per length bucket
  kStatic,          // wmt_dataloader's static_batch: pad to max_length, fixed batch size
};

struct BatchingOptions {
  BatchMode mode = BatchMode::kFixed;
  // Pad value per tensor name for kPadded/kBucketByLength/kStatic; 0 if absent.
  std::map<std::string, double> pad_values;
  // kBucketByLength / kStatic: an example's length is the max of dim 0 over
  // these tensors; training drops examples longer than max_length, evaluation
  // truncates them to max_length - 1 tokens plus eos_id (wmt_dataloader's
  // _filter_max_length and _maybe_truncate).
  int64_t max_length = 64;
  std::vector<std::string> length_keys = {"inputs", "targets"};
  int64_t eos_id = 1;
  int64_t min_boundary = 8;
  double boundary_scale = 1.1;
};

// Length buckets: example of length L goes to the bucket b with
// min[b] <= L < max[b]; batch_size[b] = token_budget / max[b].
struct LengthBuckets {
  std::vector<int64_t> min, max, batch_size;
  // The bucket of `length`, or -1 if longer than every bucket.
  int64_t bucket_of(int64_t length) const;
};

// wmt_dataloader's _create_min_max_boundaries and bucket_batch_sizes: the
// boundaries start at min_boundary and grow by max(x + 1, int(x * scale))
// while below max_length; the last bucket ends at max_length + 1. Throws
// garden::Error when some bucket's batch size would be 0.
LengthBuckets make_length_buckets(int64_t token_budget, int64_t max_length,
                                  int64_t min_boundary = 8, double boundary_scale = 1.1);

// Stacks the examples into one batch (every tensor gains a leading batch
// dimension). With `pad`, each tensor is padded at the end of every dimension
// to the largest size in the batch (or to `pad_to` for dim 0 when > 0) using
// pad_values; without it, shapes must agree (error naming the tensor).
Batch collate(const std::vector<Batch>& examples, bool pad,
              const std::map<std::string, double>& pad_values = {}, int64_t pad_to = 0);

}  // namespace garden::data
