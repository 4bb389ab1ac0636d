// TensorFX's training API (tensorfx.training; garden::fx is TensorFX, not
// torch.fx) on Garden: ModelArguments,
// Configuration, ModelBuilder and ModelTrainer, with TensorFX's names.
//
//   auto args = fx::ModelArguments::parse<fx::FeedForwardClassificationArguments>(argv_list);
//   auto dataset = fx::DataSet::csv(args->data_schema, args->data_metadata,
//                                   args->data_features,
//                                   {{"train", args->data_train}, {"eval", args->data_eval}});
//   fx::FeedForwardClassification classification(args);
//   fx::ModelTrainer trainer;  // Configuration::environment()
//   auto model = trainer.train(classification, dataset, args->output);
//
// TensorFlow's graphs become a LibTorch module and the functions each phase
// runs (docs/tensorfx.md has the table).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include "garden/config/optimization.h"
#include "garden/fx/data.h"
#include "garden/optim/optimizer.h"

namespace garden::distribute {
class ProcessGroup;
struct Cluster;
}  // namespace garden::distribute

namespace garden::fx {

// ---- arguments ------------------------------------------------------------------

// TensorFX's argument parser: `--name value` or `--name=value`, flags, and
// indexed list arguments (`--hidden-layers:1 20 --hidden-layers:2 10`, 1-based).
// An unknown or malformed argument is one garden::Error line.
class ArgumentParser {
 public:
  void add(const std::string& flag, std::string* target, const std::string& help,
           std::vector<std::string> choices = {});
  void add(const std::string& flag, std::optional<std::string>* target, const std::string& help);
  void add(const std::string& flag, int64_t* target, const std::string& help);
  void add(const std::string& flag, double* target, const std::string& help);
  void add_flag(const std::string& flag, bool* target, const std::string& help);
  // `--flag:N value` sets element N (1-based); `--flag value` element 1.
  void add_indexed(const std::string& flag, std::vector<std::optional<int64_t>>* target,
                   const std::string& help);
  void parse(const std::vector<std::string>& args) const;
  std::string help() const;

 private:
  struct Option {
    std::string flag, help;
    std::function<void(const std::string& value, const std::string& as_given)> set;
    bool takes_value = true;
    bool indexed = false;
    std::function<void(int64_t index, const std::string& value, const std::string& as_given)>
        set_at;
  };
  const Option* find(const std::string& flag) const;
  std::vector<Option> options_;
};

// tensorfx.training.ModelArguments: the job's and the session's arguments.
// A model adds its own in init_parser (calling the base's) and checks or
// derives them in process().
class ModelArguments {
 public:
  virtual ~ModelArguments() = default;

  // Job.
  std::string data_schema, data_metadata, data_features, data_train, data_eval;
  std::string output;  // --output, or --job-dir
  // Session.
  int64_t max_steps = 1000;
  int64_t batch_size = 128;
  int64_t epochs = 0;  // 0: no limit
  int64_t checkpoint_interval_secs = 300;
  // Logging.
  std::string log_level = "INFO";
  std::string log_level_tensorflow = "ERROR";
  bool log_device_placement = false;
  int64_t log_interval_steps = 100;
  // Garden's addition: seeds LibTorch's generator (-1: unseeded, as TensorFX).
  int64_t seed = -1;
  // The command line as given (job.yaml).
  std::vector<std::string> raw_args;

  virtual void init_parser(ArgumentParser& parser);
  // A parser with this class's arguments.
  ArgumentParser build_parser();
  // Checks the values after parsing (throws garden::Error with one line).
  virtual void process();

  // TensorFX's parse(args, parse_job): the job arguments are always parsed
  // (parse_job is accepted for compatibility).
  template <class T = ModelArguments>
  static std::shared_ptr<T> parse(const std::vector<std::string>& args, bool parse_job = true) {
    (void)parse_job;
    auto parsed = std::make_shared<T>();
    parsed->parse_into(args);
    return parsed;
  }
  // TensorFX's default(): parse([]).
  template <class T = ModelArguments>
  static std::shared_ptr<T> defaults() {
    return parse<T>({});
  }

