// What a task's config takes from the checkpoint it starts from, as
// transformers' from_pretrained takes a model's shape from its config.json:
// each task config family registers an adopter (the BERT-family tasks and
// translation read a Hugging Face directory named by task.init_checkpoint;
// the BERT-family tasks also a Garden checkpoint's params),
// and the experiment's resolution runs the one for its task after the
// config files and overrides, before validation, so that train, import,
// config and export all see the same resolved config.
#pragma once

#include <functional>
#include <string>
#include <typeindex>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/config/yaml_io.h"

namespace garden {

// Sets the keys of `task` that its init_checkpoint determines, unless the
// user set them (`set_by_user`); a key the user set to another value is one
// garden::Error naming the key, where it was set, and both values. Does
// nothing when init_checkpoint names nothing it reads. Returns the lines to
// log (what it took), logged once the whole config is valid, so that a
// refusal stays one line.
using InitCheckpointAdopter = std::function<std::vector<std::string>(
    config::TaskConfig& task, const config::SetKeys& set_by_user)>;

// One adopter per task config type (a second is refused).
void register_init_checkpoint_adopter(std::type_index config_type, InitCheckpointAdopter adopter);
template <class ConfigT>
void register_init_checkpoint_adopter(InitCheckpointAdopter adopter) {
  register_init_checkpoint_adopter(std::type_index(typeid(ConfigT)), std::move(adopter));
}

// Runs the adopter registered for params.task's type (nothing when there is
// none, or no task); returns its lines to log.
std::vector<std::string> adopt_from_init_checkpoint(config::ExperimentConfig& params,
                                                    const config::SetKeys& set_by_user);

}  // namespace garden
