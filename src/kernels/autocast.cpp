#include "garden/kernels/autocast.h"

#include <ATen/autocast_mode.h>

#include "garden/base/torch_features.h"

namespace garden::kernels {

// LibTorch 2.4 replaced the per-device autocast getters with ones taking the
// device type (torch_features.h).
bool autocast_on(const c10::Device& device) {
#if GARDEN_HAS_DEVICE_TYPE_AUTOCAST
  return at::autocast::is_autocast_enabled(device.is_cuda() ? at::kCUDA : at::kCPU);
#else
  return device.is_cuda() ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

}  // namespace garden::kernels
