#include "garden/fx/training.h"

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
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
#include "garden/core/parameter_server.h"
#include "garden/core/summary_writer.h"
#include "garden/core/task.h"
#include "garden/distribute/cluster.h"
#include "garden/distribute/process_group.h"
#include "garden/fx/prediction.h"
#include "garden/platform/stop_signals.h"

namespace fs = std::filesystem;

namespace garden::fx {

// ---- InputReader -------------------------------------------------------------------------

namespace {
// The given rows of `all`, in that order.
Transformed take_rows(const Transformed& all, const std::vector<int64_t>& rows) {
  const at::Tensor index = torch::tensor(rows, torch::kLong);
  Transformed out;
  out.rows = static_cast<int64_t>(rows.size());
  for (const auto& [name, tensor] : all.tensors) out.tensors[name] = tensor.index_select(0, index);
  for (const auto& [name, values] : all.strings) {
    auto& strings = out.strings[name];
    const std::size_t width = all.rows ? values.size() / static_cast<std::size_t>(all.rows) : 0;
    for (const int64_t r : rows)
      for (std::size_t j = 0; j < width; ++j)
        strings.push_back(values[static_cast<std::size_t>(r) * width + j]);
  }
  return out;
}
}  // namespace

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

InputReader InputReader::shard(int64_t index, int64_t count, int64_t epochs, uint64_t seed) const {
  std::vector<int64_t> rows;
  for (int64_t r = index; r < all_.rows; r += count) rows.push_back(r);
  return InputReader(take_rows(all_, rows), batch_, epochs, shuffle_, seed);
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
  return take_rows(all_, rows);
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

std::shared_ptr<optim::Optimizer> ModelBuilder::build_optimizer() {
  std::vector<optim::NamedParameter> parameters;
  for (const auto& item : module().named_parameters(/*recurse=*/true))
    parameters.push_back({item.key(), item.value()});
  return optim::make_optimizer(build_optimizer_config(), parameters);
}

TrainingGraph ModelBuilder::build_training_graph() {
  auto optimizer = build_optimizer();
  TrainingGraph graph{build_input("train", args_->batch_size, args_->epochs, /*shuffle=*/true),
                      optimizer, nullptr, nullptr};
  graph.gradient_op = [this, optimizer](const Transformed& inputs, int64_t global_steps) {
    module().train();
    const Values inferences = build_inference(inputs, /*training=*/true);
    const at::Tensor loss = build_training(global_steps, inputs, inferences);
    optimizer->zero_grad();
    loss.backward();
    return loss.item<double>();
  };
  graph.train_op = [gradient_op = graph.gradient_op, optimizer](const Transformed& inputs,
                                                                int64_t global_steps) {
    const double loss = gradient_op(inputs, global_steps);
    optimizer->step();
    return loss;
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

// TensorFX's histograms of the variables and, where the last step left
// them, their gradients: "layer_0.weight" is inference/layer_0/weights.
void write_histograms(SummaryWriter& writer, torch::nn::Module& module, int64_t step) {
  const auto values_of = [](const at::Tensor& tensor) {
    const at::Tensor flat = tensor.detach().to(torch::kCPU, torch::kDouble).contiguous().view(-1);
    return std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  };
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    std::string tag = "inference/" + item.key();
    std::replace(tag.begin(), tag.end(), '.', '/');
    const auto leaf = tag.rfind('/');
    if (tag.substr(leaf + 1) == "weight") tag += "s";
    if (tag.substr(leaf + 1) == "bias") tag.replace(leaf + 1, std::string::npos, "biases");
    writer.histogram(tag, values_of(item.value()), step);
    if (item.value().grad().defined())
      writer.histogram(tag + ".gradients", values_of(item.value().grad()), step);
  }
}

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

namespace {

// A worker of a distributed run: steps from ps 0, gradients of its shard's
// batches pushed to the ps tasks, until the master ends the run.
void run_worker(ParameterServers& servers, TrainingGraph& training, int64_t num_workers,
                int64_t training_seed) {
  const int64_t index = servers.worker_index();
  // Its own random stream (dropout): --seed plus 1 plus its index; unseeded,
  // each process's generator starts from its own random seed already.
  if (training_seed >= 0) torch::manual_seed(static_cast<uint64_t>(training_seed + 1 + index));
  std::optional<InputReader> input;
  while (const auto step = servers.next_step()) {
    if (!input) {
      // Its own order, different after a resume (worker 0 of one starting
      // at step 0 reads as one process does).
      input.emplace(training.input.shard(index, num_workers, /*epochs=*/0,
                                         static_cast<uint64_t>(index + num_workers * (*step - 1))));
    }
    servers.pull();
    const auto batch = input->next();
    if (!batch)
      throw Error("worker " + std::to_string(index) +
                  " has no training rows: the training data has " +
                  std::to_string(training.input.rows()) + " rows for " +
                  std::to_string(num_workers) + " workers");
    const double loss = training.gradient_op(*batch, *step - 1);
    std::vector<at::Tensor> gradients;
    if (!training.optimizer->transform_gradients(gradients)) gradients.clear();
    servers.push(gradients, {{"loss", loss}}, batch->rows);
  }
}

}  // namespace

std::shared_ptr<Model> ModelTrainer::train(ModelBuilder& builder, const DataSet& dataset,
                                           const std::string& output) {
  if (output.empty()) throw Error("--output (or --job-dir) is required: the job directory");
  // A cluster that cannot be trained on is one line before anything else.
  const distribute::Cluster cluster = config_.resolve();
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
  // SIGTERM and SIGINT stop the run after the current step with a checkpoint
  // (the master's; workers and ps tasks report theirs to it).
  GracefulStop graceful;
  // The initial weights (the master's, in a cluster).
  if (args.seed >= 0) torch::manual_seed(static_cast<uint64_t>(args.seed));
  // The data is read and checked first: bad input leaves no job directory.
  if (cluster.is_ps()) {
    // A ps task holds the weights the master sends and applies the
    // workers' gradients with the model's optimizer.
    builder.prepare(dataset);
    const config::OptimizationConfig optimizer_config = builder.build_optimizer_config();
    const auto group = config_.create_server();
    group->barrier("the cluster's start");
    serve_parameters(*group, optimizer_config);
    return nullptr;
  }
  auto graphs = builder.build_graph_interfaces(dataset, config_);
  auto& training = graphs.training;
  auto& evaluation = graphs.evaluation;
  std::shared_ptr<ParameterServers> servers;
  if (cluster.distributed()) {
    const auto group = config_.create_server();
    group->barrier("the cluster's start");
    servers = std::make_shared<ParameterServers>(group, training.optimizer->parameters());
    if (!cluster.is_chief()) {
      run_worker(*servers, training, cluster.num_workers, args.seed);
      return nullptr;
    }
  }

  fs::create_directories(root / "checkpoints");
  write_file_atomically((root / "job.yaml").string(), job_yaml(args, config_));
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
  {
    // TensorFX adds each phase's graph to its summaries; Garden's graph is
    // the module: its variables and shapes, as text (TensorBoard's Text tab).
    std::string graph = "| variable | shape |\n|---|---|\n";
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      std::string shape;
      for (const int64_t size : item.value().sizes())
        shape += (shape.empty() ? "" : " x ") + std::to_string(size);
      graph += "| " + item.key() + " | " + shape + " |\n";
    }
    const std::string model = builder.model_name().empty() ? "model" : builder.model_name();
    train_summaries.text("graph", model + ", training\n\n" + graph, global_steps);
    eval_summaries.text("graph", model + ", evaluation\n\n" + graph, global_steps);
    SummaryWriter prediction((root / "summaries" / "prediction").string());
    prediction.text("graph",
                    model +
                        ", prediction: instances (CSV lines or tf.Example records) to label "
                        "and scores\n\n" +
                        graph,
                    global_steps);
  }
  const auto save = [&] {
    CheckpointData data;
    for (const auto& [name, tensor] : model_state(module)) data.tensors["model/" + name] = tensor;
    for (const auto& [name, tensor] : training.optimizer->state_tensors())
      data.tensors["optimizer/" + name] = tensor;
    data.meta = {{"global_steps", global_steps},
                 {"optimizer", training.optimizer->state_meta()},
                 {"epoch", training.input.epoch()},
                 {"position", training.input.position()},
                 {"model", builder.model_name()}};
    return checkpoints.save(data, global_steps);
  };
  const auto save_and_evaluate = [&] {
    save();
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

  // The last step: --max-steps, and with parameter servers also --epochs
  // passes of all the workers over their shards (one process stops when
  // its input ends).
  int64_t limit = args.max_steps;
  if (servers && args.epochs > 0) {
    const int64_t rows = training.input.rows(), workers = cluster.num_workers;
    int64_t batches = 0;
    for (int64_t w = 0; w < workers; ++w) {
      const int64_t shard_rows = (rows - w + workers - 1) / workers;
      batches += (shard_rows + args.batch_size - 1) / args.batch_size;
    }
    limit = std::min(limit, batches * args.epochs);
  }
  try {
    if (servers) servers->initialize(*training.optimizer, global_steps);
    const auto start = Clock::now();
    auto last_save = Clock::now();
    int64_t saved_at = -1, steps_this_run = 0;
    double loss_sum = 0.0;
    int64_t loss_steps = 0, examples = 0;
    auto interval_start = Clock::now();
    while (global_steps < limit) {
      int64_t target = global_steps + 1;
      if (servers) {
        // The workers run up to the next log line (the first step alone:
        // its checkpoint and evaluation come right after it).
        if (steps_this_run > 0)
          target = std::min(limit,
                            (global_steps / args.log_interval_steps + 1) * args.log_interval_steps);
        servers->schedule(target);
        const auto progress = servers->join_steps(target);
        servers->pull_state(*training.optimizer);
        if (const auto it = progress.scalars.find("loss"); it != progress.scalars.end()) {
          loss_sum += it->second.first;
          loss_steps += it->second.second;
        }
        examples += progress.examples;
      } else {
        auto batch = training.input.next();
        if (!batch) break;  // --epochs passes done
        const double loss = training.train_op(*batch, global_steps);
        if (!std::isfinite(loss))
          throw Error("the training loss is " + std::to_string(loss) + " at step " +
                      std::to_string(global_steps + 1) + "; lower --learning-rate");
        loss_sum += loss;
        ++loss_steps;
        examples += batch->rows;
      }
      if (!std::isfinite(loss_sum))
        throw Error("the training loss is not finite between steps " +
                    std::to_string(global_steps + 1) + " and " + std::to_string(target) +
                    "; lower --learning-rate");
      steps_this_run += target - global_steps;
      const bool first = steps_this_run == target - global_steps;
      global_steps = target;
      if (const int signal = StopSignals::pending()
                                 ? StopSignals::pending()
                                 : (servers ? servers->signal_from_workers() : 0)) {
        const std::string path = save();
        throw Preempted("received " + StopSignals::name(signal) + " at step " +
                            std::to_string(global_steps) + "; saved " + path +
                            "; run the same command to resume",
                        signal);
      }
      if (global_steps % args.log_interval_steps == 0 || global_steps == limit) {
        const double seconds = std::chrono::duration<double>(Clock::now() - interval_start).count();
        const double throughput = static_cast<double>(examples) / std::max(seconds, 1e-9);
        const double mean = loss_sum / static_cast<double>(std::max<int64_t>(1, loss_steps));
        train_summaries.scalars({{"metrics/loss", mean}, {"metrics/throughput", throughput}},
                                global_steps);
        write_histograms(train_summaries, module, global_steps);
        train_summaries.flush();
        log_info() << "Global steps: " << global_steps << "; Duration: "
                   << static_cast<int64_t>(
                          std::chrono::duration<double>(Clock::now() - start).count())
                   << " sec; Throughput: " << std::fixed << std::setprecision(1) << throughput
                   << " instances/sec; Loss: " << std::setprecision(3) << mean;
        loss_sum = 0.0;
        loss_steps = examples = 0;
        interval_start = Clock::now();
      }
      if (first ||
          Clock::now() - last_save >= std::chrono::seconds(args.checkpoint_interval_secs)) {
        save_and_evaluate();
        saved_at = global_steps;
        last_save = Clock::now();
      }
    }
    if (saved_at != global_steps) save_and_evaluate();
    if (servers) servers->stop("done");
  } catch (const std::exception& e) {
    if (servers) {
      std::string text = e.what();
      servers->stop(dynamic_cast<const Preempted*>(&e) ? std::string("preempted")
                                                       : text.substr(0, text.find('\n')));
    }
    throw;
  }
  export_model(builder, (root / "model").string());
  if (!config_.master()) return nullptr;
  return Model::load((root / "model").string());
}

}  // namespace garden::fx
