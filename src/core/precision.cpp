#include "garden/core/precision.h"

#include <ATen/autocast_mode.h>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/base/torch_features.h"
#include "garden/kernels/autocast.h"

namespace garden {

// LibTorch 2.4 replaced the per-device autocast setters with ones taking the
// device type (torch_features.h).
namespace {
void set_autocast(bool cuda, bool enabled, at::ScalarType dtype) {
#if GARDEN_HAS_DEVICE_TYPE_AUTOCAST
  const auto type = cuda ? at::kCUDA : at::kCPU;
  at::autocast::set_autocast_dtype(type, dtype);
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}
}  // namespace


AutocastGuard::AutocastGuard(const std::optional<std::string>& dtype, const c10::Device& device) {
  if (!dtype || *dtype == "float32") return;
  cuda_ = device.is_cuda();
  at::ScalarType type = at::kBFloat16;
  if (*dtype == "float16") {
    if (!cuda_) {
      // CPU autocast in LibTorch 1.13 supports bfloat16 only.
      static bool warned = false;
      if (!warned) log_warning() << "float16 autocast needs a CUDA device; computing in float32";
      warned = true;
      return;
    }
    type = at::kHalf;
  } else if (*dtype != "bfloat16") {
    throw Error("mixed_precision_dtype '" + *dtype + "' is not one of float32, bfloat16, float16");
  }
  previous_enabled_ = kernels::autocast_on(c10::Device(cuda_ ? c10::kCUDA : c10::kCPU));
  set_autocast(cuda_, true, type);
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  set_autocast(cuda_, previous_enabled_, cuda_ ? at::kHalf : at::kBFloat16);
  if (!previous_enabled_) at::autocast::clear_cache();
}

}  // namespace garden
