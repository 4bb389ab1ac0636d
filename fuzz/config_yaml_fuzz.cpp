// YAML config files (--config_file) on arbitrary bytes, validated; an
// accepted one survives being written as params.yaml and read back.
#include "config_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = garden_fuzz::write_file("config.yaml", garden_fuzz::as_view(data, size));
  for (const std::string& name : garden_fuzz::experiments()) {
    auto config = garden::config::get_experiment_config(name);
    try {
      garden::config::apply_file(*config, path);
      garden::config::validate_config(*config);
    } catch (const garden::Error&) {
      continue;
    }
    garden_fuzz::check_round_trip(name, *config);
  }
  return 0;
}
