#include "garden/data/batching.h"

#include <torch/torch.h>

#include <algorithm>

#include "garden/base/error.h"

namespace garden::data {

int64_t LengthBuckets::bucket_of(int64_t length) const {
  for (std::size_t b = 0; b < min.size(); ++b)
    if (min[b] <= length && length < max[b]) return static_cast<int64_t>(b);
  return -1;
}

LengthBuckets make_length_buckets(int64_t token_budget, int64_t max_length, int64_t min_boundary,
                                  double boundary_scale) {
  if (max_length < 1) throw Error("max_length must be >= 1");
  if (min_boundary < 1 || boundary_scale < 1) throw Error("bad length bucket boundaries");
  std::vector<int64_t> boundaries;
  for (int64_t x = min_boundary; x < max_length;
       x = std::max(x + 1, static_cast<int64_t>(static_cast<double>(x) * boundary_scale)))
    boundaries.push_back(x);
  LengthBuckets buckets;
  buckets.min.push_back(0);
  buckets.min.insert(buckets.min.end(), boundaries.begin(), boundaries.end());
  buckets.max = boundaries;
  buckets.max.push_back(max_length + 1);
  for (int64_t upper : buckets.max) {
    buckets.batch_size.push_back(token_budget / upper);
    if (buckets.batch_size.back() < 1)
      throw Error("the token budget " + std::to_string(token_budget) +
                  " (per-replica global_batch_size) is smaller than the bucket bound " +
                  std::to_string(upper) + ", which would give an empty batch");
  }
  return buckets;
}

Batch collate(const std::vector<Batch>& examples, bool pad,
              const std::map<std::string, double>& pad_values, int64_t pad_to) {
  if (examples.empty()) throw Error("cannot batch zero examples");
  Batch batch;
  for (const auto& [name, first] : examples.front()) {
    std::vector<at::Tensor> parts;
    parts.reserve(examples.size());
    std::vector<int64_t> shape = first.sizes().vec();
    for (const auto& example : examples) {
      const auto it = example.find(name);
      if (it == example.end()) throw Error("an example in the batch has no tensor '" + name + "'");
      const at::Tensor& t = it->second;
      if (t.dim() != first.dim())
        throw Error("tensor '" + name + "' has different ranks across the batch");
      for (int64_t d = 0; d < t.dim(); ++d) {
        if (!pad && t.size(d) != shape[static_cast<std::size_t>(d)])
          throw Error("tensor '" + name +
                      "' has different shapes across the batch; use padded batching");
        shape[static_cast<std::size_t>(d)] =
            std::max(shape[static_cast<std::size_t>(d)], t.size(d));
      }
      parts.push_back(t);
    }
    if (pad && first.dim() > 0) {
      if (pad_to > 0) shape[0] = std::max(shape[0], pad_to);
      const auto value_it = pad_values.find(name);
      const double value = value_it == pad_values.end() ? 0.0 : value_it->second;
      std::vector<int64_t> full = {static_cast<int64_t>(parts.size())};
      full.insert(full.end(), shape.begin(), shape.end());
      at::Tensor out = torch::full(full, value, first.options());
      for (std::size_t i = 0; i < parts.size(); ++i) {
        at::Tensor dst = out[static_cast<int64_t>(i)];
        for (int64_t d = 0; d < parts[i].dim(); ++d) dst = dst.narrow(d, 0, parts[i].size(d));
        dst.copy_(parts[i]);
      }
      batch[name] = out;
    } else {
      batch[name] = torch::stack(parts);
    }
  }
  return batch;
}

}  // namespace garden::data
