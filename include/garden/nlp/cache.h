// The decoding cache that the Transformer fills and beam search reorders.
#pragma once

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace garden::nlp {

// Named tensors, each with the batch (batch × beam, flattened) on dim 0, so
// that beam search can reorder every entry with index_select(0, rows).
using Cache = std::map<std::string, at::Tensor>;

}  // namespace garden::nlp
