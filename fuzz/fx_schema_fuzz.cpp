// TensorFX schema.yaml on arbitrary bytes: refused with one line, or parsed;
// what it formats parses back the same.
#include <optional>

#include "fx_fuzz.h"

using namespace garden::fx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<Schema> parsed;
  try {
    parsed = Schema::parse(std::string(garden_fuzz::as_view(data, size)), "schema.yaml");
  } catch (const garden::Error&) {
    return 0;
  }
  const Schema& schema = *parsed;
  const Schema again = Schema::parse(schema.format(), "formatted");
  GARDEN_FUZZ_CHECK(again.format() == schema.format());
  GARDEN_FUZZ_CHECK(again.names() == schema.names());
  try {
    const Transformer transformer(schema, Metadata::load(garden_fuzz::iris("metadata.json")),
                                  FeatureSet::load(garden_fuzz::iris("features.yaml")));
    garden_fuzz::check_transform(
        transformer,
        parse_csv(schema, {std::string(schema.fields().size() - 1, ',')}, "one empty line"));
  } catch (const garden::Error&) {
  }
  return 0;
}
