// Asynchronous training with parameter servers
// (runtime.distribution_strategy: parameter_server), over c10d messages.
//
//   rank 0           the chief (coordinator): schedules steps, joins them,
//                    checkpoints, evaluates, writes summaries
//   ranks 1..W       workers: compute gradients on their own batches
//   ranks W+1..W+K   ps tasks: hold the weights and the optimizer's slots,
//                    shard by shard (balanced by size), and update them
//
// A worker's step: a step number from ps 0 (the chief schedules
// steps_per_loop at a time, as Model Garden's coordinator schedules steps,
// and joins them before it checkpoints or evaluates); pull the weights from
// every ps; forward and backward on its batch; transform the gradients
// (unscale, clipping, privacy noise) over the whole model; push each ps its
// shard's gradients, which the ps applies at once. Workers do not wait for
// each other, so a gradient may come from weights another worker has since
// updated (asynchronous, as in TensorFlow). With one worker the updates are
// those of one process.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "garden/base/types.h"
#include "garden/config/optimization.h"
#include "garden/core/trainer.h"
#include "garden/distribute/process_group.h"
#include "garden/optim/named_parameter.h"
#include "garden/optim/optimizer.h"

namespace garden {

// The ps each parameter lives on: largest first onto the ps holding the
// fewest elements so far (ties: the lower index). The same in every process.
std::vector<int64_t> assign_shards(const std::vector<int64_t>& sizes, int64_t num_ps);

// A ps task: holds its shard (sent by the chief) and serves the chief and
// the workers until the run ends. Returns when the chief finished; throws
// garden::Error when the chief stopped on an error, Preempted when on a
// signal.
void serve_parameters(distribute::ProcessGroup& group,
                      const config::OptimizationConfig& optimizer_config);

// The chief's and the workers' side of the protocol.
class ParameterServers : public Coordinator {
 public:
  // `parameters`: the model's trainable parameters, in the optimizer's order.
  ParameterServers(distribute::ProcessGroupPtr group,
                   std::vector<optim::NamedParameter> parameters);
  ~ParameterServers() override;

  bool is_chief() const { return group_->is_chief(); }
  int64_t num_workers() const { return group_->cluster().num_workers; }
  // This worker among the workers (0..num_workers-1).
  int64_t worker_index() const { return group_->rank() - 1; }
  // The ps holding each parameter (index into the ps tasks).
  const std::vector<int64_t>& shards() const { return shard_of_; }

  // ---- the chief --------------------------------------------------------------
  // Sends every ps its shard of the weights and the optimizer's state, and
  // `global_step`, where the run continues.
  void initialize(const optim::Optimizer& optimizer, int64_t global_step);
  // Lets the workers run up to global step `step`.
  void schedule(int64_t step);
  // What the workers reported between two joins.
  struct Progress {
    std::map<std::string, std::pair<double, int64_t>> scalars;  // key: (sum, steps)
    int64_t examples = 0;
  };
  // A stop signal (SIGTERM / SIGINT) some worker received, reported with its
  // gradients, or 0: the chief checkpoints and ends the run as for its own.
  int signal_from_workers() const { return worker_signal_; }
  // Waits until every ps has applied `step` updates.
  Progress join_steps(int64_t step);
  // Coordinator::join: waits for every scheduled step.
  void join() override;
  // The ps tasks' weights into the parameters, their slots and iteration
  // count into `optimizer`.
  void pull_state(optim::Optimizer& optimizer);
  // Ends the run for every worker and ps: "done", "preempted" or an error's
  // text. Best effort and once; the destructor says "error" when the chief
  // did not.
  void stop(const std::string& reason);

  // ---- a worker ---------------------------------------------------------------
  // The global step this worker computes next; nullopt when the run ended
  // ("done"). Throws when the chief stopped on an error or a signal.
  std::optional<int64_t> next_step();
  // The current weights into the parameters.
  void pull();
  // Each ps its shard's `gradients` (the optimizer's order, transformed; an
  // empty vector: the loss scaler skipped this step), with the step's
  // scalar logs and examples for ps 0 to sum, and this process's pending
  // stop signal.
  void push(const std::vector<at::Tensor>& gradients, const std::map<std::string, double>& scalars,
            int64_t examples);

 private:
  int64_t ps_rank(int64_t shard) const { return 1 + num_workers() + shard; }

  distribute::ProcessGroupPtr group_;
  std::vector<optim::NamedParameter> parameters_;
  std::vector<int64_t> shard_of_;
  std::vector<std::vector<std::size_t>> members_;  // per ps: parameter indices
  int64_t scheduled_ = 0;
  bool stopped_ = false;
  int worker_signal_ = 0;
};

}  // namespace garden
