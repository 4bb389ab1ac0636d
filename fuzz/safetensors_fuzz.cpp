// safetensors files (TensorFX's model/weights, exports) on arbitrary bytes:
// refused with one line naming the file, or read; what was read writes and
// reads back the same.
#include "fuzz_util.h"
#include "garden/core/safetensors.h"
#include "tensor_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      garden_fuzz::write_file("w.safetensors", garden_fuzz::as_view(data, size));
  garden::SafetensorsFile read;
  try {
    read = garden::read_safetensors(path);
  } catch (const garden::Error& e) {
    GARDEN_FUZZ_CHECK(std::string(e.what()).find(path) != std::string::npos);
    return 0;
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors(read.tensors.begin(), read.tensors.end());
  const std::string copy = garden_fuzz::scratch("copy.safetensors");
  garden::write_safetensors(copy, tensors, read.metadata);
  const auto again = garden::read_safetensors(copy);
  GARDEN_FUZZ_CHECK(again.metadata == read.metadata);
  garden_fuzz::check_same_tensors(read.tensors, again.tensors);
  return 0;
}
