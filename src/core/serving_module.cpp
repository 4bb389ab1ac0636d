#include "garden/core/serving_module.h"

#include "garden/config/registry.h"

namespace garden {

void ServingModule::prepare(const nlohmann::json& task_metadata,
                            const std::map<std::string, std::string>&) {
  task_.restore_checkpoint_metadata(task_metadata);
}

std::vector<nlohmann::json> ServingModule::predict(const std::vector<nlohmann::json>& instances,
                                                   const RunModel& run_model) {
  return outputs(run_model(inputs(instances)), instances.size());
}

void ServingModule::use_int8(Model&) {
  throw Error("--int8: task '" + task_.name() +
              "' has no int8 inference (the translation task has)");
}

bool read_id_list(const nlohmann::json& instance, const char* name, int64_t bound,
                  const std::string& where, std::vector<int64_t>& out) {
  const auto it = instance.find(name);
  if (it == instance.end()) return false;
  if (!it->is_array())
    throw InputError(where + ": input '" + name + "' must be a list of ints, not " +
                     std::string(it->type_name()));
  for (const auto& value : *it) {
    if (!value.is_number_integer())
      throw InputError(where + ": input '" + name + "' holds " + value.dump() + ", not an int");
    const int64_t v = value.get<int64_t>();
    if (v < 0 || v >= bound)
      throw InputError(where + ": input '" + name + "' holds " + std::to_string(v) +
                       ", outside [0, " + std::to_string(bound) + ")");
    out.push_back(v);
  }
  return true;
}

namespace {

// The module of a task that registered none: export stops at its signature.
class UnservedTask : public ServingModule {
 public:
  using ServingModule::ServingModule;

  ServingSignature signature() override {
    throw Error("task '" + task().name() +
                "' cannot be served yet: it declares no serving signature");
  }
  Batch inputs(const std::vector<nlohmann::json>&) override {
    throw Error("task '" + task().name() + "' cannot be served yet: it has no serving_inputs");
  }
  std::vector<nlohmann::json> outputs(const Batch&, std::size_t) override {
    throw Error("task '" + task().name() + "' cannot be served yet: it has no serving_outputs");
  }
};

// Serving modules by task name (the name register_task gave), each for its
// config type.
struct ServingModuleEntry {
  std::type_index config_type;
  ServingModuleFactory factory;
};
config::Registry<ServingModuleEntry>& serving_modules() {
  static config::Registry<ServingModuleEntry> registry("serving_module");
  return registry;
}

}  // namespace

void register_serving_module_factory(std::type_index config_type, const std::string& task_name,
                                     ServingModuleFactory factory) {
  serving_modules().add(task_name, ServingModuleEntry{config_type, std::move(factory)});
}

ServingModulePtr get_serving_module(Task& task) {
  const std::type_index config_type(typeid(task.task_config()));
  for (const auto& name : serving_modules().names()) {
    const ServingModuleEntry& entry = serving_modules().get(name);
    if (entry.config_type == config_type) return entry.factory(task);
  }
  return std::make_unique<UnservedTask>(task);
}

}  // namespace garden
