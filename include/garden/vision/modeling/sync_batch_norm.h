// Batch normalization over the replicas of a synchronous training (Keras'
// SyncBatchNormalization, which Model Garden's use_sync_bn selects;
// PyTorch's SyncBatchNorm): in training, each batch norm's mean and
// variance are those of every replica's batch together, so N workers with
// batches of B normalize as one process with N x B does, and the moving
// averages stay the same on every worker. Backward sums the gradient
// statistics over the replicas as well.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/batchnorm.h>

namespace garden::vision {

// The replicas a synchronized batch norm reduces over (the layer above
// implements it on its process group). Every replica calls sum() in the
// same order.
class Replicas {
 public:
  virtual ~Replicas() = default;
  // How many take part now; 1: this process alone (a plain batch norm).
  virtual int64_t count() const = 0;
  // Sums each tensor over the replicas, in place.
  virtual void sum(std::vector<at::Tensor>& tensors) const = 0;
};
using ReplicasPtr = std::shared_ptr<const Replicas>;

// `norm` applied to `x` ([B, C] or [B, C, H, W]): in training with more than
// one replica, with the statistics of every replica's batch (two sums over
// the replicas forward, one backward); otherwise norm->forward(x). The
// moving averages are updated with the combined statistics, as norm's own
// forward updates them with its batch's.
at::Tensor sync_batch_norm(torch::nn::BatchNorm2dImpl& norm, const at::Tensor& x,
                           const ReplicasPtr& replicas);
at::Tensor sync_batch_norm(torch::nn::BatchNorm1dImpl& norm, const at::Tensor& x,
                           const ReplicasPtr& replicas);

}  // namespace garden::vision
