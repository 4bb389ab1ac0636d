#include "garden/base/initializers.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

namespace garden {

void truncated_normal_(at::Tensor weight, double stddev) {
  torch::NoGradGuard no_grad;
  weight.normal_(0.0, stddev);
  // Redraw only what fell outside: ~4.6% per round, so a few rounds suffice.
  // Each round's count is a host sync; this runs at construction, not per step.
  for (;;) {
    at::Tensor outside = weight.abs() > 2.0 * stddev;
    const int64_t n = outside.sum().item<int64_t>();
    if (n == 0) break;
    weight.masked_scatter_(outside, at::empty({n}, weight.options()).normal_(0.0, stddev));
  }
}

}  // namespace garden
