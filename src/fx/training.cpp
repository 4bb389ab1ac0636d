#include "garden/fx/training.h"

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <numeric>
#include <random>
#include <sstream>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/core/checkpoint.h"
#include "garden/core/summary_writer.h"
#include "garden/core/task.h"
#include "garden/fx/prediction.h"

namespace fs = std::filesystem;

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
  for (const auto& option : options_)
    out << "  " << std::left << std::setw(30)
        << (option.flag + (option.indexed       ? "[:N] N"
                           : option.takes_value ? " VALUE"
                                                : ""))
        << option.help << "\n";
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
  if (!task_.is_object() || !task_.contains("type") || !task_["type"].is_string())
    throw Error("TF_CONFIG task must be {\"type\": ..., \"index\": ...}");
  const std::string type = task_["type"].get<std::string>();
  if (type != "master" && type != "worker" && type != "ps")
    throw Error("TF_CONFIG task.type '" + type + "' is not one of master, worker, ps");
  if (!task_.contains("index")) task_["index"] = 0;
  if (!task_["index"].is_number_integer() || task_["index"].get<int64_t>() < 0)
    throw Error("TF_CONFIG task.index must be a whole number >= 0");
  if (!cluster_.is_null() && !cluster_.is_object())
    throw Error("TF_CONFIG cluster must be an object of job lists");
}

Configuration Configuration::from_tf_config(const std::string& text) {
  nlohmann::json env;
  try {
    env = text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("TF_CONFIG is not valid JSON: ") + e.what());
  }
  if (!env.is_object()) throw Error("TF_CONFIG must be a JSON object");
  nlohmann::json task = env.value("task", nlohmann::json());
  if (task.is_null() || task.empty()) task = {{"type", "master"}, {"index", 0}};
  return Configuration(task, env.value("cluster", nlohmann::json()),
                       env.value("job", nlohmann::json{{"local", true}}), env);
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

void Configuration::create_server() const {
  if (distributed())
    throw Error("TF_CONFIG describes a cluster (" + cluster_.dump() +
                "): distributed garden fx training is not implemented yet; unset TF_CONFIG to "
                "train in one process");
}

std::string Configuration::create_device_setter(const ModelArguments&) const {
  create_server();
  return "";  // one process: no placement across tasks
}

// ---- InputReader -------------------------------------------------------------------------

InputReader::InputReader(Transformed all, int64_t batch, int64_t epochs, bool shuffle,
                         uint64_t seed)
    : all_(std::move(all)), batch_(batch), epochs_(epochs), shuffle_(shuffle), seed_(seed) {
  if (batch_ < 1) throw Error("a batch needs at least one instance");
  reorder();
}

void InputReader::reorder() {
  order_.resize(static_cast<std::size_t>(all_.rows));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (shuffle_) {
    // Each epoch's order depends on (seed, epoch) alone: a resumed run sees
    // the same order.
    std::mt19937_64 engine(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch_));
    std::shuffle(order_.begin(), order_.end(), engine);
  }
}

void InputReader::seek(int64_t epoch, int64_t position) {
  epoch_ = epoch;
  position_ = position;
  reorder();
}

std::optional<Transformed> InputReader::next() {
  if (all_.rows == 0) return std::nullopt;
  if (position_ >= all_.rows) {
    ++epoch_;
    position_ = 0;
    reorder();
  }
  if (epochs_ > 0 && epoch_ >= epochs_) return std::nullopt;
  const int64_t count = std::min(batch_, all_.rows - position_);
  std::vector<int64_t> rows(order_.begin() + position_, order_.begin() + position_ + count);
  position_ += count;
  const at::Tensor index = torch::tensor(rows, torch::kLong);
  Transformed batch;
  batch.rows = count;
  for (const auto& [name, tensor] : all_.tensors)
    batch.tensors[name] = tensor.index_select(0, index);
  for (const auto& [name, values] : all_.strings) {
    auto& out = batch.strings[name];
    const std::size_t width = values.size() / static_cast<std::size_t>(all_.rows);
    for (const int64_t r : rows)
      for (std::size_t j = 0; j < width; ++j)
        out.push_back(values[static_cast<std::size_t>(r) * width + j]);
  }
  return batch;
}

// ---- ModelBuilder -------------------------------------------------------------------------

ModelBuilder::ModelBuilder(std::shared_ptr<ModelArguments> args) : args_(std::move(args)) {
  if (!args_) throw Error("a ModelBuilder needs its ModelArguments");
}

const DataSet& ModelBuilder::dataset() const {
  if (!dataset_) throw Error("the model builder has no data set yet (build_graph_interfaces)");
  return *dataset_;
}

