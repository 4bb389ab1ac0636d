// Independent readers and writers of the formats Garden writes (TFRecord
// framing with a bitwise CRC-32C, the protobuf wire format), for tests that
// check the library's files without using the library's own code.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace garden_test::reference {

// Bitwise CRC-32C, the slowest and most obvious form, sharing nothing with the library's
// table-driven and SSE4.2 paths.
inline uint32_t ref_crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

inline uint32_t ref_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

inline void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

inline uint64_t read_le(std::string_view in, size_t pos, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(in[pos + i]);
  }
  return value;
}

inline std::string ref_encode_record(std::string_view data) {
  std::string out;
  append_le(out, data.size(), 8);
  append_le(out, ref_mask(ref_crc32c(out)), 4);
  out.append(data);
  append_le(out, ref_mask(ref_crc32c(data)), 4);
  return out;
}

// `n` bytes drawn from a fixed seed: test input that exercises every byte value.
inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xFF);
  return out;
}

// ---- TFRecord files

inline std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  for (size_t pos = 0; pos < file.size();) {
    if (file.size() - pos < 12) throw std::runtime_error("truncated header");
    const uint64_t length = read_le(file, pos, 8);
    if (read_le(file, pos + 8, 4) != ref_mask(ref_crc32c(file.substr(pos, 8)))) {
      throw std::runtime_error("bad length CRC");
    }
    if (file.size() - pos - 12 < length + 4) throw std::runtime_error("truncated record");
    std::string data = file.substr(pos + 12, length);
    if (read_le(file, pos + 12 + length, 4) != ref_mask(ref_crc32c(data))) {
      throw std::runtime_error("bad data CRC");
    }
    records.push_back(std::move(data));
    pos += 12 + length + 4;
  }
  return records;
}

// ---- protobuf wire format

constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

struct Field {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t scalar = 0;  // varint value, or the raw bits of a fixed32/fixed64
  std::string bytes;    // payload of a length-delimited field
};
using Message = std::vector<Field>;

inline uint64_t decode_varint(std::string_view in, size_t& pos) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= in.size()) throw std::runtime_error("truncated varint");
    const auto byte = static_cast<unsigned char>(in[pos++]);
    value |= uint64_t{byte & 0x7Fu} << shift;
    if ((byte & 0x80) == 0) return value;
  }
  throw std::runtime_error("varint longer than 10 bytes");
}

inline Message decode(std::string_view in) {
  Message message;
  for (size_t pos = 0; pos < in.size();) {
    const uint64_t key = decode_varint(in, pos);
    Field field;
    field.number = static_cast<uint32_t>(key >> 3);
    field.wire_type = static_cast<int>(key & 7);
    switch (field.wire_type) {
      case kVarint:
        field.scalar = decode_varint(in, pos);
        break;
      case kFixed64:
      case kFixed32: {
        const size_t size = field.wire_type == kFixed64 ? 8 : 4;
        if (in.size() - pos < size) throw std::runtime_error("truncated fixed field");
        field.scalar = read_le(in, pos, static_cast<int>(size));
        pos += size;
        break;
      }
      case kLengthDelimited: {
        const uint64_t size = decode_varint(in, pos);
        if (in.size() - pos < size) throw std::runtime_error("truncated length-delimited field");
        field.bytes = std::string(in.substr(pos, size));
        pos += size;
        break;
      }
      default:
        throw std::runtime_error("unexpected wire type " + std::to_string(field.wire_type));
    }
    message.push_back(std::move(field));
  }
  return message;
}

inline std::vector<const Field*> all(const Message& message, uint32_t number) {
  std::vector<const Field*> found;
  for (const Field& f : message) {
    if (f.number == number) found.push_back(&f);
  }
  return found;
}

inline bool has(const Message& message, uint32_t number) { return !all(message, number).empty(); }

// The one occurrence of a field, which must have the given wire type.
inline const Field& only(const Message& message, uint32_t number, int wire_type) {
  const auto found = all(message, number);
  if (found.size() != 1) {
    throw std::runtime_error("field " + std::to_string(number) + " occurs " +
                             std::to_string(found.size()) + " times");
  }
  if (found[0]->wire_type != wire_type) {
    throw std::runtime_error("field " + std::to_string(number) + " has wire type " +
                             std::to_string(found[0]->wire_type));
  }
  return *found[0];
}

inline double as_double(const Field& f) {
  double d;
  std::memcpy(&d, &f.scalar, sizeof d);
  return d;
}

