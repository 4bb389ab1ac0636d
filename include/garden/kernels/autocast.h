// Whether LibTorch's autocast is on: the kernels' float32 paths step aside
// for it.
#pragma once

#include <c10/core/Device.h>

namespace garden::kernels {

// Whether autocast is on for `device`'s type (CPU or CUDA) in this thread.
bool autocast_on(const c10::Device& device);

}  // namespace garden::kernels
