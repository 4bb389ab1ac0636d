// An embedding lookup whose gradient is sparse.
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

// weight [V, D]'s rows at ids, as at::embedding without a padding id. On the
// CPU its gradient is sparse (the rows looked up, one a token): autograd adds
// it in place into the weight's dense gradient from a tied output projection
// (kernels::linear with the same weight), where at::embedding's dense
// gradient costs a zero-filled [V, D] and a [V, D] sum for each lookup. In a
// backward that reaches the weight through such lookups only, .grad is left
// sparse: the Minimizer and the optimizer make it dense
// (optim::Optimizer::make_gradients_dense).
at::Tensor embedding_rows(const at::Tensor& weight, const at::Tensor& ids);

}  // namespace garden::kernels
