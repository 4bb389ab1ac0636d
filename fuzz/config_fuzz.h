// The experiments the config targets read onto: the translation demo, the
// iris classifier and ELECTRA, so every config type Garden registers is
// reached.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"

namespace garden_fuzz {

inline const std::vector<std::string>& experiments() {
  static const std::vector<std::string> names = [] {
    garden::register_builtins();
    return std::vector<std::string>{"wmt_transformer/demo", "tabular/iris", "electra/small"};
  }();
  return names;
}

// What a run does with a config it accepted: params.yaml is written and a
// resumed run reads it back onto a fresh config, which must come out equal.
inline void check_round_trip(const std::string& name, garden::config::Config& config) {
  const std::string yaml = garden::config::to_yaml_string(config);
  auto fresh = garden::config::get_experiment_config(name);
  const std::string path = write_file("params.yaml", yaml);
  garden::config::apply_file(*fresh, path);
  garden::config::validate_config(*fresh);
  GARDEN_FUZZ_CHECK(garden::config::to_yaml_string(*fresh) == yaml);
}

}  // namespace garden_fuzz
