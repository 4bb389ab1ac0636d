#include "garden/data/example.h"

#include "garden/base/encoding.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "garden/example.pb.h"

namespace garden::data {

namespace {

using Kind = FeatureValue::Kind;

// Returns false for anything but padded standard base64.

// JSON strings must be UTF-8 (nlohmann refuses to dump anything else).
bool valid_utf8(const std::string& s) {
  return unicode::invalid_utf8_offset(s) == std::string_view::npos;
}

// The shortest decimal that reads back as the same float, as a double: 0.1f is written
// 0.1, not 0.10000000149011612.
double float_for_json(float value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::strtod(std::string(buffer, result.ptr).c_str(), nullptr);
}

[[noreturn]] void json_fail(const std::string& name, const std::string& what) {
  throw DataError("tf.Example JSON: feature '" + name + "': " + what);
}

FeatureValue typed_from_json(const std::string& name, const std::string& key,
                             const nlohmann::json& values) {
  if (!values.is_array()) json_fail(name, "\"" + key + "\" must map to a list");
  FeatureValue out;
  if (key == "int64") {
    out.kind = Kind::kInt64;
    for (const auto& v : values) {
      if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
        out.ints.push_back(v.get<int64_t>());
      } else if (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
                 std::abs(v.get<double>()) < 9.2e18) {
        out.ints.push_back(static_cast<int64_t>(v.get<double>()));
      } else {
        json_fail(name, "int64 value " + v.dump() + " is not an integer in int64 range");
      }
    }
  } else if (key == "float") {
    out.kind = Kind::kFloat;
    for (const auto& v : values) {
      if (v.is_number()) {
        out.floats.push_back(static_cast<float>(v.get<double>()));
      } else if (v == "nan") {
        out.floats.push_back(std::numeric_limits<float>::quiet_NaN());
      } else if (v == "inf" || v == "-inf") {
        const float inf = std::numeric_limits<float>::infinity();
        out.floats.push_back(v == "inf" ? inf : -inf);
      } else {
        json_fail(name,
                  "float value " + v.dump() + " is not a number, \"nan\", \"inf\" or \"-inf\"");
      }
    }
  } else if (key == "bytes" || key == "base64") {
    out.kind = Kind::kBytes;
    for (const auto& v : values) {
      if (!v.is_string()) json_fail(name, key + " value " + v.dump() + " is not a string");
      if (key == "bytes") {
        out.bytes.push_back(v.get<std::string>());
      } else {
        std::string decoded;
        if (!base64_decode(v.get<std::string>(), decoded)) {
          json_fail(name, "base64 value " + v.dump() + " is not valid base64");
        }
        out.bytes.push_back(std::move(decoded));
      }
    }
  } else {
    json_fail(name, "unknown kind \"" + key + "\" (expected int64, float, bytes or base64)");
  }
  return out;
}

FeatureValue feature_from_json(const std::string& name, const nlohmann::json& value) {
  if (value.is_object()) {
    if (value.size() != 1) {
      json_fail(name, "an object must have exactly one key: int64, float, bytes or base64");
    }
    return typed_from_json(name, value.begin().key(), value.begin().value());
  }
  if (!value.is_array()) {
    json_fail(name, "expected a list of values or {\"kind\": [values]}, got " + value.dump());
  }
  if (value.empty()) {
    json_fail(name,
              "an empty list has no kind: write {\"int64\": []}, {\"float\": []} or "
              "{\"bytes\": []}");
  }
  bool all_strings = true, all_numbers = true, all_integers = true;
  for (const auto& v : value) {
    all_strings = all_strings && v.is_string();
    all_numbers = all_numbers && v.is_number();
    all_integers = all_integers && v.is_number_integer();
  }
  if (all_strings) return typed_from_json(name, "bytes", value);
  if (!all_numbers) json_fail(name, "a list must hold only numbers or only strings");
  return typed_from_json(name, all_integers ? "int64" : "float", value);
}

}  // namespace

// ---- FeatureValue

FeatureValue FeatureValue::of_bytes(std::vector<std::string> values) {
  FeatureValue v;
  v.kind = Kind::kBytes;
  v.bytes = std::move(values);
  return v;
}

FeatureValue FeatureValue::of_floats(std::vector<float> values) {
  FeatureValue v;
  v.kind = Kind::kFloat;
  v.floats = std::move(values);
  return v;
}

FeatureValue FeatureValue::of_ints(std::vector<int64_t> values) {
  FeatureValue v;
  v.kind = Kind::kInt64;
  v.ints = std::move(values);
  return v;
}

