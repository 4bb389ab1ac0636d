// tf.Example: the parser on arbitrary bytes; what it accepts serializes and
// parses back to the same Example, and goes through its JSON text form (as
// `garden tfrecord` prints it) and back.
#include <cmath>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "garden/data/example.h"

using namespace garden::data;

namespace {

// Equal values; floats bitwise, except that any NaN equals any NaN (JSON
// spells them all "nan").
bool same(const Example& a, const Example& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    if (i->first != j->first || i->second.kind != j->second.kind) return false;
    if (i->second.kind != FeatureValue::Kind::kFloat) {
      if (i->second != j->second) return false;
      continue;
    }
    const auto& x = i->second.floats;
    const auto& y = j->second.floats;
    if (x.size() != y.size()) return false;
    for (size_t k = 0; k < x.size(); ++k) {
      if (std::isnan(x[k]) && std::isnan(y[k])) continue;
      if (std::memcmp(&x[k], &y[k], sizeof(float)) != 0) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Example example;
  try {
    example = parse_example(garden_fuzz::as_view(data, size));
  } catch (const garden::Error&) {
    return 0;
  }
  const std::string serialized = serialize_example(example);
  const Example again = parse_example(serialized);
  GARDEN_FUZZ_CHECK(same(again, example));
  GARDEN_FUZZ_CHECK(serialize_example(again) == serialized);
  const std::string text = example_to_json(example).dump();
  GARDEN_FUZZ_CHECK(same(example_from_json(nlohmann::json::parse(text)), example));
  return 0;
}