namespace {
// The data set's instances as the model sees them: its features, or its
// numeric fields by name when it has none.
Transformed as_inputs(const DataSet& dataset, const Instances& instances) {
  if (dataset.features()) return dataset.transformer().transform(instances);
  Transformed out;
  out.rows = instances.rows;
  out.tensors = instances.numeric;
  out.strings = instances.discrete;
  return out;
}
}  // namespace

void ModelBuilder::prepare(const DataSet& dataset) {
  dataset_ = &dataset;
  if (!initialized_) {
    build_init();
    initialized_ = true;
  }
}

InputReader ModelBuilder::build_input(const std::string& source, int64_t batch, int64_t epochs,
                                      bool shuffle) {
  return InputReader(as_inputs(dataset(), dataset().read(source)), batch, epochs, shuffle,
                     /*seed=*/0);
}

ModelBuilder::Interfaces ModelBuilder::build_graph_interfaces(const DataSet& dataset,
                                                              const Configuration& config) {
  config.create_device_setter(*args_);
  prepare(dataset);
  return {build_training_graph(), build_evaluation_graph(), build_prediction_graph()};
}

TrainingGraph ModelBuilder::build_training_graph() {
  auto optimizer = build_optimizer();
  TrainingGraph graph{build_input("train", args_->batch_size, args_->epochs, /*shuffle=*/true),
                      optimizer, nullptr};
  graph.train_op = [this, optimizer](const Transformed& inputs, int64_t global_steps) {
    module().train();
    const Values inferences = build_inference(inputs, /*training=*/true);
    const at::Tensor loss = build_training(global_steps, inputs, inferences);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
    return loss.item<double>();
  };
  return graph;
}

EvaluationGraph ModelBuilder::build_evaluation_graph() {
  // No eval source: an evaluation that sees nothing.
  EvaluationGraph graph{dataset().source("eval").empty()
                            ? InputReader(Transformed{}, 1, 1, false, 0)
                            : build_input("eval", args_->batch_size, 1, /*shuffle=*/false),
                        evaluation_metric(), nullptr};
  graph.eval_op = [this](const Transformed& inputs) {
    torch::NoGradGuard no_grad;
    module().eval();
    const Values outputs = build_output(inputs, build_inference(inputs, /*training=*/false));
    return build_evaluation(inputs, outputs);
  };
  return graph;
}

PredictionGraph ModelBuilder::build_prediction_graph() {
  return {[this](const std::vector<std::string>& instances) {
    torch::NoGradGuard no_grad;
    module().eval();
    const Transformed inputs = as_inputs(dataset(), dataset().parse(instances, "the instances"));
    return build_output(inputs, build_inference(inputs, /*training=*/false));
  }};
}

// ---- ModelTrainer -------------------------------------------------------------------------

ModelTrainer::ModelTrainer(std::optional<Configuration> config)
    : config_(config ? std::move(*config) : Configuration::environment()) {}

