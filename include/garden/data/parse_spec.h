// A parse spec like tf.io.parse_single_example's (tf.io.FixedLenFeature,
// tf.io.VarLenFeature) / Model Garden's decoders: turns a tf.Example
// (garden/data/example.h) into named tensors, with errors naming the record.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "garden/data/example.h"

namespace garden::data {

enum class DType { kInt64, kFloat, kString };

// Exactly product(shape) values (shape {} is a scalar: one value). A feature that is
// absent from the Example takes default_value if given (same dtype; either
// product(shape) values or one value, repeated), and is an error otherwise.
struct FixedLenFeature {
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat;
  std::optional<FeatureValue> default_value;
};

// Any number of values (an absent feature gives none): a 1-D tensor, or a string list.
struct VarLenFeature {
  DType dtype = DType::kFloat;
};

using FeatureSpec = std::variant<FixedLenFeature, VarLenFeature>;
using ParseSpec = std::map<std::string, FeatureSpec>;

// Where an Example came from, for error messages, and the pass over the
// files it was read in (0 first): a map function that draws random numbers
// (image augmentation) seeds them from all three, so it stays a pure
// function of its arguments and still draws anew each epoch.
struct RecordLocation {
  std::string file;
  int64_t index = 0;  // 0-based record number in the file
  int64_t epoch = 0;
};

// The result of parse(): int64 features as kLong tensors, float as kFloat tensors
// (fixed: of the spec's shape; varlen: 1-D), on the CPU. Strings stay host-side in
// `strings` (fixed: product(shape) values in row-major order; varlen: all values).
struct ParsedFeatures {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::vector<std::string>> strings;
};

// Features of the Example not named in the spec are ignored. Throws DataError, one line
// naming the file, the record index and the feature: a required feature missing, the
// wrong kind (e.g. int64_list for a float spec), the wrong number of values, or a bad
// default in the spec.
ParsedFeatures parse(const Example& example, const ParseSpec& spec, const RecordLocation& where);

}  // namespace garden::data
