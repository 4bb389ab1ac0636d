// --params_override strings in both forms (`a.b=1,c='x'` and a YAML / JSON
// mapping), validated; an accepted one survives params.yaml.
#include "config_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = garden_fuzz::as_view(data, size);
  for (const std::string& name : garden_fuzz::experiments()) {
    auto config = garden::config::get_experiment_config(name);
    try {
      garden::config::apply_override(*config, text);
      garden::config::validate_config(*config);
    } catch (const garden::Error&) {
      continue;
    }
    garden_fuzz::check_round_trip(name, *config);
  }
  return 0;
}