 protected:
  void parse_into(const std::vector<std::string>& args);
};

// ---- configuration --------------------------------------------------------------

// tensorfx.training.Configuration: which task of which cluster this process
// is, from TF_CONFIG ({"task": {"type", "index"}, "cluster": {...}, "job":
// {...}}). A process with no TF_CONFIG is the local master.
//
// A distributed configuration runs on Garden's parameter-server engine
// (runtime.distribution_strategy: parameter_server, docs/distributed.md):
// the master is the chief (it coordinates, checkpoints, evaluates and
// exports), each worker computes gradients on its own shard of the training
// data, and the ps tasks hold the weights and apply the updates. `chief`
// (what `garden launch --ps=K` writes) is read as master.
class Configuration {
 public:
  Configuration(nlohmann::json task, nlohmann::json cluster, nlohmann::json job,
                nlohmann::json env);
  // From the TF_CONFIG environment variable (the local master when unset).
  static Configuration environment();
  // From a TF_CONFIG text.
  static Configuration from_tf_config(const std::string& text);
  static Configuration local();

  const nlohmann::json& task() const { return task_; }
  const nlohmann::json& cluster() const { return cluster_; }
  const nlohmann::json& job() const { return job_; }
  const nlohmann::json& env() const { return env_; }
  std::string task_type() const;
  int64_t task_index() const;
  // "/job:<type>/task:<index>".
  std::string device() const;
  bool distributed() const { return !cluster_.is_null(); }
  bool master() const { return task_type() == "master" || task_type() == "chief"; }
  bool param_server() const { return task_type() == "ps"; }
  bool worker() const { return task_type() == "worker"; }
  // Where this process stands in Garden's cluster terms (rank, workers, ps
  // tasks, the master's address). Throws garden::Error with one line when
  // the cluster cannot be trained on: no ps tasks (TensorFX keeps every
  // variable on the parameter servers), no worker, or a malformed entry.
  distribute::Cluster resolve() const;
  // TensorFlow's tf.train.Server: this process's connection to the
  // cluster's c10d process group (rendezvous at the master's address);
  // nullptr when not distributed. Blocks until every task has joined.
  std::shared_ptr<distribute::ProcessGroup> create_server() const;
  // tf.train.replica_device_setter: where the training graph's variables
  // and operations go, as a description ("" in one process): the variables
  // on /job:ps (sharded by size over the ps tasks), the computation here.
  std::string create_device_setter(const ModelArguments& args) const;

 private:
  nlohmann::json task_, cluster_, job_, env_;
};

// ---- model builder ----------------------------------------------------------------

// build_inference's and build_output's results: named tensors and, for
// labels, strings.
struct Values {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::vector<std::string>> strings;
};

// build_input's result: batches of transformed instances of one source.
class InputReader {
 public:
  InputReader(Transformed all, int64_t batch, int64_t epochs, bool shuffle, uint64_t seed);
  // The next batch; nullopt after `epochs` passes (0: never). The last batch
  // of a pass may be smaller.
  std::optional<Transformed> next();
  // The row numbers of the next batch (what next() would give), for take().
  std::optional<std::vector<int64_t>> next_rows();
  // The given rows, in that order.
  Transformed take(const std::vector<int64_t>& rows) const;
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  void seek(int64_t epoch, int64_t position);
  int64_t rows() const { return all_.rows; }
  // A reader of the rows whose index modulo `count` is `index` (a worker's
  // shard), from the first epoch, with its own seed.
  InputReader shard(int64_t index, int64_t count, int64_t epochs, uint64_t seed) const;

 private:
  void reorder();
  Transformed all_;
  int64_t batch_, epochs_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, position_ = 0;
};

// One evaluation batch's contribution to the metric (a streaming mean).
struct EvaluationValue {
  double sum = 0.0;
  double count = 0.0;
};

class ModelBuilder;

// TensorFX's three graphs, as what each phase runs.
struct TrainingGraph {
  InputReader input;
  std::shared_ptr<optim::Optimizer> optimizer;
  // Inference, loss and backward on a batch (the parameters' .grad); the loss.
  std::function<double(const Transformed&, int64_t global_steps)> gradient_op;
  // One step on a batch: gradient_op, then the optimizer's update; the loss.
  std::function<double(const Transformed&, int64_t global_steps)> train_op;
};
struct EvaluationGraph {
  InputReader input;
  std::string metric;  // "accuracy"
  std::function<EvaluationValue(const Transformed&)> eval_op;
};
struct PredictionGraph {
  // Instances (CSV lines or serialized tf.Example) to outputs.
  std::function<Values(const std::vector<std::string>& instances)> predict;
};

// tensorfx.training.ModelBuilder. A model implements build_init (its module),
// build_inference, build_training, build_output and build_evaluation.
class ModelBuilder {
 public:
  explicit ModelBuilder(std::shared_ptr<ModelArguments> args);
  virtual ~ModelBuilder() = default;

