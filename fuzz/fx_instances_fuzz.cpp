// TensorFX instances on arbitrary bytes: CSV lines (training and prediction
// form) and a serialized tf.Example, parsed with the iris schema and
// transformed by its features.
#include "fx_fuzz.h"

using namespace garden::fx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Schema schema = Schema::load(garden_fuzz::iris("schema.yaml"));
  static const Transformer transformer(schema, Metadata::load(garden_fuzz::iris("metadata.json")),
                                       FeatureSet::load(garden_fuzz::iris("features.yaml")));
  const std::string_view bytes = garden_fuzz::as_view(data, size);
  const auto lines = garden_fuzz::lines_of(bytes);
  for (bool prediction : {false, true}) {
    try {
      const Instances instances = parse_csv(schema, lines, "instances.csv", prediction);
      GARDEN_FUZZ_CHECK(instances.rows == static_cast<int64_t>(lines.size()));
      garden_fuzz::check_transform(transformer, instances);
    } catch (const garden::Error&) {
    }
  }
  try {
    const Instances instances = parse_examples(schema, {std::string(bytes)}, "instance.tfrecord");
    GARDEN_FUZZ_CHECK(instances.rows == 1);
    garden_fuzz::check_transform(transformer, instances);
  } catch (const garden::Error&) {
  }
  return 0;
}
