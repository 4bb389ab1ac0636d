// Model Garden's base_trainer.Trainer (an Orbit StandardTrainer and
// StandardEvaluator): runs the Task's steps over the datasets, keeps the
// global step, the loss means and the metrics.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "garden/config/definitions.h"
#include "garden/core/checkpoint.h"
#include "garden/core/minimizer.h"
#include "garden/core/step_scalars.h"
#include "garden/core/task.h"
#include "garden/distribute/process_group.h"

namespace garden {

class Trainer;
class DistributionStrategy;
class StepGraphs;

// Called after each evaluation with its logs (best-checkpoint export).
class CheckpointExporter {
 public:
  virtual ~CheckpointExporter() = default;
  virtual void maybe_export_checkpoint(Trainer& trainer, const Logs& eval_logs,
                                       int64_t global_step) = 0;
};

// Stands for the parameter-server coordinator of asynchronous training; one
// process has none.
class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual void join() = 0;
};

// What a Trainer does: Model Garden's Trainer(train=..., evaluate=...).
enum class TrainerMode { kTrain, kEvaluate, kTrainAndEvaluate };

class Trainer {
 public:
  using LoopFn = std::function<void(int64_t num_steps)>;
  using EvalLoopFn = std::function<Logs(int64_t num_steps)>;
  using DatasetFn =
      std::function<DatasetPtr(const config::DataConfig&, const InputContext& context)>;

  // `strategy` spreads the work over processes (core/strategy.h; null: one
  // process). The datasets are built from the task's data configs unless
  // given.
  Trainer(std::shared_ptr<const config::ExperimentConfig> config, TaskPtr task, ModelPtr model,
          std::shared_ptr<optim::Optimizer> optimizer,
          TrainerMode mode = TrainerMode::kTrainAndEvaluate,
          std::shared_ptr<DistributionStrategy> strategy = nullptr,
          std::shared_ptr<CheckpointExporter> checkpoint_exporter = nullptr,
          DatasetPtr train_dataset = nullptr, DatasetPtr validation_dataset = nullptr);
  ~Trainer();

  // Orbit's AbstractTrainer.train: begin, num_steps steps, end.
  Logs train(int64_t num_steps);
  // Orbit's AbstractEvaluator.evaluate: num_steps = -1 runs until the
  // validation data ends. Starts from the beginning of the validation data.
  Logs evaluate(int64_t num_steps);

  void train_loop_begin();
  // The metric results, training_loss (the mean of the steps' "loss"), the
  // mean of every other scalar the steps returned (loss parts such as
  // masked_lm_loss) under its own name, and learning_rate; then resets them.
  Logs train_loop_end();
  void eval_begin();
  // Validation metrics, validation_loss, every other scalar the steps
  // returned, and the task's reduced logs. Losses are weighted by what they
  // average (tokens, examples), so the result does not depend on the
  // validation batch size. An evaluation that saw no batch is an error.
  Logs eval_end(const Logs& aggregated_logs);
  // Folds one step's outputs into the evaluation state (task.aggregate_logs).
  void eval_reduce(Logs& state, const Logs& step_outputs);

  // The next training batch, on the device (training data repeats forever
  // unless it is finite, in which case the end is an error).
  Batch next_train_inputs();
  // Throws, naming the validation data, when it gives no batch at all: run
  // at start, so an empty validation set is found before training.
  void check_validation_data();
  // The next validation batch plus pass-through logs, or nullopt at the end.
  std::optional<std::pair<Batch, Logs>> next_eval_inputs();
  void train_step(const Batch& inputs);
  Logs eval_step(const Batch& inputs, const Logs& passthrough = {});
  LoopFn create_train_loop_fn();
  EvalLoopFn create_eval_loop_fn();

  // Restores task_config().init_checkpoint (task.initialize).
  void initialize();
  // Builds a dataset for this process's input pipeline (the strategy's):
  // the whole input in one process; over several workers, this worker's
  // shard (by file, or by record when there are fewer files than workers)
  // with sharding: true, or its rows of every global batch with sharding:
  // false.
  DatasetPtr distribute_dataset(const DatasetFn& dataset_fn, const config::DataConfig& params);
  // Asynchronous (parameter-server) training, Model Garden's names. On the
  // chief: init_async sends the ps tasks the weights and the optimizer state
  // (after a restore), join waits for every scheduled step, and
  // coordinator_for_async is the ParameterServers. In one process, or with
  // synchronous workers: nothing to do, and no coordinator.
  void init_async();
  void join();
  Coordinator* coordinator_for_async();
  // A parameter-server worker's whole run: steps from ps 0 until the chief
  // ends the run.
  void run_async_worker();

