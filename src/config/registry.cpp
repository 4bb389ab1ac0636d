#include "garden/config/registry.h"

#include <cctype>

namespace garden::config {

void check_registry_name(const std::string& name, const std::string& what) {
  bool ok = !name.empty() && name.front() != '/' && name.back() != '/' &&
            name.find("//") == std::string::npos;
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
                c == '/');
  if (!ok)
    throw ConfigError("invalid " + what + " name '" + name +
                      "': use segments of letters, digits, '_', '-' or '.' joined by '/'");
}

Registry<ExperimentEntry>& experiment_registry() {
  static Registry<ExperimentEntry> registry("experiment");
  return registry;
}

void register_experiment(const std::string& name, const std::string& description,
                         ExperimentFactory factory) {
  experiment_registry().add(name, ExperimentEntry{description, std::move(factory)});
}

std::shared_ptr<ExperimentConfig> get_experiment_config(const std::string& name) {
  auto config = experiment_registry().get(name).factory();
  if (!config || !config->task)
    throw ConfigError("experiment '" + name + "' factory returned no task config");
  return config;
}

}  // namespace garden::config
