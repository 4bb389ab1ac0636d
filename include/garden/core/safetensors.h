// Hugging Face's safetensors format, which Python users load with their own
// tools (`safetensors.torch.load_file`): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// padded with spaces to 8 bytes, then the tensors' bytes (C order, little
// endian), with no holes.
//
//   write_safetensors("model.safetensors", {{"dense.weight", w}}, {{"format", "pt"}});
//   auto file = read_safetensors("model.safetensors");  // file.tensors["dense.weight"]
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace garden {

// Writes the tensors (moved to the CPU, contiguous) atomically, in the order
// given, with `metadata` as the header's "__metadata__". Dtypes: float64,
// float32, float16, bfloat16, int64, int32, int16, int8, uint8, bool. A
// duplicate name, a name "__metadata__" or another dtype throws
// garden::Error naming the tensor.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads a safetensors file whole. Anything malformed (a short file, a header
// that is not JSON or points outside the data, a size that does not match
// the shape, overlapping or missing bytes, an unknown dtype) is one
// garden::Error line naming the file and the tensor.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace garden