namespace {

using Clock = std::chrono::steady_clock;

std::string job_yaml(const ModelArguments& args, const Configuration& config) {
  // One list item per option with its values, as TensorFX writes it.
  std::vector<std::string> items;
  for (const auto& arg : args.raw_args) {
    if (arg.rfind("--", 0) == 0 || items.empty())
      items.push_back(arg);
    else
      items.back() += " " + arg;
  }
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "args" << YAML::Value << YAML::BeginSeq;
  for (const auto& item : items) out << item;
  out << YAML::EndSeq << YAML::Key << "config" << YAML::Value << YAML::Load(config.env().dump())
      << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace

std::shared_ptr<Model> ModelTrainer::train(ModelBuilder& builder, const DataSet& dataset,
                                           const std::string& output) {
  if (output.empty()) throw Error("--output (or --job-dir) is required: the job directory");
  config_.create_server();
  const ModelArguments& args = builder.args();
  // --log-level: WARN and above hide the progress lines (warnings and
  // errors still show); the log file keeps everything.
  struct QuietScope {
    explicit QuietScope(bool quiet) { set_quiet(quiet); }
    ~QuietScope() { set_quiet(false); }
  } quiet_scope(args.log_level != "INFO" && args.log_level != "DEBUG");
  if (args.log_device_placement)
    log_warning() << "--log-device-placement has no effect: Garden has no TensorFlow placement log";
  if (args.log_level_tensorflow != "ERROR")
    log_warning() << "--log-level-tensorflow " << args.log_level_tensorflow
                  << " has no effect: Garden has no TensorFlow log";
  const fs::path root(output);
  // The data is read and checked first: bad input leaves no job directory.
  auto graphs = builder.build_graph_interfaces(dataset, config_);
  fs::create_directories(root / "checkpoints");
  write_file_atomically((root / "job.yaml").string(), job_yaml(args, config_));

  auto& training = graphs.training;
  auto& evaluation = graphs.evaluation;
  torch::nn::Module& module = builder.module();

  CheckpointManager checkpoints((root / "checkpoints").string(), 5, "model.ckpt");
  int64_t global_steps = 0;
  if (const auto latest = checkpoints.latest_checkpoint()) {
    // Resume where the last run stopped: weights, optimizer and input.
    const CheckpointData data = read_checkpoint_file(*latest);
    load_model_state(module, data.tensors, "model/", /*strict=*/true);
    std::map<std::string, at::Tensor> slots;
    for (const auto& [name, tensor] : data.tensors)
      if (name.rfind("optimizer/", 0) == 0) slots[name.substr(10)] = tensor;
    training.optimizer->load_state(slots, data.meta.value("optimizer", nlohmann::json::object()));
    global_steps = data.meta.value("global_steps", int64_t{0});
    training.input.seek(data.meta.value("epoch", int64_t{0}),
                        data.meta.value("position", int64_t{0}));
    log_info() << "restored " << *latest << " at step " << global_steps;
  }

  SummaryWriter train_summaries((root / "summaries" / "train").string());
  SummaryWriter eval_summaries((root / "summaries" / "eval").string());
  const auto save_and_evaluate = [&] {
    CheckpointData data;
    for (const auto& [name, tensor] : model_state(module)) data.tensors["model/" + name] = tensor;
    for (const auto& [name, tensor] : training.optimizer->state_tensors())
      data.tensors["optimizer/" + name] = tensor;
    data.meta = {{"global_steps", global_steps},
                 {"optimizer", training.optimizer->state_meta()},
                 {"epoch", training.input.epoch()},
                 {"position", training.input.position()},
                 {"model", builder.model_name()}};
    checkpoints.save(data, global_steps);
    // One full pass over the eval source.
    EvaluationValue total;
    auto input = evaluation.input;
    while (auto batch = input.next()) {
      const auto value = evaluation.eval_op(*batch);
      total.sum += value.sum;
      total.count += value.count;
    }
    if (total.count > 0) {
      const double metric = total.sum / total.count;
      eval_summaries.scalar("metrics/" + evaluation.metric, metric, global_steps);
      eval_summaries.flush();
      log_info() << "Global steps: " << global_steps << "; Evaluation metric: " << std::fixed
                 << std::setprecision(3) << metric;
    }
  };

  const auto start = Clock::now();
  auto last_save = Clock::now();
  int64_t saved_at = -1, steps_this_run = 0;
  double loss_sum = 0.0;
  int64_t loss_steps = 0;
  auto interval_start = Clock::now();
  while (global_steps < args.max_steps) {
    auto batch = training.input.next();
    if (!batch) break;  // --epochs passes done
    const double loss = training.train_op(*batch, global_steps);
    if (!std::isfinite(loss))
      throw Error("the training loss is " + std::to_string(loss) + " at step " +
                  std::to_string(global_steps + 1) + "; lower --learning-rate");
    ++global_steps;
    ++steps_this_run;
    loss_sum += loss;
    ++loss_steps;
    if (global_steps % args.log_interval_steps == 0 || global_steps == args.max_steps) {
      const double seconds = std::chrono::duration<double>(Clock::now() - interval_start).count();
      const double throughput =
          static_cast<double>(loss_steps * args.batch_size) / std::max(seconds, 1e-9);
      const double mean = loss_sum / static_cast<double>(loss_steps);
      train_summaries.scalars({{"metrics/loss", mean}, {"metrics/throughput", throughput}},
                              global_steps);
      train_summaries.flush();
      log_info() << "Global steps: " << global_steps << "; Duration: "
                 << static_cast<int64_t>(
                        std::chrono::duration<double>(Clock::now() - start).count())
                 << " sec; Throughput: " << std::fixed << std::setprecision(1) << throughput
                 << " instances/sec; Loss: " << std::setprecision(3) << mean;
      loss_sum = 0.0;
      loss_steps = 0;
      interval_start = Clock::now();
    }
    const bool first = steps_this_run == 1;
    if (first || Clock::now() - last_save >= std::chrono::seconds(args.checkpoint_interval_secs)) {
      save_and_evaluate();
      saved_at = global_steps;
      last_save = Clock::now();
    }
  }
  if (saved_at != global_steps) save_and_evaluate();
  export_model(builder, (root / "model").string());
  if (!config_.master()) return nullptr;
  return Model::load((root / "model").string());
}

}  // namespace garden::fx