size_t FeatureValue::size() const {
  switch (kind) {
    case Kind::kBytes:
      return bytes.size();
    case Kind::kFloat:
      return floats.size();
    case Kind::kInt64:
      return ints.size();
  }
  return 0;
}

bool FeatureValue::operator==(const FeatureValue& other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case Kind::kBytes:
      return bytes == other.bytes;
    case Kind::kFloat:
      // Bitwise, so that NaN equals NaN and a round trip can be checked with ==.
      // (memcmp must not see the null data() of an empty vector.)
      return floats.size() == other.floats.size() &&
             (floats.empty() ||
              std::memcmp(floats.data(), other.floats.data(), floats.size() * sizeof(float)) == 0);
    case Kind::kInt64:
      return ints == other.ints;
  }
  return false;
}

const char* kind_name(FeatureValue::Kind kind) {
  switch (kind) {
    case Kind::kBytes:
      return "bytes_list";
    case Kind::kFloat:
      return "float_list";
    case Kind::kInt64:
      return "int64_list";
  }
  return "?";
}

// ---- protobuf

Example parse_example(std::string_view serialized) {
  tf::Example proto;
  if (serialized.size() > static_cast<size_t>(INT_MAX) ||
      !proto.ParseFromArray(serialized.data(), static_cast<int>(serialized.size()))) {
    throw DataError("not a valid tf.Example (" + std::to_string(serialized.size()) + " bytes)");
  }
  Example example;
  for (const auto& [name, feature] : proto.features().feature()) {
    switch (feature.kind_case()) {
      case tf::Feature::kBytesList: {
        const auto& list = feature.bytes_list().value();
        example[name] = FeatureValue::of_bytes({list.begin(), list.end()});
        break;
      }
      case tf::Feature::kFloatList: {
        const auto& list = feature.float_list().value();
        example[name] = FeatureValue::of_floats({list.begin(), list.end()});
        break;
      }
      case tf::Feature::kInt64List: {
        const auto& list = feature.int64_list().value();
        example[name] = FeatureValue::of_ints({list.begin(), list.end()});
        break;
      }
      case tf::Feature::KIND_NOT_SET:
        break;
    }
  }
  return example;
}

std::string serialize_example(const Example& example) {
  tf::Example proto;
  auto& features = *proto.mutable_features()->mutable_feature();
  for (const auto& [name, value] : example) {
    tf::Feature& feature = features[name];
    switch (value.kind) {
      case Kind::kBytes:
        feature.mutable_bytes_list()->mutable_value()->Add(value.bytes.begin(), value.bytes.end());
        break;
      case Kind::kFloat:
        feature.mutable_float_list()->mutable_value()->Add(value.floats.begin(),
                                                           value.floats.end());
        break;
      case Kind::kInt64:
        feature.mutable_int64_list()->mutable_value()->Add(value.ints.begin(), value.ints.end());
        break;
    }
  }
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // map entries sorted by key
    proto.SerializeToCodedStream(&coded);
  }
  return out;
}

// ---- JSON

nlohmann::json example_to_json(const Example& example) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : example) {
    nlohmann::json list = nlohmann::json::array();
    bool typed = value.size() == 0;  // an empty list needs its kind spelled out
    std::string key;
    switch (value.kind) {
      case Kind::kInt64:
        key = "int64";
        for (int64_t v : value.ints) list.push_back(v);
        break;
      case Kind::kFloat:
        key = "float";
        for (float v : value.floats) {
          if (std::isnan(v)) {
            list.push_back("nan");
            typed = true;
          } else if (std::isinf(v)) {
            list.push_back(v > 0 ? "inf" : "-inf");
            typed = true;
          } else {
            list.push_back(float_for_json(v));  // a JSON float even when whole: 3.0
          }
        }
        break;
      case Kind::kBytes: {
        bool utf8 = true;
        for (const auto& v : value.bytes) utf8 = utf8 && valid_utf8(v);
        key = utf8 ? "bytes" : "base64";
        typed = typed || !utf8;
        for (const auto& v : value.bytes) list.push_back(utf8 ? v : base64_encode(v));
        break;
      }
    }
    out[name] = typed ? nlohmann::json{{key, std::move(list)}} : std::move(list);
  }
  return out;
}

Example example_from_json(const nlohmann::json& json) {
  if (!json.is_object()) {
    throw DataError("tf.Example JSON must be an object {\"feature\": [values], ...}, got " +
                    std::string(json.type_name()));
  }
  Example example;
  for (const auto& [name, value] : json.items()) example[name] = feature_from_json(name, value);
  return example;
}

}  // namespace garden::data
