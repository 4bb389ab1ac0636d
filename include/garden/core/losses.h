// What a Task's build_losses returns: the loss to minimize as named parts,
// each the mean of its own items (tokens, masked positions, examples) with
// their count, entering the total with a weight.
//
//   Losses losses;
//   losses.add("masked_lm_loss", lm_mean, num_masked);
//   losses.add("discriminator_loss", disc_mean, num_tokens, /*weight=*/50.0);
//   // total(): lm_mean + 50 * disc_mean; logs(): "loss" plus both parts
//
// A task with one loss adds one part named "loss" (Task::kLoss). The counts
// let the framework fold the parts over evaluation batches, gradient
// accumulation steps and workers exactly (see Minimizer and Average).
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "garden/base/types.h"

namespace garden {

class Losses {
 public:
  struct Part {
    std::string name;
    at::Tensor mean;   // scalar, differentiable: the part's loss
    at::Tensor count;  // scalar, no gradient: the items `mean` averages
    double weight = 1.0;
  };

  Losses() = default;
  // One part named "loss", averaging `count` items (a scalar tensor or, when
  // undefined, 1).
  explicit Losses(at::Tensor mean, at::Tensor count = {});

  // Adds a part. Names are unique; "loss" is the total's own name and may
  // only name the single part of a one-part loss.
  void add(const std::string& name, at::Tensor mean, at::Tensor count = {}, double weight = 1.0);
  // Adds a regularization term (Keras's model.losses) to the total: a part
  // named "aux_loss" of count 1. Does nothing for an undefined tensor.
  void add_aux(const at::Tensor& aux_losses);

  const std::vector<Part>& parts() const { return parts_; }
  bool empty() const { return parts_.empty(); }

  // sum of weight * mean over the parts: what backward() runs on, in one
  // process. Differentiable; float32 whatever autocast computed.
  at::Tensor total() const;
  // The same total with each part's mean rescaled by count / global_count:
  // the local share of the loss averaged over every worker's items, so that
  // summing the workers' gradients gives the gradient of the global mean.
  // `global_counts` has one scalar per part, in order.
  at::Tensor total_for(const std::vector<at::Tensor>& global_counts) const;

  // The step logs: "loss" as an Average of every part, and each named part
  // (other than "loss") as an Average of itself; values detached.
  Logs logs() const;

 private:
  std::vector<Part> parts_;
};

}  // namespace garden
