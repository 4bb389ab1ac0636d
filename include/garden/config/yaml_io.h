// Reading, writing, overriding and validating configs (Model Garden's
// `params_dict` / `hyperparams` behaviour), all driven by Config::visit.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "garden/config/config.h"

namespace garden::config {

// Applies a YAML mapping onto `config`. Strict: a key the config does not have
// fails with its full dotted path and the nearest valid key; a key given
// twice fails with both line numbers; a value of the wrong type names the
// key, the value and the type expected.
void read_config(Config& config, const YAML::Node& node, const std::string& path = "");

// The whole config as a YAML mapping (every field, in declaration order).
YAML::Node write_config(Config& config);
std::string to_yaml_string(Config& config);

// The keys a user set: the dotted path of every leaf a config file or an
// override gave (a mapping's keys are followed down; any other value, null
// and lists included, is a leaf), each with where it was set
// ("--config_file FILE", "--params_override"). A later setting replaces an
// earlier one's entry. An experiment's own defaults are never in it.
using SetKeys = std::map<std::string, std::string>;
// Adds the leaves of `node` under `prefix` to `keys`, as set by `source`.
void note_set_keys(const YAML::Node& node, const std::string& prefix, const std::string& source,
                   SetKeys& keys);

// Reads a YAML (or JSON) file onto `config`; errors name the file. A file
// that starts with params_file_text's checksum line is refused, naming it,
// when what follows is not what was written (cut short, a bit flipped, or
// edited: deleting that line takes an edited file as it is). With `set`,
// the keys the file gives are noted there ("--config_file FILE").
void apply_file(Config& config, const std::string& file, SetKeys* set = nullptr);

// params.yaml as Garden writes it (model_dir, exports): the whole config
// behind one comment line with its size and CRC-32C. A non-empty
// `experiment` is recorded in a second comment line, `# experiment: NAME`,
// which params_file_experiment reads back (the tools that read a run
// directory take it when --experiment is not given).
std::string params_file_text(Config& config, const std::string& experiment = "");

// The experiment a params.yaml's text records ("" when it records none).
std::string params_file_experiment(const std::string& text);

// Model Garden's --params_override: either `a.b=1,c.d='x',e=[1,2]` or a YAML
// / JSON mapping such as `{a: {b: 1}}`. A key set twice (or set both as a
// whole and within) is refused. With `set`, the keys it gives are noted
// there ("--params_override").
void apply_override(Config& config, std::string_view text, SetKeys* set = nullptr);
// The mapping an override string stands for (exposed for tests and tools).
YAML::Node parse_override(std::string_view text);

// Runs validate() on every nested config, innermost first; errors name the
// full dotted key (validation.h), or start with the config's dotted path.
void validate_config(Config& config);

// One line naming every key that is accepted only for Model Garden
// compatibility and is set to a non-default value (Config::ignored_keys), or
// nothing when none is; finalize_config logs it at start.
std::vector<std::string> compatibility_warnings(Config& config);

// The dotted paths of every leaf field (for `garden config --keys`, and the
// nearest-key suggestions).
std::vector<std::string> field_paths(Config& config);

// The candidate closest to `name` by edit distance, or "" when none is close.
std::string nearest(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace garden::config
