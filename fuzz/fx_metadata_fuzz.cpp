// TensorFX metadata.json on arbitrary bytes, used by the iris features on
// the iris eval instances.
#include "fx_fuzz.h"

using namespace garden::fx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Schema schema = Schema::load(garden_fuzz::iris("schema.yaml"));
  static const FeatureSet features = FeatureSet::load(garden_fuzz::iris("features.yaml"));
  try {
    const Metadata metadata =
        Metadata::parse(std::string(garden_fuzz::as_view(data, size)), "metadata.json");
    garden_fuzz::check_transform(Transformer(schema, metadata, features), garden_fuzz::iris_eval());
  } catch (const garden::Error&) {
  }
  return 0;
}
