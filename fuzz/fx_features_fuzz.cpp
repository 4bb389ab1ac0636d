// TensorFX features.yaml on arbitrary bytes, checked against the iris schema
// and metadata and applied to the iris eval instances.
#include "fx_fuzz.h"

using namespace garden::fx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Schema schema = Schema::load(garden_fuzz::iris("schema.yaml"));
  static const Metadata metadata = Metadata::load(garden_fuzz::iris("metadata.json"));
  try {
    const FeatureSet features =
        FeatureSet::parse(std::string(garden_fuzz::as_view(data, size)), "features.yaml");
    garden_fuzz::check_transform(Transformer(schema, metadata, features), garden_fuzz::iris_eval());
  } catch (const garden::Error&) {
  }
  return 0;
}
