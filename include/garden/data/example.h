// tf.Example records (TensorFlow's example.proto / feature.proto, the payload of most
// TFRecord data files) without protobuf types in the interface, and their JSON form.
// The parse spec that turns an Example into named tensors is in
// garden/data/parse_spec.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "garden/data/tfrecord.h"  // DataError

namespace garden::data {

// One feature: a list of bytes, floats or int64s (tf.train.Feature's oneof). Only the
// vector matching `kind` is used.
struct FeatureValue {
  enum class Kind { kBytes, kFloat, kInt64 };
  Kind kind = Kind::kBytes;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;

  static FeatureValue of_bytes(std::vector<std::string> values);
  static FeatureValue of_floats(std::vector<float> values);
  static FeatureValue of_ints(std::vector<int64_t> values);
  // Number of values in the vector of `kind`.
  size_t size() const;
  bool operator==(const FeatureValue& other) const;  // compares only the vector of `kind`
  bool operator!=(const FeatureValue& other) const { return !(*this == other); }
};

// "bytes_list", "float_list" or "int64_list": the names users know from TensorFlow.
const char* kind_name(FeatureValue::Kind kind);

// A tf.Example: feature name -> values (Example.features.feature).
using Example = std::map<std::string, FeatureValue>;

// Parses a serialized tf.Example. Packed and unpacked encodings of the numeric lists
// are both accepted. A Feature with no kind set carries no values and is left out (as
// tf.io treats it as missing). Throws DataError if the bytes are not a tf.Example.
Example parse_example(std::string_view serialized);

// Serializes in TensorFlow's encoding (packed numeric lists), features in name order,
// so equal Examples give equal bytes.
std::string serialize_example(const Example& example);

// JSON form, one object per Example: {"name": [values], ...}.
//  - a list of JSON integers (no '.' or exponent) is int64_list; a list with any other
//    number is float_list; a list of strings is bytes_list.
//  - to force a kind (e.g. floats that happen to be whole, or an empty list) use an
//    object with one key: {"name": {"float": [1, 2]}}, {"int64": []}, {"bytes": ["a"]}.
//  - bytes that are not valid UTF-8 use {"base64": ["..."]} (standard alphabet, padded).
// example_to_json writes plain lists where the rule above recovers the same kind, and
// the object form otherwise (empty lists, non-UTF-8 bytes), so example_from_json
// (example_to_json(e)) == e. Floats are written in their shortest exact form
// (0.1f as 0.1); non-finite floats use {"float": [...]} with the strings "nan", "inf",
// "-inf".
nlohmann::json example_to_json(const Example& example);
// Throws DataError naming the feature for anything that is not of the form above.
Example example_from_json(const nlohmann::json& json);

}  // namespace garden::data
