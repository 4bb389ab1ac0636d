#include "garden/kernels/embedding.h"



#include <ATen/CPUGeneratorImpl.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace garden::kernels {

at::Tensor embedding_rows(const at::Tensor& weight, const at::Tensor& ids) {
  return at::embedding(weight, ids, /*padding_idx=*/-1, /*scale_grad_by_freq=*/false,
                       /*sparse=*/weight.device().is_cpu() && weight.requires_grad());
}

}  // namespace garden::kernels
