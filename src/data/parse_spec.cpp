#include "garden/data/parse_spec.h"

#include <torch/torch.h>

#include <string>
#include <utility>

namespace garden::data {

namespace {

using Kind = FeatureValue::Kind;

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kInt64:
      return "int64";
    case DType::kFloat:
      return "float";
    case DType::kString:
      return "string";
  }
  return "?";
}

Kind kind_of(DType dtype) {
  switch (dtype) {
    case DType::kInt64:
      return Kind::kInt64;
    case DType::kFloat:
      return Kind::kFloat;
    case DType::kString:
      break;
  }
  return Kind::kBytes;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

class FeatureErrors {
 public:
  FeatureErrors(const RecordLocation& where, const std::string& feature)
      : where_(where), feature_(feature) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError("TFRecord file '" + where_.file + "', record " + std::to_string(where_.index) +
                    ", feature '" + feature_ + "': " + what);
  }

 private:
  const RecordLocation& where_;
  const std::string& feature_;
};

// Stores `value` (already checked: right kind) as a tensor or string list of `shape`,
// repeating a single value to fill it when `repeat` is set.
void store(ParsedFeatures& out, const std::string& name, DType dtype, const FeatureValue& value,
           const std::vector<int64_t>& shape, int64_t count) {
  const bool repeat = static_cast<int64_t>(value.size()) != count;  // a one-value default
  if (dtype == DType::kString) {
    std::vector<std::string> strings = value.bytes;
    if (repeat) strings.assign(static_cast<size_t>(count), value.bytes.front());
    out.strings[name] = std::move(strings);
    return;
  }
  at::Tensor flat;
  if (dtype == DType::kInt64) {
    flat = torch::tensor(at::ArrayRef<int64_t>(value.ints), torch::kLong);
  } else {
    flat = torch::tensor(at::ArrayRef<float>(value.floats), torch::kFloat);
  }
  if (repeat) flat = flat.expand({count}).clone();
  out.tensors[name] = flat.reshape(shape);
}

}  // namespace

ParsedFeatures parse(const Example& example, const ParseSpec& spec, const RecordLocation& where) {
  ParsedFeatures out;
  for (const auto& [name, feature_spec] : spec) {
    const FeatureErrors errors(where, name);
    const auto found = example.find(name);
    const FeatureValue* value = found == example.end() ? nullptr : &found->second;

    if (const auto* var = std::get_if<VarLenFeature>(&feature_spec)) {
      const Kind wanted = kind_of(var->dtype);
      if (value == nullptr) {
        FeatureValue empty;
        empty.kind = wanted;
        store(out, name, var->dtype, empty, {0}, 0);
        continue;
      }
      if (value->kind != wanted) {
        errors.fail(std::string("is a ") + kind_name(value->kind) + ", but the spec wants " +
                    dtype_name(var->dtype) + " (" + kind_name(wanted) + ")");
      }
      const auto n = static_cast<int64_t>(value->size());
      store(out, name, var->dtype, *value, {n}, n);
      continue;
    }

    const auto& fixed = std::get<FixedLenFeature>(feature_spec);
    const Kind wanted = kind_of(fixed.dtype);
    int64_t count = 1;
    for (int64_t d : fixed.shape) {
      if (d < 0) errors.fail("bad spec: FixedLenFeature shape " + shape_text(fixed.shape));
      count *= d;
    }
    if (value == nullptr) {
      if (!fixed.default_value) errors.fail("missing, and the spec gives no default value");
      const FeatureValue& fallback = *fixed.default_value;
      const auto n = static_cast<int64_t>(fallback.size());
      if (fallback.kind != wanted || (n != count && n != 1) || (n == 1 && count == 0)) {
        errors.fail("bad spec: default value (" + std::to_string(n) + " " +
                    kind_name(fallback.kind) + ") does not fit shape " + shape_text(fixed.shape) +
                    " of " + dtype_name(fixed.dtype));
      }
      store(out, name, fixed.dtype, fallback, fixed.shape, count);
      continue;
    }
    if (value->kind != wanted) {
      errors.fail(std::string("is a ") + kind_name(value->kind) + ", but the spec wants " +
                  dtype_name(fixed.dtype) + " (" + kind_name(wanted) + ")");
    }
    if (static_cast<int64_t>(value->size()) != count) {
      errors.fail("has " + std::to_string(value->size()) + " values, but the spec wants " +
                  std::to_string(count) + " (shape " + shape_text(fixed.shape) + ")");
    }
    store(out, name, fixed.dtype, *value, fixed.shape, count);
  }
  return out;
}

}  // namespace garden::data
