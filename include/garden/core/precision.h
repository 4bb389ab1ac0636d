// Mixed precision: runtime.mixed_precision_dtype = bfloat16 runs the forward
// pass under LibTorch's autocast (CPU: bfloat16 matmuls and convolutions).
#pragma once

#include <optional>
#include <string>

#include <c10/core/Device.h>

namespace garden {

// Enables autocast for `dtype` ("bfloat16" or "float16") on `device` while
// alive; does nothing for null or "float32". Restores the previous state.
class AutocastGuard {
 public:
  AutocastGuard(const std::optional<std::string>& dtype, const c10::Device& device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  bool active() const { return active_; }

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool previous_enabled_ = false;
};

}  // namespace garden
