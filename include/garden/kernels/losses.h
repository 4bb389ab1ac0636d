// Token-level cross-entropy with label smoothing for sequence models, after
// Model Garden's padded_cross_entropy_loss (official/legacy/transformer/
// metrics.py), as used by official/nlp/tasks/translation.py.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace garden::kernels {

struct PaddedCrossEntropy {
  at::Tensor token_losses;  // [batch, length], 0 at padding (Model Garden's xentropy * weights)
  at::Tensor weights;       // [batch, length], 1 for real labels, 0 for pad_id
  at::Tensor loss_sum;      // scalar: token_losses.sum()
  at::Tensor weight_sum;    // scalar: weights.sum()
  // What the translation task minimizes: loss_sum / weight_sum.
  at::Tensor mean() const;
};

// logits [batch, length, vocab] (any float dtype; the result has the same
// dtype, except bfloat16 on the CPU, which is computed and returned in
// float32 by the fused kernel; its gradient is bfloat16), labels [batch, length] integer ids. The
// soft target puts confidence = 1 - smoothing on the label and smoothing / (vocab - 1) on every
// other id; the cross-entropy against it has the soft target's own entropy
// subtracted, so a perfect prediction costs 0 for any smoothing. Positions
// whose label is pad_id get weight 0. Differentiable with respect to logits
// (once: the loss is one autograd node, the fused kernel on the CPU and
// smoothed_cross_entropy_rows elsewhere, whose backward is not itself
// differentiable).
// Unlike Model Garden, logits and labels must already have the same length
// (it pads the shorter one).
PaddedCrossEntropy padded_cross_entropy_loss(const at::Tensor& logits, const at::Tensor& labels,
                                             double smoothing, int64_t pad_id = 0);

// -sum_v target_v * log p_v for each row of logits [N, V] (ids [N] long),
// the target being `confidence` at the id and `low_confidence` elsewhere,
// from LibTorch's operations on any device: what padded_cross_entropy_loss
// uses where its CPU kernel does not apply (CUDA, half). Differentiable
// once.
at::Tensor smoothed_cross_entropy_rows(const at::Tensor& logits, const at::Tensor& ids,
                                       double confidence, double low_confidence);

// -log softmax(logits)[id] for each row of logits [N, V] (ids [N], integer,
// in [0, V)): the cross-entropy of sparse labels, as at::cross_entropy_loss
// without reduction gives it (Keras's sparse_categorical_crossentropy from
// logits). On the CPU in float32 or float64 (bfloat16 widened to float32,
// its gradient returned in bfloat16) it is the fused kernel of
// padded_cross_entropy_loss, without smoothing: two passes over each row
// forward and one in place backward, where LibTorch's log_softmax, its
// backward and the gather take six. Elsewhere LibTorch's operations, which check
// the ids on the device (no host read per step). An id outside [0, V) is an
// Error naming the range (LibTorch's own error off the fused kernel).
// Differentiable once.
at::Tensor sparse_cross_entropy_rows(const at::Tensor& logits, const at::Tensor& ids);

}  // namespace garden::kernels
