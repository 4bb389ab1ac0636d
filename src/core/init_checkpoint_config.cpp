#include "garden/core/init_checkpoint_config.h"

#include <map>
#include <mutex>
#include <utility>

#include "garden/base/error.h"

namespace garden {

namespace {

struct Adopters {
  std::mutex mutex;
  std::map<std::type_index, InitCheckpointAdopter> by_type;
};

Adopters& adopters() {
  static Adopters instance;
  return instance;
}

}  // namespace

void register_init_checkpoint_adopter(std::type_index config_type, InitCheckpointAdopter adopter) {
  auto& all = adopters();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.by_type.emplace(config_type, std::move(adopter)).second)
    throw Error(std::string("an init_checkpoint adopter is already registered for config type ") +
                config_type.name());
}

std::vector<std::string> adopt_from_init_checkpoint(config::ExperimentConfig& params,
                                                    const config::SetKeys& set_by_user) {
  if (!params.task) return {};
  InitCheckpointAdopter adopter;
  {
    auto& all = adopters();
    std::lock_guard<std::mutex> lock(all.mutex);
    const auto it = all.by_type.find(std::type_index(typeid(*params.task)));
    if (it == all.by_type.end()) return {};
    adopter = it->second;
  }
  return adopter(*params.task, set_by_user);
}

}  // namespace garden
