#include "garden/core/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace garden {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian bytes; this writer copies memory as it is");

namespace {

const std::vector<std::pair<const char*, at::ScalarType>>& dtypes() {
  static const std::vector<std::pair<const char*, at::ScalarType>> table = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool}};
  return table;
}

void append_le64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      throw Error(path + ": tensor name '" + name + "' is " +
                  (name == "__metadata__" ? "reserved" : "given twice"));
    const auto it = std::find_if(
        dtypes().begin(), dtypes().end(),
        [dtype = tensor.scalar_type()](const auto& entry) { return entry.second == dtype; });
    if (it == dtypes().end())
      throw Error(path + ": tensor '" + name + "' has dtype " +
                  std::string(c10::toString(tensor.scalar_type())) +
                  ", which safetensors does not store");
    at::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {{"dtype", it->first},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out;
  out.reserve(8 + text.size() + offset);
  append_le64(out, text.size());
  out += text;
  for (const at::Tensor& tensor : data)
    out.append(static_cast<const char*>(tensor.data_ptr()),
               static_cast<std::size_t>(tensor.numel()) * tensor.element_size());
  write_file_atomically(path, out);
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read safetensors file '" + path + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto bad = [&](const std::string& why) { return Error(path + ": " + why); };
  if (bytes.size() < 8)
    throw bad("only " + std::to_string(bytes.size()) + " bytes; not a safetensors file");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i)
    header_size =
        (header_size << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (header_size > bytes.size() - 8)
    throw bad("the header claims " + std::to_string(header_size) + " bytes; the file has " +
              std::to_string(bytes.size() - 8) + " after the length");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, header_size));
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("the header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw bad("the header is not a JSON object");
  const std::size_t data_start = 8 + header_size;
  const uint64_t data_size = bytes.size() - data_start;
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw bad("__metadata__ is not an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) throw bad("__metadata__ '" + key + "' is not a string");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const auto where = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      throw bad(where + " needs dtype, shape and data_offsets [begin, end]");
    const std::string dtype = entry["dtype"].get<std::string>();
    const auto it = std::find_if(dtypes().begin(), dtypes().end(),
                                 [&](const auto& e) { return dtype == e.first; });
    if (it == dtypes().end())
      throw bad(where + " has dtype '" + dtype + "', which Garden does not read");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const auto& size : entry["shape"]) {
      if (!size.is_number_unsigned()) throw bad(where + " has a shape entry that is not a size");
      const uint64_t n = size.get<uint64_t>();
      if (n > (uint64_t{1} << 40) || (n && numel > (uint64_t{1} << 40) / n))
        throw bad(where + " has a shape too large for the file");
      numel *= n;
      shape.push_back(static_cast<int64_t>(n));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw bad(where + " has data_offsets that are not byte positions");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const uint64_t element = c10::elementSize(it->second);
    if (begin > end || end > data_size)
      throw bad(where + " has bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") outside the " + std::to_string(data_size) + " data bytes");
    if (end - begin != numel * element)
      throw bad(where + " has " + std::to_string(end - begin) + " bytes for " +
                std::to_string(numel) + " elements of " + dtype);
    at::Tensor tensor = torch::empty(shape, torch::TensorOptions().dtype(it->second));
    if (end > begin) std::memcpy(tensor.data_ptr(), bytes.data() + data_start + begin, end - begin);
    file.tensors[name] = tensor;
    ranges.emplace_back(begin, end);
  }
  // The tensors cover the data exactly: no overlap, no hole.
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered)
      throw bad(begin < covered ? "two tensors share bytes at " + std::to_string(begin)
                                : "bytes [" + std::to_string(covered) + ", " +
                                      std::to_string(begin) + ") belong to no tensor");
    covered = end;
  }
  if (covered != data_size)
    throw bad("bytes [" + std::to_string(covered) + ", " + std::to_string(data_size) +
              ") belong to no tensor");
  return file;
}

}  // namespace garden
