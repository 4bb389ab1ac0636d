// TensorFX's command line and cluster: ArgumentParser, ModelArguments (the
// training flags) and Configuration (TF_CONFIG).
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/distribute/cluster.h"
#include "garden/distribute/process_group.h"
#include "garden/fx/training.h"

namespace garden::fx {

// ---- ArgumentParser -------------------------------------------------------------------

namespace {

int64_t parse_int(const std::string& value, const std::string& flag) {
  char* end = nullptr;
  errno = 0;
  const long long number = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE)
    throw Error("argument " + flag + ": '" + value + "' is not a whole number");
  return number;
}

double parse_double(const std::string& value, const std::string& flag) {
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(number))
    throw Error("argument " + flag + ": '" + value + "' is not a number");
  return number;
}

}  // namespace

namespace {
template <class Option, class Set>
Option option_of(const std::string& flag, const std::string& help, Set set) {
  Option option;
  option.flag = flag;
  option.help = help;
  option.set = std::move(set);
  return option;
}
}  // namespace

void ArgumentParser::add(const std::string& flag, std::string* target, const std::string& help,
                         std::vector<std::string> choices) {
  options_.push_back(option_of<Option>(
      flag, help, [target, choices, flag](const std::string& value, const std::string&) {
        if (!choices.empty() && std::find(choices.begin(), choices.end(), value) == choices.end()) {
          std::string list;
          for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
          throw Error("argument " + flag + ": '" + value + "' is not one of " + list);
        }
        *target = value;
      }));
}

void ArgumentParser::add(const std::string& flag, std::optional<std::string>* target,
                         const std::string& help) {
  options_.push_back(option_of<Option>(
      flag, help, [target](const std::string& value, const std::string&) { *target = value; }));
}

void ArgumentParser::add(const std::string& flag, int64_t* target, const std::string& help) {
  options_.push_back(
      option_of<Option>(flag, help, [target, flag](const std::string& value, const std::string&) {
        *target = parse_int(value, flag);
      }));
}

void ArgumentParser::add(const std::string& flag, double* target, const std::string& help) {
  options_.push_back(
      option_of<Option>(flag, help, [target, flag](const std::string& value, const std::string&) {
        *target = parse_double(value, flag);
      }));
}

void ArgumentParser::add_flag(const std::string& flag, bool* target, const std::string& help) {
  Option option = option_of<Option>(
      flag, help, [target](const std::string&, const std::string&) { *target = true; });
  option.takes_value = false;
  options_.push_back(std::move(option));
}

void ArgumentParser::add_indexed(const std::string& flag,
                                 std::vector<std::optional<int64_t>>* target,
                                 const std::string& help) {
  Option option =
      option_of<Option>(flag, help, std::function<void(const std::string&, const std::string&)>());
  option.indexed = true;
  option.set_at = [target, flag](int64_t index, const std::string& value,
                                 const std::string& as_given) {
    if (index < 1 || index > 1000)
      throw Error("argument " + as_given + ": the index must be 1 to 1000");
    if (static_cast<int64_t>(target->size()) < index)
      target->resize(static_cast<std::size_t>(index));
    (*target)[static_cast<std::size_t>(index - 1)] = parse_int(value, as_given);
  };
  options_.push_back(std::move(option));
}

const ArgumentParser::Option* ArgumentParser::find(const std::string& flag) const {
  for (const auto& option : options_)
    if (option.flag == flag) return &option;
  return nullptr;
}

void ArgumentParser::parse(const std::vector<std::string>& args) const {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0)
      throw Error("unexpected argument '" + arg + "' (arguments are --name value)");
    std::string name = arg, value;
    bool has_value = false;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    std::string index_text;
    if (const auto colon = name.find(':'); colon != std::string::npos) {
      index_text = name.substr(colon + 1);
      name = name.substr(0, colon);
    }
    const Option* option = find(name);
    if (!option) throw Error("unknown argument " + arg + " (see --help)");
    if (!index_text.empty() && !option->indexed)
      throw Error("unknown argument " + arg + ": " + name + " takes no :N index");
    if (!option->takes_value) {
      if (has_value) throw Error("argument " + name + " takes no value");
      option->set("", arg);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
        throw Error("argument " + name + " needs a value");
      value = args[++i];
    }
    if (option->indexed)
      option->set_at(index_text.empty() ? 1 : parse_int(index_text, arg), value, arg);
    else
      option->set(value, arg);
  }
}

std::string ArgumentParser::help() const {
  std::ostringstream out;
  for (const auto& option : options_) {
    const std::string usage = option.flag + (option.indexed       ? "[:N] N"
                                             : option.takes_value ? " VALUE"
                                                                  : "");
    // The help text starts in column 32, or two spaces after a longer usage.
    out << "  " << std::left << std::setw(30) << usage << (usage.size() >= 30 ? "  " : "")
        << option.help << "\n";
  }
  return out.str();
}

// ---- ModelArguments -------------------------------------------------------------------

