#include "garden/fx/training.h"

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/core/checkpoint.h"
#include "garden/core/controller.h"
#include "garden/core/parameter_server.h"
#include "garden/core/strategy.h"
#include "garden/core/summary_writer.h"
#include "garden/core/task.h"
#include "garden/core/trainer.h"
#include "garden/distribute/cluster.h"
#include "garden/distribute/process_group.h"
#include "garden/fx/prediction.h"
#include "garden/platform/stop_signals.h"
#include "model_builder_task.h"

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

std::optional<std::vector<int64_t>> InputReader::next_rows() {
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
  return rows;
}

Transformed InputReader::take(const std::vector<int64_t>& rows) const {
  return take_rows(all_, rows);
}

std::optional<Transformed> InputReader::next() {
  const auto rows = next_rows();
  if (!rows) return std::nullopt;
  return take(*rows);
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

// TensorFX's lines and summaries of each log interval, from the
// Controller's loops: the mean loss since the last line, the throughput,
// and histograms of the variables.
class TrainingReport {
 public:
  TrainingReport(Trainer& trainer, SummaryWriter& summaries, torch::nn::Module& module,
                 int64_t log_interval, int64_t limit)
      : trainer_(trainer),
        summaries_(summaries),
        module_(module),
        log_interval_(log_interval),
        limit_(limit),
        start_(Clock::now()),
        interval_start_(start_),
        step_(trainer.global_step()),
        examples_(trainer.examples_seen()) {}

  void operator()(const Logs& logs) {
    const int64_t step = trainer_.global_step();
    if (const auto it = logs.find("training_loss"); it != logs.end()) {
      loss_sum_ += to_double(it->second) * static_cast<double>(step - step_);
      loss_steps_ += step - step_;
    }
    step_ = step;
    if (step % log_interval_ != 0 && step != limit_) return;
    const double seconds = std::chrono::duration<double>(Clock::now() - interval_start_).count();
    const double throughput =
        static_cast<double>(trainer_.examples_seen() - examples_) / std::max(seconds, 1e-9);
    const double mean = loss_sum_ / static_cast<double>(std::max<int64_t>(1, loss_steps_));
    summaries_.scalars({{"metrics/loss", mean}, {"metrics/throughput", throughput}}, step);
    write_histograms(summaries_, module_, step);
    summaries_.flush();
    log_info() << "Global steps: " << step << "; Duration: "
               << static_cast<int64_t>(std::chrono::duration<double>(Clock::now() - start_).count())
               << " sec; Throughput: " << std::fixed << std::setprecision(1) << throughput
               << " instances/sec; Loss: " << std::setprecision(3) << mean;
    loss_sum_ = 0.0;
    loss_steps_ = 0;
    examples_ = trainer_.examples_seen();
    interval_start_ = Clock::now();
  }

 private:
  Trainer& trainer_;
  SummaryWriter& summaries_;
  torch::nn::Module& module_;
  const int64_t log_interval_, limit_;
  const Clock::time_point start_;
  Clock::time_point interval_start_;
  int64_t step_, examples_;
  double loss_sum_ = 0.0;
  int64_t loss_steps_ = 0;
};

// Each phase's "graph": TensorFX adds them to its summaries; Garden's graph
// is the module, its variables and shapes as text (TensorBoard's Text tab).
void write_graphs(SummaryWriter& train, SummaryWriter& eval, const fs::path& prediction,
                  torch::nn::Module& module, const std::string& name, int64_t step) {
  std::string graph = "| variable | shape |\n|---|---|\n";
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    std::string shape;
    for (const int64_t size : item.value().sizes())
      shape += (shape.empty() ? "" : " x ") + std::to_string(size);
    graph += "| " + item.key() + " | " + shape + " |\n";
  }
  const std::string model = name.empty() ? "model" : name;
  train.text("graph", model + ", training\n\n" + graph, step);
  eval.text("graph", model + ", evaluation\n\n" + graph, step);
  SummaryWriter(prediction.string())
      .text("graph",
            model +
                ", prediction: instances (CSV lines or tf.Example records) to label and "
                "scores\n\n" +
                graph,
            step);
}

