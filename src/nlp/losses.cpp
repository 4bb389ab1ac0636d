#include "garden/nlp/losses.h"

#include <torch/torch.h>

#include <cmath>

#include "garden/core/error.h"

namespace garden::nlp {

at::Tensor PaddedCrossEntropy::mean() const { return loss_sum / weight_sum; }

PaddedCrossEntropy padded_cross_entropy_loss(const at::Tensor& logits, const at::Tensor& labels,
                                             double smoothing, int64_t pad_id) {
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) ||
      logits.size(1) != labels.size(1)) {
    throw Error(
        "padded_cross_entropy_loss: expected logits [batch, length, vocab] and labels "
        "[batch, length]");
  }
  const int64_t vocab = logits.size(2);
  if (vocab < 2 || smoothing < 0.0 || smoothing >= 1.0) {
    throw Error("padded_cross_entropy_loss: needs vocab >= 2 and 0 <= smoothing < 1");
  }
  const double confidence = 1.0 - smoothing;
  const double low_confidence = smoothing / static_cast<double>(vocab - 1);

  // -sum_v target_v * log p_v with target = low everywhere plus
  // (confidence - low) at the label, without building the one-hot targets.
  const at::Tensor log_probs = torch::log_softmax(logits, -1);
  const at::Tensor label_ids = labels.to(torch::kLong);
  const at::Tensor label_log_probs = log_probs.gather(2, label_ids.unsqueeze(2)).squeeze(2);
  at::Tensor xentropy = -(confidence - low_confidence) * label_log_probs;
  if (low_confidence > 0.0) xentropy = xentropy - low_confidence * log_probs.sum(-1);

  // The soft target's entropy, the best achievable cross-entropy; the 1e-20
  // keeps log finite when smoothing is 0 (then the term is 0 * log(1e-20)).
  const double normalizing_constant =
      -(confidence * std::log(confidence) +
        static_cast<double>(vocab - 1) * low_confidence * std::log(low_confidence + 1e-20));
  xentropy = xentropy - normalizing_constant;

  PaddedCrossEntropy result;
  result.weights = label_ids.ne(pad_id).to(logits.scalar_type());
  result.token_losses = xentropy * result.weights;
  result.loss_sum = result.token_losses.sum();
  result.weight_sum = result.weights.sum();
  return result;
}

}  // namespace garden::nlp
