// A model tensor with its name: optimizers, the moving average and the loss
// scaler key their state and their regexes on it.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace garden::optim {

struct NamedParameter {
  std::string name;
  at::Tensor tensor;  // a leaf that requires grad (or, for the moving average, a buffer)
};

}  // namespace garden::optim