// The last step: --max-steps, and with --epochs that many passes over the
// training rows (with parameter servers, of all the workers together over
// their shards).
int64_t last_step(const ModelArguments& args, int64_t rows, int64_t workers) {
  if (args.epochs <= 0) return args.max_steps;
  int64_t batches = 0;
  for (int64_t w = 0; w < workers; ++w) {
    const int64_t shard_rows = (rows - w + workers - 1) / workers;
    batches += (shard_rows + args.batch_size - 1) / args.batch_size;
  }
  return std::min(args.max_steps, batches * args.epochs);
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
  builder.prepare(dataset);
  if (cluster.is_ps()) {
    // A ps task holds the weights the master sends and applies the
    // workers' gradients with the model's optimizer.
    const config::OptimizationConfig optimizer_config = builder.build_optimizer_config();
    const auto group = config_.create_server();
    group->barrier("the cluster's start");
    serve_parameters(*group, optimizer_config);
    return nullptr;
  }
  config_.create_device_setter(args);
  const auto train_rows = std::make_shared<InputReader>(
      builder.build_input("train", args.batch_size, /*epochs=*/0, /*shuffle=*/true));
  const bool evaluates = !dataset.source("eval").empty();
  const auto eval_rows = evaluates ? std::make_shared<InputReader>(builder.build_input(
                                         "eval", args.batch_size, 1, /*shuffle=*/false))
                                   : nullptr;
  std::shared_ptr<optim::Optimizer> optimizer = builder.build_optimizer();
  std::shared_ptr<ParameterServers> servers;
  if (cluster.distributed()) {
    const auto group = config_.create_server();
    group->barrier("the cluster's start");
    servers = std::make_shared<ParameterServers>(group, optimizer->parameters());
  }
  const bool worker = servers && !servers->is_chief();

  // The core runs the job: the model builder as a task, its readers as
  // datasets, TensorFX's arguments as the trainer's config.
  Trainer* running = nullptr;
  const auto global_step = [&running] { return running ? running->global_step() : int64_t{0}; };
  std::shared_ptr<InstanceDataset> train_data, eval_data;
  if (worker) {
    // A worker's own shard, its order depending on the step it starts at
    // (worker 0 of one starting at step 0 reads as one process does).
    train_data = std::make_shared<InstanceDataset>([&, train_rows] {
      const int64_t index = servers->worker_index(), workers = cluster.num_workers;
      if (index >= train_rows->rows())
        throw Error("worker " + std::to_string(index) +
                    " has no training rows: the training data has " +
                    std::to_string(train_rows->rows()) + " rows for " + std::to_string(workers) +
                    " workers");
      return train_rows->shard(index, workers, /*epochs=*/0,
                               static_cast<uint64_t>(index + workers * global_step()));
    });
  } else if (!servers) {
    train_data = std::make_shared<InstanceDataset>([train_rows] { return *train_rows; });
  }
  if (evaluates && !worker)
    eval_data = std::make_shared<InstanceDataset>([eval_rows] { return *eval_rows; });
  const auto task = std::make_shared<ModelBuilderTask>(builder, train_data, eval_data, global_step);
  auto experiment = std::make_shared<config::ExperimentConfig>();
  experiment->task = std::make_shared<ModelBuilderTaskConfig>();
  experiment->trainer.optimizer_config = builder.build_optimizer_config();
  experiment->trainer.max_to_keep = 5;
  experiment->runtime.device = "cpu";
  const int64_t limit =
      last_step(args, train_rows->rows(), servers ? cluster.num_workers : int64_t{1});
  experiment->trainer.train_steps = limit;
  experiment->trainer.steps_per_loop = args.log_interval_steps;
  if (args.seed >= 0) experiment->runtime.seed = args.seed;
  const auto strategy = servers ? parameter_server_strategy(servers) : single_process_strategy();
  Trainer trainer(experiment, task, task->build_model(), optimizer,
                  worker || !evaluates ? TrainerMode::kTrain : TrainerMode::kTrainAndEvaluate,
                  strategy, nullptr, train_data, eval_data);
  running = &trainer;
  if (worker) {
    // Its own random stream (dropout): --seed plus 1 plus its index;
    // unseeded, each process's generator starts from its own random seed.
    if (args.seed >= 0)
      torch::manual_seed(static_cast<uint64_t>(args.seed + 1 + servers->worker_index()));
    trainer.run_async_worker();
    return nullptr;
  }

  fs::create_directories(root / "checkpoints");
  write_file_atomically((root / "job.yaml").string(), job_yaml(args, config_));
  CheckpointManager checkpoints((root / "checkpoints").string(), 5, "model.ckpt");
  ControllerOptions options;
  options.steps_per_loop = args.log_interval_steps;
  options.summary_interval = 0;     // TensorFX's own summaries (TrainingReport)
  options.checkpoint_interval = 0;  // by time, below
  options.checkpoint_on_preemption = true;
  options.log_progress = false;
  // A loss that is not finite stops the run (no recovery: TensorFX has none).
  options.recovery =
      RecoveryOptions{std::numeric_limits<double>::max(), 0, 0, "lower --learning-rate"};
  Controller controller(&trainer, evaluates ? &trainer : nullptr, &checkpoints, options);
  if (const auto latest = checkpoints.latest_checkpoint()) {
    // A checkpoint of TensorFX's own loop, before it ran on the core, says
    // its step and input position in its own keys.
    CheckpointData data = read_checkpoint_file(*latest);
    if (data.meta.contains("global_steps") && !data.meta.contains("global_step")) {
      data.meta["global_step"] = data.meta.at("global_steps");
      data.meta["train_data"] = {{"epoch", data.meta.value("epoch", int64_t{0})},
                                 {"position", data.meta.value("position", int64_t{0})}};
    }
    controller.restore_checkpoint(*latest, &data);
  } else {
    controller.restore_checkpoint();
  }
  SummaryWriter train_summaries((root / "summaries" / "train").string());
  SummaryWriter eval_summaries((root / "summaries" / "eval").string());
  write_graphs(train_summaries, eval_summaries, root / "summaries" / "prediction", builder.module(),
               builder.model_name(), trainer.global_step());
  controller.add_train_action(
      TrainingReport(trainer, train_summaries, builder.module(), args.log_interval_steps, limit));
  const auto save_and_evaluate = [&] {
    controller.save_checkpoint();
    if (!evaluates) return;
    // One full pass over the eval source.
    const Logs logs = controller.evaluate();
    const double metric = to_double(logs.at(builder.evaluation_metric()));
    eval_summaries.scalar("metrics/" + builder.evaluation_metric(), metric, trainer.global_step());
    eval_summaries.flush();
    log_info() << "Global steps: " << trainer.global_step() << "; Evaluation metric: " << std::fixed
               << std::setprecision(3) << metric;
  };
  try {
    trainer.init_async();
    // A checkpoint and an evaluation after the first step of the run, then
    // at the first log line --checkpoint-interval-secs after the last, and
    // at the end.
    auto last_save = Clock::now();
    int64_t saved_at = -1;
    for (bool first = true; trainer.global_step() < limit; first = false) {
      const int64_t step = trainer.global_step();
      controller.train(
          first ? step + 1
                : std::min(limit, (step / args.log_interval_steps + 1) * args.log_interval_steps),
          /*checkpoint_at_completion=*/false);
      if (first ||
          Clock::now() - last_save >= std::chrono::seconds(args.checkpoint_interval_secs)) {
        save_and_evaluate();
        saved_at = trainer.global_step();
        last_save = Clock::now();
      }
    }
    if (saved_at != trainer.global_step()) save_and_evaluate();
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
