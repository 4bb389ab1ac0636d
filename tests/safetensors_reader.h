// Reads a safetensors file by hand, as the format's specification describes
// it (8-byte little-endian header length, JSON header, raw bytes), so the
// tests share no code with Garden's writer.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace garden_test::safetensors {

struct Entry {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;  // the tensor's raw little-endian bytes
};

struct File {
  uint64_t header_size = 0;
  nlohmann::json header;
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> metadata;
};

inline File read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) throw std::runtime_error("short file " + path);
  File file;
  for (int i = 0; i < 8; ++i)
    file.header_size |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  file.header = nlohmann::json::parse(bytes.substr(8, file.header_size));
  const std::string data = bytes.substr(8 + file.header_size);
  for (const auto& [name, entry] : file.header.items()) {
    if (name == "__metadata__") {
      for (const auto& [key, value] : entry.items()) file.metadata[key] = value.get<std::string>();
      continue;
    }
    Entry e;
    e.dtype = entry.at("dtype").get<std::string>();
    e.shape = entry.at("shape").get<std::vector<int64_t>>();
    const auto begin = entry.at("data_offsets").at(0).get<uint64_t>();
    const auto end = entry.at("data_offsets").at(1).get<uint64_t>();
    e.bytes = data.substr(begin, end - begin);
    file.tensors[name] = e;
  }
  return file;
}

}  // namespace garden_test::safetensors
