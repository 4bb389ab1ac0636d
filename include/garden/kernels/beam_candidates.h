// Beam search's candidates from a decoding step's logits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace garden::kernels {

// For logits [n * beams, V] and the beams' scores alive [n, beams], the best
// k over each example's (b, v) of log_softmax(logits[e * beams + b])[v] +
// alive[e][b], as {scores [n, k] (double, best first), indices b * V + v
// [n, k] (long)}; ties go to the lower index. On the CPU in float32: three
// passes over each row, each exponential in float summed in double, the
// [n * beams, V] log-probabilities never written; the scores are within
// 1e-6 of LibTorch's log-softmax in double (float32's, Model Garden's, is
// about as close). Otherwise, or with a NaN or infinite logit, LibTorch's
// log_softmax in double and topk.
std::pair<at::Tensor, at::Tensor> top_log_prob_extensions(const at::Tensor& logits,
                                                          const at::Tensor& alive, int64_t k);

}  // namespace garden::kernels
