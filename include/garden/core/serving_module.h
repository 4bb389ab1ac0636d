// Model Garden's serving modules (official/nlp/serving/serving_modules.py), in
// C++: how one task is served by garden export, predict and serve. A module
// lives beside its task (translation_serving.cpp beside translation_task.cpp)
// and is registered for the task's config type as the task is; garden/serving
// uses it, and the Task itself knows nothing of serving.
//
//   register_task<MyConfig, MyTask>("my_task");
//   register_serving_module<MyConfig, MyTask, MyServing>("my_task");
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/types.h"
#include "garden/core/task.h"

namespace garden {

// One named input or output of a serving signature, as SavedModel's
// serving_default describes it: a TensorFlow dtype name (DT_FLOAT, DT_INT64,
// DT_STRING) and a shape per instance, -1 for any size.
struct TensorSpec {
  std::string dtype;
  std::vector<int64_t> shape;
};
struct ServingSignature {
  std::vector<std::pair<std::string, TensorSpec>> inputs;  // in positional order
  std::vector<std::pair<std::string, TensorSpec>> outputs;
};

// How a task is served. A module is made for one task (get_serving_module)
// and lives no longer than it.
class ServingModule {
 public:
  explicit ServingModule(Task& task) : task_(task) {}
  virtual ~ServingModule() = default;
  ServingModule(const ServingModule&) = delete;
  ServingModule& operator=(const ServingModule&) = delete;

  Task& task() const { return task_; }

  // What an instance carries in and gets back.
  virtual ServingSignature signature() = 0;
  // Files besides the weights that serving needs (a tokenizer model): asset
  // name -> where it is now. Export copies them into the export's assets/.
  virtual std::map<std::string, std::string> assets() { return {}; }
  // Readies the task to build its model and serve with nothing but an
  // export: the checkpoint's task metadata and the export's assets (name ->
  // path). No training data is read after it. The default restores the
  // task's checkpoint metadata.
  virtual void prepare(const nlohmann::json& task_metadata,
                       const std::map<std::string, std::string>& assets);
  // Instances (JSON objects holding every signature input by name) -> the
  // batch the task's inference_step takes. A wrong instance throws
  // InputError naming its index and the input.
  virtual Batch inputs(const std::vector<nlohmann::json>& instances) = 0;
  // inference_step's outputs for `count` instances -> one JSON object of the
  // signature's outputs per instance.
  virtual std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) = 0;
  // One call, instances to answers: `run_model` is the task's inference_step
  // on the model (on its device). The default is outputs(run_model(inputs)),
  // one row of the batch per instance. A module whose instance becomes
  // several rows (question answering cuts a long context into windows)
  // overrides it, and keeps what maps its rows back to their instance for
  // the length of the call.
  using RunModel = std::function<Batch(const Batch& inputs)>;
  virtual std::vector<nlohmann::json> predict(const std::vector<nlohmann::json>& instances,
                                              const RunModel& run_model);
  // int8 inference (garden translate, predict and serve --int8): readies
  // `model`, already holding its weights, to run inference_step in int8. The
  // default throws garden::Error: the task has none.
  virtual void use_int8(Model& model);

 private:
  Task& task_;
};

// An instance's input `name` as token ids: a list of ints in [0, bound),
// appended to `out`. False when the instance has no such input; a value of
// another kind or out of range throws InputError naming `where` (the
// instance) and the input.
bool read_id_list(const nlohmann::json& instance, const char* name, int64_t bound,
                  const std::string& where, std::vector<int64_t>& out);

using ServingModulePtr = std::unique_ptr<ServingModule>;
using ServingModuleFactory = std::function<ServingModulePtr(Task& task)>;

// Registers the serving module of the task registered as `task_name` for
// `config_type` (names are unique).
void register_serving_module_factory(std::type_index config_type, const std::string& task_name,
                                     ServingModuleFactory factory);

// ModuleT is made from the task as TaskT&.
template <class ConfigT, class TaskT, class ModuleT>
void register_serving_module(const std::string& task_name) {
  register_serving_module_factory(
      typeid(ConfigT), task_name, [task_name](Task& task) -> ServingModulePtr {
        auto* concrete = dynamic_cast<TaskT*>(&task);
        if (!concrete)
          throw Error("the serving module of task '" + task_name + "' was given task '" +
                      task.name() + "', which is not of its type");
        return std::make_unique<ModuleT>(*concrete);
      });
}

// The module registered for `task`'s config type. A task without one gets a
// module that refuses, with one line, everything but assets() (none) and
// prepare() (the task's checkpoint metadata): it cannot be served yet.
ServingModulePtr get_serving_module(Task& task);

}  // namespace garden