  int64_t global_step() const { return global_step_; }
  int64_t examples_seen() const { return examples_seen_; }
  const config::ExperimentConfig& config() const { return *config_; }
  Task& task() { return *task_; }
  Model& model() { return *model_; }
  ModelPtr model_ptr() { return model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  // The framework's part of each training step (gradient hooks go here).
  Minimizer& minimizer();
  MetricList& train_metrics() { return train_metrics_; }
  MetricList& validation_metrics() { return validation_metrics_; }
  const DatasetPtr& train_dataset() const { return train_dataset_; }
  const DatasetPtr& validation_dataset() const { return validation_dataset_; }
  CheckpointExporter* checkpoint_exporter() { return checkpoint_exporter_.get(); }
  const at::Device& device() const { return device_; }
  // The synchronous workers this Trainer trains with (null: none).
  const distribute::ProcessGroupPtr& process_group() const;
  bool is_chief() const;
  DistributionStrategy& strategy() { return *strategy_; }
  // Whether some worker received SIGTERM / SIGINT before the last training
  // step, agreed by all of them at that step (one process: this one).
  bool stop_requested() const;
  // Called after every training step with the new global step (progress).
  void set_step_observer(std::function<void(int64_t)> observer) {
    step_observer_ = std::move(observer);
  }
  // Called after every evaluation batch (the Controller stops an evaluation
  // there for a stop signal).
  void set_eval_batch_observer(std::function<void()> observer) {
    eval_batch_observer_ = std::move(observer);
  }

  // Everything a checkpoint holds: model, optimizer, global step, random
  // state, input position, task metadata, and the resolved config
  // (meta "params", params.yaml's text), so a checkpoint copied alone still
  // says how to rebuild its model.
  CheckpointData checkpoint_state() const;
  // With restore_input false the random state and the input position are
  // kept (recovery from a diverged loss moves on to new data).
  void restore_checkpoint_state(const CheckpointData& data, bool restore_input = true);
  // Whether the last restore set this process's random state (false when
  // the checkpoint was written by another number of workers).
  bool random_state_restored() const { return random_state_restored_; }
  // checkpoint_state() plus, over several workers, every worker's input
  // position and random state (meta "workers", tensors "rng/cpu/<rank>"):
  // a collective every worker calls at the same step.
  CheckpointData checkpoint_state_of_all_workers();

 private:
  Batch to_device(const Batch& batch) const;
  void swap_back_ema();
  // The task's step over `inputs` (in accumulation parts when asked), its
  // logs merged.
  Logs run_task_step(const Batch& inputs);
  // runtime.cuda_graphs (graphed_step.cpp): checks that this run's step can
  // be captured and sets up the graphs; the step then runs through them.
  void enable_cuda_graphs();
  Logs run_graphed_step(const Batch& inputs);
  // The parameter-server chief's loop: the workers' steps, coordinated.
  void wait_for_async_steps(int64_t num_steps);

  std::shared_ptr<const config::ExperimentConfig> config_;
  TaskPtr task_;
  ModelPtr model_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<DistributionStrategy> strategy_;
  DatasetPtr train_dataset_;
  DatasetPtr validation_dataset_;
  std::shared_ptr<CheckpointExporter> checkpoint_exporter_;
  at::Device device_{at::kCPU};
  int64_t global_step_ = 0;
  int64_t examples_seen_ = 0;
  std::unique_ptr<Minimizer> minimizer_;
  std::string params_yaml_;
  PendingStepScalars pending_scalars_;
  std::map<std::string, ScalarMean> train_scalars_;
  std::map<std::string, ScalarMean> eval_scalars_;
  int64_t eval_batches_ = 0;
  MetricList train_metrics_;
  MetricList validation_metrics_;
  std::function<void(int64_t)> step_observer_;
  std::function<void()> eval_batch_observer_;
  bool ema_swapped_ = false;
  bool random_state_restored_ = false;
  std::unique_ptr<StepGraphs> graphs_;
  // The logs of a captured step per batch shape: their tensors are the
  // graph's outputs, in order.
  std::map<std::string, Logs> graph_logs_;
};

}  // namespace garden
