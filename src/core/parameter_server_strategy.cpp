// Asynchronous training with parameter servers (core/parameter_server.h) as
// a strategy: the chief coordinates the workers' steps and holds the model
// they make; a worker computes steps and pushes its gradients.
#include "garden/core/minimizer.h"
#include "garden/core/parameter_server.h"
#include "garden/core/strategy.h"
#include "garden/optim/optimizer.h"
#include "garden/platform/stop_signals.h"

namespace garden {

namespace {

class ParameterServerStrategy final : public DistributionStrategy {
 public:
  explicit ParameterServerStrategy(std::shared_ptr<ParameterServers> servers)
      : servers_(std::move(servers)) {}

  bool is_chief() const override { return servers_->is_chief(); }
  bool one_process() const override { return false; }
  bool computes_steps() const override { return !servers_->is_chief(); }
  Coordinator* coordinator() override { return servers_->is_chief() ? servers_.get() : nullptr; }

  void init_async(const optim::Optimizer& optimizer, int64_t global_step) override {
    if (servers_->is_chief()) servers_->initialize(optimizer, global_step);
  }

  int64_t coordinate_steps(int64_t target, optim::Optimizer& optimizer,
                           std::map<std::string, ScalarMean>& means) override {
    if (!servers_->is_chief()) return DistributionStrategy::coordinate_steps(target, optimizer, means);
    servers_->schedule(target);
    const auto progress = servers_->join_steps(target);
    servers_->pull_state(optimizer);
    for (const auto& [key, sum_steps] : progress.scalars) {
      const double mean =
          sum_steps.first / static_cast<double>(std::max<int64_t>(1, sum_steps.second));
      means[key].add(mean, /*weighted=*/false);
    }
    return progress.examples;
  }

  void run_worker(const std::function<WorkerStep(int64_t)>& compute) override {
    if (servers_->is_chief()) return DistributionStrategy::run_worker(compute);
    while (const auto step = servers_->next_step()) {
      servers_->pull();
      const WorkerStep done = compute(*step);
      servers_->push(pending_push_, done.scalars, done.examples);
      pending_push_.clear();
    }
  }

  DatasetPtr distribute_dataset(const DatasetFn& dataset_fn,
                                const config::DataConfig& params) const override {
    // The chief reads the validation data whole. Each worker's step is a
    // whole global batch (steps are not split over workers); with sharding,
    // each worker reads its own shard.
    if (servers_->is_chief() || !params.sharding) return dataset_fn(params, InputContext{});
    InputContext context;
    context.num_input_pipelines = servers_->num_workers();
    context.input_pipeline_id = servers_->worker_index();
    return dataset_fn(params, context);
  }

  void attach(Minimizer& minimizer, optim::Optimizer& optimizer, const config::ExperimentConfig&,
              std::function<int64_t()>) override {
    if (servers_->is_chief()) return;
    // The worker's optimizer transforms the whole gradient (unscale,
    // clipping, noise); the ps tasks update the weights.
    optim::Optimizer* transform = &optimizer;
    minimizer.set_apply([this, transform] {
      if (!transform->transform_gradients(pending_push_)) pending_push_.clear();
    });
  }

  bool stop_requested() const override {
    // The coordinator also stops for a signal any worker reported.
    if (servers_->is_chief() && servers_->signal_from_workers() != 0) return true;
    return DistributionStrategy::stop_requested();
  }

  bool checkpoint_holds_input_position() const override { return false; }

 private:
  std::shared_ptr<ParameterServers> servers_;
  std::vector<at::Tensor> pending_push_;
};

}  // namespace

std::shared_ptr<DistributionStrategy> parameter_server_strategy(
    std::shared_ptr<ParameterServers> servers) {
  return std::make_shared<ParameterServerStrategy>(std::move(servers));
}

}  // namespace garden