  const ModelArguments& args() const { return *args_; }
  std::shared_ptr<ModelArguments> args_ptr() const { return args_; }
  // Set by build_graph_interfaces.
  const DataSet& dataset() const;

  struct Interfaces {
    TrainingGraph training;
    EvaluationGraph evaluation;
    PredictionGraph prediction;
  };
  // The three graphs over one module (built once, by build_init).
  virtual Interfaces build_graph_interfaces(const DataSet& dataset, const Configuration& config);
  // Binds the data set and runs build_init once (what prediction needs).
  void prepare(const DataSet& dataset);
  TrainingGraph build_training_graph();
  EvaluationGraph build_evaluation_graph();
  PredictionGraph build_prediction_graph();

  // Creates and initializes the module's weights (TensorFX's variables and
  // their initializers); the dataset is known by then.
  virtual void build_init() = 0;
  // The source's instances, transformed (the features, when the data set has
  // them; otherwise its numeric fields by name), in batches.
  InputReader build_input(const std::string& source, int64_t batch, int64_t epochs, bool shuffle);
  virtual Values build_inference(const Transformed& inputs, bool training) = 0;
  // The loss to minimize (the trainer runs backward and the optimizer).
  virtual at::Tensor build_training(int64_t global_steps, const Transformed& inputs,
                                    const Values& inferences) = 0;
  virtual Values build_output(const Transformed& inputs, const Values& inferences) = 0;
  virtual EvaluationValue build_evaluation(const Transformed& inputs, const Values& outputs) = 0;
  // The optimizer (TensorFX builds it inside build_training), as Garden's
  // optimizer config: any of Garden's optimizers and learning-rate
  // schedules. A parameter server builds the same one over its shard.
  virtual config::OptimizationConfig build_optimizer_config() = 0;
  // That optimizer over the module's parameters.
  std::shared_ptr<optim::Optimizer> build_optimizer();
  virtual std::string evaluation_metric() const { return "accuracy"; }
  // The name the model is registered under (fx::register_model), which an
  // export records so that prediction can rebuild it; "" cannot be exported.
  virtual std::string model_name() const { return ""; }
  // The module holding every weight (checkpointed and exported).
  virtual torch::nn::Module& module() = 0;

 protected:
  std::shared_ptr<ModelArguments> args_;
  const DataSet* dataset_ = nullptr;
  bool initialized_ = false;
};

// ---- trainer --------------------------------------------------------------------------

// tensorfx.prediction.Model: an exported model (output/model) that predicts.
class Model;

// tensorfx.training.ModelTrainer. train() writes TensorFX's job directory:
//   job.yaml              the arguments and TF_CONFIG
//   checkpoints/          model.ckpt-N (the last 5), resumed from when present
//   summaries/train       metrics/loss, metrics/throughput
//   summaries/eval        metrics/<metric> after each checkpoint
//   model/                the exported model, for `garden fx predict` and Model::load
// A checkpoint and a full evaluation pass follow the first step and then
// every --checkpoint-interval-secs, and the end of training, which also
// exports. Returns the exported model on the master.
//
// With a distributed Configuration the master writes the job directory as
// above while the workers compute the steps (each on the training rows
// whose index modulo the number of workers is its own) and the ps tasks
// apply them; --epochs then counts passes of all the workers together
// over the whole training data. Only the master writes anything.
class ModelTrainer {
 public:
  explicit ModelTrainer(std::optional<Configuration> config = std::nullopt);
  const Configuration& config() const { return config_; }
  std::shared_ptr<Model> train(ModelBuilder& model_builder, const DataSet& dataset,
                               const std::string& output);

 private:
  Configuration config_;
};

}  // namespace garden::fx
