// The strategy of one process: the defaults of DistributionStrategy.
#include "garden/core/strategy.h"

#include "garden/base/error.h"
#include "garden/platform/stop_signals.h"

namespace garden {

const distribute::ProcessGroupPtr& DistributionStrategy::process_group() const {
  static const distribute::ProcessGroupPtr none;
  return none;
}

void DistributionStrategy::init_async(const optim::Optimizer&, int64_t) {}

int64_t DistributionStrategy::coordinate_steps(int64_t, optim::Optimizer&,
                                               std::map<std::string, ScalarMean>&) {
  throw Error("coordinate_steps: this process is not a parameter-server chief");
}

void DistributionStrategy::run_worker(const std::function<WorkerStep(int64_t)>&) {
  throw Error("run_async_worker: this is not a ps worker");
}

DatasetPtr DistributionStrategy::distribute_dataset(const DatasetFn& dataset_fn,
                                                    const config::DataConfig& params) const {
  return dataset_fn(params, InputContext{});
}

void DistributionStrategy::attach(Minimizer&, optim::Optimizer&, const config::ExperimentConfig&,
                                  std::function<int64_t()>) {}

void DistributionStrategy::agree_on_step(bool, int64_t) {}

bool DistributionStrategy::stop_requested() const { return StopSignals::pending() != 0; }

void DistributionStrategy::count_examples(int64_t examples, int64_t& examples_seen) {
  examples_seen += examples;
}

bool DistributionStrategy::any_worker(bool value, const std::string&) const { return value; }

int64_t DistributionStrategy::fold_loop(const std::vector<StepScalars>& steps, int64_t,
                                        std::map<std::string, ScalarMean>& means) {
  // Model Garden's Mean of the steps' values (an Average's result).
  for (const auto& step : steps)
    for (const auto& scalar : step) {
      double number = 0.0;
      for (const auto& term : scalar.terms) number += term.weight * term.value;
      means[scalar.key].add(number, /*weighted=*/false);
    }
  return 0;
}

void DistributionStrategy::reduce_metrics(MetricList&, const std::string&) const {}

void DistributionStrategy::add_loop_logs(Logs&) {}

void DistributionStrategy::reduce_evaluation(std::map<std::string, ScalarMean>&, int64_t&) const {}

Logs DistributionStrategy::gather_aggregated_logs(const Logs& local) const { return local; }

nlohmann::json DistributionStrategy::input_position(const nlohmann::json& meta) const {
  return meta.contains("train_data") ? meta.at("train_data") : nlohmann::json();
}

void DistributionStrategy::add_worker_states(CheckpointData&, const DatasetPtr&,
                                             const at::Device&) const {}

std::shared_ptr<DistributionStrategy> single_process_strategy() {
  return std::make_shared<DistributionStrategy>();
}

}  // namespace garden