void ModelArguments::init_parser(ArgumentParser& parser) {
  parser.add("--data-schema", &data_schema, "The schema (fields and types) of the data (YAML)");
  parser.add("--data-metadata", &data_metadata, "Statistics and vocabularies of the data (JSON)");
  parser.add("--data-features", &data_features, "The features the model sees (YAML)");
  parser.add("--data-train", &data_train, "Training data (a path or a glob)");
  parser.add("--data-eval", &data_eval, "Evaluation data (a path or a glob)");
  parser.add("--output", &output, "The job directory");
  parser.add("--job-dir", &output, "The job directory (Cloud ML Engine's name for --output)");
  parser.add("--max-steps", &max_steps, "Training steps (default 1000)");
  parser.add("--batch-size", &batch_size, "Instances per step (default 128)");
  parser.add("--epochs", &epochs, "Passes over the training data (default 0: no limit)");
  parser.add("--checkpoint-interval-secs", &checkpoint_interval_secs,
             "Seconds between checkpoints, each followed by an evaluation (default 300)");
  const std::vector<std::string> levels = {"FATAL", "ERROR", "WARN", "INFO", "DEBUG"};
  parser.add("--log-level-tensorflow", &log_level_tensorflow,
             "TensorFlow's logging level (accepted; Garden has no TensorFlow)", levels);
  parser.add_flag("--log-device-placement", &log_device_placement,
                  "TensorFlow's device placement log (accepted; no effect)");
  parser.add("--log-level", &log_level, "FATAL, ERROR, WARN, INFO (default) or DEBUG", levels);
  parser.add("--log-interval-steps", &log_interval_steps,
             "Steps between progress lines and training summaries (default 100)");
  parser.add("--seed", &seed,
             "Garden's: seeds the initial weights and the workers' random streams, so runs "
             "repeat (default -1: unseeded, as in TensorFX)");
}

ArgumentParser ModelArguments::build_parser() {
  ArgumentParser parser;
  init_parser(parser);
  return parser;
}

void ModelArguments::process() {
  const auto at_least = [](const char* flag, int64_t value, int64_t low) {
    if (value < low)
      throw Error(std::string("argument ") + flag + ": " + std::to_string(value) +
                  " must be >= " + std::to_string(low));
  };
  at_least("--max-steps", max_steps, 1);
  at_least("--batch-size", batch_size, 1);
  at_least("--epochs", epochs, 0);
  at_least("--checkpoint-interval-secs", checkpoint_interval_secs, 0);
  at_least("--log-interval-steps", log_interval_steps, 1);
  at_least("--seed", seed, -1);
}

void ModelArguments::parse_into(const std::vector<std::string>& args) {
  raw_args = args;
  build_parser().parse(args);
  process();
}

// ---- Configuration ---------------------------------------------------------------------

Configuration::Configuration(nlohmann::json task, nlohmann::json cluster, nlohmann::json job,
                             nlohmann::json env)
    : task_(std::move(task)),
      cluster_(std::move(cluster)),
      job_(std::move(job)),
      env_(std::move(env)) {
  // Checked as TF_CONFIG is, by its one reader; TensorFX knows no evaluator.
  const distribute::TfConfig tf =
      distribute::parse_tf_config(nlohmann::json{{"task", task_}, {"cluster", cluster_}}.dump());
  if (!tf.has_task) throw Error("TF_CONFIG task must be {\"type\": ..., \"index\": ...}");
  if (tf.task_type != "master" && tf.task_type != "chief" && tf.task_type != "worker" &&
      tf.task_type != "ps")
    throw Error("TF_CONFIG task.type '" + tf.task_type +
                "' is not one of master, chief, worker, ps");
  task_["index"] = tf.task_index;
}

Configuration Configuration::from_tf_config(const std::string& text) {
  const distribute::TfConfig tf = distribute::parse_tf_config(text);
  const nlohmann::json task =
      tf.has_task ? tf.json.at("task") : nlohmann::json{{"type", "master"}, {"index", 0}};
  return Configuration(task, tf.cluster, tf.json.value("job", nlohmann::json{{"local", true}}),
                       tf.json);
}

Configuration Configuration::environment() {
  const char* text = std::getenv("TF_CONFIG");
  return from_tf_config(text ? text : "");
}

Configuration Configuration::local() {
  return Configuration({{"type", "master"}, {"index", 0}}, nullptr, {{"local", true}},
                       nlohmann::json::object());
}

std::string Configuration::task_type() const { return task_.at("type").get<std::string>(); }
int64_t Configuration::task_index() const { return task_.at("index").get<int64_t>(); }

std::string Configuration::device() const {
  return "/job:" + task_type() + "/task:" + std::to_string(task_index());
}

distribute::Cluster Configuration::resolve() const {
  if (!distributed()) return distribute::Cluster{};
  const auto count = [&](const char* job) -> std::size_t {
    const auto it = cluster_.find(job);
    return it != cluster_.end() && it->is_array() ? it->size() : 0;
  };
  if (count("ps") == 0)
    throw Error("TF_CONFIG describes a cluster without ps tasks (" + cluster_.dump() +
                "): distributed garden fx training keeps the variables on parameter servers; "
                "add \"ps\" tasks, or unset TF_CONFIG to train in one process");
  config::RuntimeConfig runtime;
  runtime.distribution_strategy = "parameter_server";
  auto env = distribute::process_environment();
  env["TF_CONFIG"] = env_.dump();
  // Only TF_CONFIG describes a TensorFX cluster.
  for (const char* name : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                           "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})
    env.erase(name);
  return distribute::resolve_cluster(env, runtime);
}

std::shared_ptr<distribute::ProcessGroup> Configuration::create_server() const {
  const distribute::Cluster cluster = resolve();
  if (!cluster.distributed()) return nullptr;
  log_info() << "parameter_server: " << cluster.describe() << " of " << cluster.world_size << " ("
             << device() << "), rendezvous at " << cluster.master_addr << ":"
             << cluster.master_port;
  return distribute::ProcessGroup::connect(
      cluster, "cpu", std::chrono::seconds(config::RuntimeConfig{}.collective_timeout_seconds));
}

std::string Configuration::create_device_setter(const ModelArguments&) const {
  const distribute::Cluster cluster = resolve();
  if (!cluster.distributed()) return "";  // one process: no placement across tasks
  return "variables: /job:ps (" + std::to_string(cluster.num_ps) +
         " tasks, sharded by size); operations: " + device();
}

}  // namespace garden::fx
