// The parse spec (tf.io.parse_single_example's) applied to arbitrary
// Examples: the specs Garden's tasks use, fixed and variable length, with
// and without defaults.
#include <string>

#include "fuzz_util.h"
#include "garden/data/parse_spec.h"

using namespace garden::data;

namespace {

std::vector<ParseSpec> specs() {
  std::vector<ParseSpec> all;
  // Translation: token ids of any length.
  all.push_back(
      {{"inputs", VarLenFeature{DType::kInt64}}, {"targets", VarLenFeature{DType::kInt64}}});
  // ELECTRA pretraining: fixed-length int features.
  all.push_back({{"input_ids", FixedLenFeature{{16}, DType::kInt64, std::nullopt}},
                 {"input_mask", FixedLenFeature{{16}, DType::kInt64, std::nullopt}},
                 {"segment_ids", FixedLenFeature{{2, 8}, DType::kInt64, std::nullopt}}});
  // Tabular: float scalars with defaults, a string label, a float matrix.
  all.push_back({{"x", FixedLenFeature{{}, DType::kFloat, FeatureValue::of_floats({0.5f})}},
                 {"y", FixedLenFeature{{3}, DType::kFloat, FeatureValue::of_floats({1, 2, 3})}},
                 {"label", FixedLenFeature{{}, DType::kString, FeatureValue::of_bytes({"?"})}},
                 {"words", VarLenFeature{DType::kString}},
                 {"m", FixedLenFeature{{2, 2}, DType::kFloat, std::nullopt}}});
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ParseSpec> all = specs();
  Example example;
  try {
    example = parse_example(garden_fuzz::as_view(data, size));
  } catch (const garden::Error&) {
    return 0;
  }
  for (const ParseSpec& spec : all) {
    try {
      const ParsedFeatures parsed = parse(example, spec, {"fuzz.tfrecord", 0});
      for (const auto& [name, feature] : spec) {
        if (const auto* fixed = std::get_if<FixedLenFeature>(&feature)) {
          int64_t count = 1;
          for (int64_t d : fixed->shape) count *= d;
          if (fixed->dtype == DType::kString)
            GARDEN_FUZZ_CHECK(static_cast<int64_t>(parsed.strings.at(name).size()) == count);
          else
            GARDEN_FUZZ_CHECK(parsed.tensors.at(name).numel() == count);
        }
      }
    } catch (const garden::Error&) {
    }
  }
  return 0;
}
