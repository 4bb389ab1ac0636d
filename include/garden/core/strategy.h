// How a Trainer spreads its work over processes: Model Garden's distribution
// strategies (tf.distribute's OneDevice, MultiWorkerMirrored and
// ParameterServer), as Marian's GraphGroup subclasses are for its training.
// The Trainer asks its strategy and branches on none of them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/core/checkpoint.h"
#include "garden/core/metrics.h"
#include "garden/core/step_scalars.h"
#include "garden/core/task.h"
#include "garden/distribute/process_group.h"

namespace garden {

class Coordinator;
class Minimizer;
class ParameterServers;
namespace optim {
class Optimizer;
}

class DistributionStrategy {
 public:
  using DatasetFn =
      std::function<DatasetPtr(const config::DataConfig&, const InputContext& context)>;
  virtual ~DistributionStrategy() = default;

  // ---- who this process is
  // Whether it writes checkpoints and summaries.
  virtual bool is_chief() const { return true; }
  // One process alone (what CUDA graphs of the step need).
  virtual bool one_process() const { return true; }
  // The synchronous workers' group; null without one.
  virtual const distribute::ProcessGroupPtr& process_group() const;
  // Whether this process computes training steps itself: the
  // parameter-server chief schedules the workers' instead (coordinate_steps).
  virtual bool computes_steps() const { return true; }

  // ---- asynchronous training (Model Garden's names)
  // The parameter-server chief's coordinator; null otherwise.
  virtual Coordinator* coordinator() { return nullptr; }
  // The chief: sends the ps tasks the weights and the optimizer's state.
  virtual void init_async(const optim::Optimizer& optimizer, int64_t global_step);
  // The chief: lets the workers run to step `target`, joins them and takes
  // the weights and optimizer state they made; their scalar logs go into
  // `means` (the mean over the steps). Returns their examples.
  virtual int64_t coordinate_steps(int64_t target, optim::Optimizer& optimizer,
                                   std::map<std::string, ScalarMean>& means);
  // A worker: computes the steps the chief schedules, `compute` running
  // each (the step's number), until the chief ends the run.
  struct WorkerStep {
    std::map<std::string, double> scalars;
    int64_t examples = 0;
  };
  virtual void run_worker(const std::function<WorkerStep(int64_t step)>& compute);

  // ---- the input
  // This process's input pipeline for `params`: the whole input in one
  // process; a worker's shard or rows of each global batch otherwise.
  virtual DatasetPtr distribute_dataset(const DatasetFn& dataset_fn,
                                        const config::DataConfig& params) const;

  // ---- each step
  // Puts what the strategy does into each training step (the gradient
  // all-reduce; a parameter-server worker's push). `global_step` names the
  // step in messages.
  virtual void attach(Minimizer& minimizer, optim::Optimizer& optimizer,
                      const config::ExperimentConfig& config, std::function<int64_t()> global_step);
  // Before each step, every worker agrees whether one ran out of training
  // data (an error naming how many) and whether one was asked to stop.
  virtual void agree_on_step(bool has_batch, int64_t next_step);
  // Whether a stop signal asked the run to stop, agreed by every worker.
  virtual bool stop_requested() const;
  // Counts a step's examples: at once in one process (a checkpoint between
  // steps holds them), or until the loop's end over several.
  virtual void count_examples(int64_t examples, int64_t& examples_seen);
  // Whether any worker holds `value` (a validation batch).
  virtual bool any_worker(bool value, const std::string& what) const;

  // ---- a loop's end
  // Folds the loop's step scalars into `means` (one value per step and
  // key) over every worker; returns the examples counted till the loop's
  // end.
  virtual int64_t fold_loop(const std::vector<StepScalars>& steps, int64_t global_step,
                            std::map<std::string, ScalarMean>& means);
  // Every worker's metric state reduced into each one's.
  virtual void reduce_metrics(MetricList& metrics, const std::string& what) const;
  // Logs of the strategy's own (the all-reduce's wait).
  virtual void add_loop_logs(Logs& logs);
  // An evaluation's scalar means and batch count over every worker.
  virtual void reduce_evaluation(std::map<std::string, ScalarMean>& means, int64_t& batches) const;
  // The task's aggregated logs (decoded ids, strings) of every worker.
  virtual Logs gather_aggregated_logs(const Logs& local) const;

  // ---- checkpoints
  // Whether a checkpoint's meta holds this process's input position
  // ("train_data"); several workers' go in "workers" instead.
  virtual bool checkpoint_holds_input_position() const { return true; }
  // The workers a checkpoint holds the state of, and this one's suffix of
  // the random-state tensors ("", "/<rank>").
  virtual int64_t num_workers() const { return 1; }
  virtual std::string random_state_suffix() const { return ""; }
  // This process's input position in a checkpoint's meta (null: none).
  virtual nlohmann::json input_position(const nlohmann::json& meta) const;
  // Adds every worker's input position and random state (a collective).
  virtual void add_worker_states(CheckpointData& data, const DatasetPtr& train_data,
                                 const at::Device& device) const;
};

// One process.
std::shared_ptr<DistributionStrategy> single_process_strategy();
// Synchronous data parallelism over `group`: gradients all-reduced in
// buckets that overlap the backward pass (runtime.bucket_cap_mb).
std::shared_ptr<DistributionStrategy> mirrored_strategy(distribute::ProcessGroupPtr group);
// Asynchronous training with parameter servers (core/parameter_server.h):
// the chief coordinates, a worker pushes its gradients to the ps tasks.
std::shared_ptr<DistributionStrategy> parameter_server_strategy(
    std::shared_ptr<ParameterServers> servers);

// The group of the synchronous training this process computes steps in:
// set while a mirrored strategy exists (tf.distribute's replica context);
// null in one process and under parameter servers. What a model's
// cross-replica layers (a synchronized batch norm) sum over.
distribute::ProcessGroupPtr replica_group();

// The state of the CPU's default generator, and of a device's (a CUDA
// device's), on the host: what a checkpoint keeps of each worker.
at::Tensor cpu_random_state();
at::Tensor device_random_state(const at::Device& device);
// Puts a state those return back into the generator.
void set_cpu_random_state(const at::Tensor& state);
void set_device_random_state(const at::Device& device, const at::Tensor& state);

}  // namespace garden