inline float as_float(const Field& f) {
  const auto bits = static_cast<uint32_t>(f.scalar);
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// ---- protobuf wire format, encoding by hand

inline void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

inline void append_tag(std::string& out, uint32_t number, int wire_type) {
  append_varint(out, (uint64_t{number} << 3) | static_cast<uint64_t>(wire_type));
}

inline void append_length_delimited(std::string& out, uint32_t number, std::string_view bytes) {
  append_tag(out, number, kLengthDelimited);
  append_varint(out, bytes.size());
  out.append(bytes);
}

inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// ---- tf.Example by hand (TensorFlow's feature.proto / example.proto field numbers):
// Example{Features features = 1}, Features{map<string, Feature> feature = 1} (each entry
// a message {key = 1, value = 2}), Feature{bytes_list = 1, float_list = 2, int64_list = 3},
// each list {repeated value = 1}.

constexpr uint32_t kBytesListField = 1;
constexpr uint32_t kFloatListField = 2;
constexpr uint32_t kInt64ListField = 3;

inline std::string ref_bytes_list(const std::vector<std::string>& values) {
  std::string list;
  for (const auto& v : values) append_length_delimited(list, 1, v);
  return list;
}

// Packed: one length-delimited field of varints; unpacked: one varint field per value.
inline std::string ref_int64_list(const std::vector<int64_t>& values, bool packed) {
  std::string list;
  if (packed) {
    std::string payload;
    for (int64_t v : values) append_varint(payload, static_cast<uint64_t>(v));
    append_length_delimited(list, 1, payload);
  } else {
    for (int64_t v : values) {
      append_tag(list, 1, kVarint);
      append_varint(list, static_cast<uint64_t>(v));
    }
  }
  return list;
}

inline std::string ref_float_list(const std::vector<float>& values, bool packed) {
  std::string list;
  if (packed) {
    std::string payload;
    for (float v : values) append_le(payload, float_bits(v), 4);
    append_length_delimited(list, 1, payload);
  } else {
    for (float v : values) {
      append_tag(list, 1, kFixed32);
      append_le(list, float_bits(v), 4);
    }
  }
  return list;
}

// A Feature whose oneof is `kind_field`, holding an encoded list.
inline std::string ref_feature(uint32_t kind_field, const std::string& list) {
  std::string feature;
  append_length_delimited(feature, kind_field, list);
  return feature;
}

// An Example from (name, encoded Feature) pairs, in the given order.
inline std::string ref_example(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string map_entries;
  for (const auto& [name, feature] : features) {
    std::string entry;
    append_length_delimited(entry, 1, name);
    append_length_delimited(entry, 2, feature);
    append_length_delimited(map_entries, 1, entry);
  }
  std::string example;
  append_length_delimited(example, 1, map_entries);
  return example;
}

// ---- tf.Example decoding by hand: name -> the values of its one list, packed or not.

struct RefFeature {
  uint32_t kind = 0;  // kBytesListField, kFloatListField or kInt64ListField
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

inline RefFeature ref_parse_feature(std::string_view encoded) {
  const Message feature = decode(encoded);
  if (feature.size() != 1 || feature[0].wire_type != kLengthDelimited)
    throw std::runtime_error("a Feature must hold exactly one list");
  RefFeature out;
  out.kind = feature[0].number;
  for (const Field& value : decode(feature[0].bytes)) {
    if (value.number != 1) throw std::runtime_error("unexpected field in a list");
    if (out.kind == kBytesListField) {
      out.bytes.push_back(value.bytes);
    } else if (out.kind == kInt64ListField) {
      if (value.wire_type == kVarint) {
        out.ints.push_back(static_cast<int64_t>(value.scalar));
      } else {
        for (size_t pos = 0; pos < value.bytes.size();)
          out.ints.push_back(static_cast<int64_t>(decode_varint(value.bytes, pos)));
      }
    } else if (out.kind == kFloatListField) {
      if (value.wire_type == kFixed32) {
        out.floats.push_back(as_float(value));
      } else {
        if (value.bytes.size() % 4 != 0) throw std::runtime_error("packed floats not 4-byte");
        for (size_t pos = 0; pos < value.bytes.size(); pos += 4) {
          Field one;
          one.scalar = read_le(value.bytes, pos, 4);
          out.floats.push_back(as_float(one));
        }
      }
    } else {
      throw std::runtime_error("unknown Feature kind " + std::to_string(out.kind));
    }
  }
  return out;
}

inline std::map<std::string, RefFeature> ref_parse_example(std::string_view serialized) {
  std::map<std::string, RefFeature> features;
  const Message example = decode(serialized);
  for (const Field* entries : all(example, 1)) {
    const Message map = decode(entries->bytes);
    for (const Field* entry : all(map, 1)) {
      const Message pair = decode(entry->bytes);
      const std::string name = only(pair, 1, kLengthDelimited).bytes;
      features[name] = ref_parse_feature(only(pair, 2, kLengthDelimited).bytes);
    }
  }
  return features;
}

}  // namespace garden_test::reference
