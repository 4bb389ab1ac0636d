#include "garden/core/minimizer.h"

#include <torch/torch.h>

namespace garden {

void Minimizer::minimize(const Losses& losses) {
  at::Tensor total;
  if (count_reducer_) {
    std::vector<at::Tensor> counts;
    for (const auto& part : losses.parts()) counts.push_back(part.count);
    total = losses.total_for(count_reducer_(counts));
  } else {
    total = losses.total();
  }
  optimizer_.zero_grad();
  optimizer_.scale_loss(total).backward();
  if (!hooks_.empty()) {
    std::vector<at::Tensor> gradients;
    for (const auto& parameter : optimizer_.parameters())
      gradients.push_back(parameter.tensor.mutable_grad());
    for (auto& hook : hooks_) hook(gradients);
    // A hook may have replaced a gradient rather than changed it in place.
    const auto& parameters = optimizer_.parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (!gradients[i].is_same(parameters[i].tensor.grad()))
        parameters[i].tensor.mutable_grad() = gradients[i];
  }
  optimizer_.step();
}

}  // namespace garden
