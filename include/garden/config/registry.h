// Registries with hierarchical names (`wmt_transformer/large`), like Model
// Garden's `registry` / `exp_factory`.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/config/yaml_io.h"

namespace garden::config {

// Throws ConfigError unless `name` is segments of [A-Za-z0-9_.-] joined by '/'.
void check_registry_name(const std::string& name, const std::string& what);

template <class Entry>
class Registry {
 public:
  explicit Registry(std::string what) : what_(std::move(what)) {}

  void add(const std::string& name, Entry entry) {
    check_registry_name(name, what_);
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.count(name)) throw ConfigError(what_ + " '" + name + "' is already registered");
    entries_.emplace(name, std::move(entry));
  }

  bool contains(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.count(name) > 0;
  }

  const Entry& get(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      std::string known;
      std::vector<std::string> names;
      for (const auto& [key, value] : entries_) {
        known += (known.empty() ? "" : ", ") + key;
        names.push_back(key);
      }
      const std::string suggestion = nearest(name, names);
      throw ConfigError("unknown " + what_ + " '" + name + "'; " +
                        (suggestion.empty() ? "" : "did you mean '" + suggestion + "'? ") +
                        "registered: " + (known.empty() ? "(none)" : known) +
                        ". Register it with garden::config::register_" + what_ +
                        "() before running.");
    }
    return it->second;
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [key, value] : entries_) out.push_back(key);
    return out;
  }

 private:
  std::string what_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

using ExperimentFactory = std::function<std::shared_ptr<ExperimentConfig>()>;

struct ExperimentEntry {
  std::string description;
  ExperimentFactory factory;
};

Registry<ExperimentEntry>& experiment_registry();

// Model Garden's exp_factory.register_config_factory.
void register_experiment(const std::string& name, const std::string& description,
                         ExperimentFactory factory);

// A fresh ExperimentConfig with the registered defaults.
std::shared_ptr<ExperimentConfig> get_experiment_config(const std::string& name);

}  // namespace garden::config
