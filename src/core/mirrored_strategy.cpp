// Synchronous data parallelism (Model Garden's multi_worker_mirrored): every
// worker runs the same step on its part of the global batch; gradients are
// summed over the workers in buckets while backward runs; every decision
// and every log is agreed or reduced over the workers.
#include <torch/torch.h>

#include <cstring>
#include <memory>
#include <mutex>

#include "garden/base/error.h"
#include "garden/core/minimizer.h"
#include "garden/core/strategy.h"
#include "garden/distribute/gradient_sync.h"
#include "garden/distribute/input.h"
#include "garden/optim/optimizer.h"
#include "garden/platform/stop_signals.h"

namespace garden {

namespace {

std::mutex replica_group_mutex;
std::weak_ptr<distribute::ProcessGroup> current_replica_group;

class MirroredStrategy final : public DistributionStrategy {
 public:
  explicit MirroredStrategy(distribute::ProcessGroupPtr group) : group_(std::move(group)) {
    std::lock_guard<std::mutex> lock(replica_group_mutex);
    current_replica_group = group_;
  }
  ~MirroredStrategy() override {
    std::lock_guard<std::mutex> lock(replica_group_mutex);
    if (current_replica_group.lock() == group_) current_replica_group.reset();
  }
  MirroredStrategy(const MirroredStrategy&) = delete;
  MirroredStrategy& operator=(const MirroredStrategy&) = delete;

  bool is_chief() const override { return group_->is_chief(); }
  bool one_process() const override { return false; }
  const distribute::ProcessGroupPtr& process_group() const override { return group_; }

  DatasetPtr distribute_dataset(const DatasetFn& dataset_fn,
                                const config::DataConfig& params) const override {
    if (!params.sharding)
      return distribute::split_batches(dataset_fn(params, InputContext{}), group_->rank(),
                                       group_->size(), params.is_training.value_or(false));
    InputContext context;
    context.num_input_pipelines = group_->size();
    context.input_pipeline_id = group_->rank();
    context.num_replicas_in_sync = group_->size();
    return dataset_fn(params, context);
  }

  void attach(Minimizer& minimizer, optim::Optimizer& optimizer,
              const config::ExperimentConfig& config,
              std::function<int64_t()> global_step) override {
    // The loss is each worker's share of the global mean, and the gradients
    // are summed over the workers while backward runs.
    std::vector<at::Tensor> parameters;
    for (const auto& parameter : optimizer.parameters()) parameters.push_back(parameter.tensor);
    const auto bucket_bytes = static_cast<int64_t>(config.runtime.bucket_cap_mb * 1024.0 * 1024.0);
    if (config.runtime.gradient_compression == "fp16" && !group_->can_sum(at::kHalf))
      throw Error("runtime.gradient_compression: fp16 needs float16 sums, which this LibTorch's " +
                  std::string(group_->device().is_cuda() ? "NCCL" : "Gloo") +
                  " does not have; leave it at none");
    gradient_sync_ = std::make_unique<distribute::GradientSync>(
        group_, parameters, bucket_bytes,
        config.runtime.gradient_compression == "fp16" ? distribute::GradientSync::Wire::kFloat16
                                                      : distribute::GradientSync::Wire::kAsIs);
    distribute::GradientSync* sync = gradient_sync_.get();
    minimizer.set_backward_observer([sync](bool last) { sync->begin_backward(last); });
    minimizer.add_gradient_hook([sync, global_step](std::vector<at::Tensor>& gradients) {
      sync->finish(gradients,
                   "the gradient all-reduce at step " + std::to_string(global_step() + 1));
    });
    distribute::ProcessGroup* group = group_.get();
    minimizer.set_count_reducer([group, global_step](const std::vector<at::Tensor>& counts) {
      std::vector<at::Tensor> stacked = {
          torch::stack(counts).to(torch::kFloat64).to(counts.front().device())};
      group->all_reduce(stacked, distribute::ReduceOp::kSum,
                        "the loss counts at step " + std::to_string(global_step() + 1));
      std::vector<at::Tensor> global;
      for (std::size_t i = 0; i < counts.size(); ++i)
        global.push_back(stacked[0][static_cast<int64_t>(i)].to(counts[i].scalar_type()));
      return global;
    });
  }

  void agree_on_step(bool has_batch, int64_t next_step) override {
    // The end of the data and a stop signal are decided by all workers.
    const auto agreed = group_->sum({has_batch ? 0.0 : 1.0, StopSignals::pending() ? 1.0 : 0.0},
                                    "the step agreement at step " + std::to_string(next_step));
    stop_agreed_ = agreed[1] > 0;
    if (agreed[0] > 0)
      throw Error("the training data ended on " + std::to_string(static_cast<int64_t>(agreed[0])) +
                  " of " + std::to_string(group_->size()) + " workers at step " +
                  std::to_string(next_step) +
                  "; set task.train_data.is_training: true so it repeats");
  }

  bool stop_requested() const override { return stop_agreed_; }

  void count_examples(int64_t examples, int64_t&) override { loop_examples_ += examples; }

  bool any_worker(bool value, const std::string& what) const override {
    return group_->sum({value ? 1.0 : 0.0}, what)[0] > 0;
  }

  int64_t fold_loop(const std::vector<StepScalars>& steps, int64_t global_step,
                    std::map<std::string, ScalarMean>& means) override {
    // A step's global value needs every worker's terms: an Average term by
    // term (value * count, count), anything else as a mean.
    using Terms = std::map<std::string, std::vector<std::array<double, 3>>>;
    std::vector<Terms> loop_steps;
    for (const auto& step : steps) {
      Terms& terms = loop_steps.emplace_back();
      for (const auto& scalar : step) {
        auto& out = terms[scalar.key];
        for (const auto& term : scalar.terms) {
          if (!scalar.average)
            out.push_back({term.value, 1.0, 1.0});
          else
            out.push_back({term.value * term.count, term.count, term.weight});
        }
      }
    }
    std::vector<double> flat;
    for (const auto& step : loop_steps)
      for (const auto& [key, terms] : step)
        for (const auto& term : terms) {
          flat.push_back(term[0]);
          flat.push_back(term[1]);
        }
    flat.push_back(static_cast<double>(loop_examples_));
    // The length itself, so workers that logged different scalars are found.
    const double length = static_cast<double>(flat.size() + 1);
    flat.push_back(length);
    const auto sums = group_->sum(flat, "the training logs at step " + std::to_string(global_step));
    if (sums.back() != length * static_cast<double>(group_->size()))
      throw Error("the workers' training steps logged different scalars; they cannot be reduced");
    std::size_t at = 0;
    for (const auto& step : loop_steps)
      for (const auto& [key, terms] : step) {
        double value = 0.0;
        for (const auto& term : terms) {
          value += term[2] * (sums[at + 1] > 0 ? sums[at] / sums[at + 1] : 0.0);
          at += 2;
        }
        means[key].add(value, /*weighted=*/false);
      }
    loop_examples_ = 0;
    return static_cast<int64_t>(sums[at]);
  }

  void reduce_metrics(MetricList& metrics, const std::string& what) const override {
    // One all-reduce per kind of reduction, over every metric's variables.
    for (const auto op : {Reduction::kSum, Reduction::kMax, Reduction::kMin}) {
      std::vector<at::Tensor> values;
      for (const auto& metric : metrics)
        for (const auto& variable : metric->variables())
          if (variable.reduction == op)
            values.push_back(variable.value.to(torch::kCPU, torch::kFloat64).reshape({-1}));
      if (values.empty()) continue;
      std::vector<at::Tensor> flat = {torch::cat(values).to(group_->device())};
      group_->all_reduce(flat,
                         op == Reduction::kSum   ? distribute::ReduceOp::kSum
                         : op == Reduction::kMax ? distribute::ReduceOp::kMax
                                                 : distribute::ReduceOp::kMin,
                         what);
      flat[0] = flat[0].cpu();
      int64_t at = 0;
      for (const auto& metric : metrics) {
        std::vector<at::Tensor> state;
        bool changed = false;
        for (const auto& variable : metric->variables()) {
          if (variable.reduction != op) {
            state.push_back(variable.value);
            continue;
          }
          const int64_t n = variable.value.numel();
          state.push_back(
              flat[0].narrow(0, at, n).view(variable.value.sizes()).to(variable.value.device()));
          at += n;
          changed = true;
        }
        if (changed) metric->set_state(state);
      }
    }
  }

  void add_loop_logs(Logs& logs) override {
    if (!gradient_sync_) return;
    const auto [seconds, steps] = gradient_sync_->take_wait();
    if (steps > 0) logs["all_reduce_wait_ms"] = 1000.0 * seconds / static_cast<double>(steps);
  }

  void reduce_evaluation(std::map<std::string, ScalarMean>& means,
                         int64_t& batches) const override {
    // Every worker evaluated its shard: fold them all.
    nlohmann::json mine = {{"batches", batches}, {"scalars", nlohmann::json::object()}};
    for (const auto& [key, mean] : means) mine["scalars"][key] = mean.state();
    batches = 0;
    means.clear();
    for (const auto& text : group_->all_gather(mine.dump(), "the validation logs")) {
      const auto worker = nlohmann::json::parse(text);
      batches += worker.at("batches").get<int64_t>();
      for (const auto& [key, state] : worker.at("scalars").items()) means[key].merge(state);
    }
  }

  Logs gather_aggregated_logs(const Logs& local) const override {
    // Host-side lists are concatenated in rank order; values travel as
    // their bits, so that every worker's rows arrive exactly (NaN included).
    nlohmann::json mine = nlohmann::json::object();
    for (const auto& [key, value] : local) {
      if (const auto* rows = std::get_if<IdRows>(&value)) {
        mine[key] = {{"rows", *rows}};
      } else if (const auto* values = std::get_if<ValueRows>(&value)) {
        IdRows bits;
        for (const auto& row : *values) {
          bits.emplace_back(row.size());
          std::memcpy(bits.back().data(), row.data(), row.size() * sizeof(double));
        }
        mine[key] = {{"value_bits", std::move(bits)}};
      } else if (const auto* texts = std::get_if<std::vector<std::string>>(&value)) {
        mine[key] = {{"texts", *texts}};
      } else {
        throw Error("the task's aggregated log '" + key +
                    "' is not a host-side list (strings, id rows, value rows), so it cannot be "
                    "gathered from every worker");
      }
    }
    Logs merged;
    for (const auto& text : group_->all_gather(mine.dump(), "the validation outputs")) {
      const nlohmann::json lists = nlohmann::json::parse(text);
      Logs worker;
      for (const auto& [key, entry] : lists.items()) {
        if (entry.contains("rows")) {
          worker[key] = entry.at("rows").get<IdRows>();
        } else if (entry.contains("value_bits")) {
          ValueRows values;
          for (const auto& row : entry.at("value_bits")) {
            const auto bits = row.get<std::vector<int64_t>>();
            values.emplace_back(bits.size());
            std::memcpy(values.back().data(), bits.data(), bits.size() * sizeof(double));
          }
          worker[key] = std::move(values);
        } else {
          worker[key] = entry.at("texts").get<std::vector<std::string>>();
        }
      }
      append_host_lists(merged, worker);
    }
    return merged;
  }

  bool checkpoint_holds_input_position() const override { return false; }
  int64_t num_workers() const override { return group_->size(); }
  std::string random_state_suffix() const override { return "/" + std::to_string(group_->rank()); }
  nlohmann::json input_position(const nlohmann::json& meta) const override {
    return meta.at("workers")
        .at(static_cast<std::size_t>(group_->rank()))
        .value("train_data", nlohmann::json());
  }

  void add_worker_states(CheckpointData& data, const DatasetPtr& train_data,
                         const at::Device& device) const override {
    nlohmann::json mine = nlohmann::json::object();
    if (train_data) mine["train_data"] = train_data->state();
    // Each generator's state travels as bytes in the worker's JSON.
    const auto save = [&mine](const char* key, const at::Tensor& state) {
      const at::Tensor bytes = state.contiguous();
      mine[key] = std::vector<uint8_t>(bytes.data_ptr<uint8_t>(),
                                       bytes.data_ptr<uint8_t>() + bytes.numel());
    };
    save("rng", cpu_random_state());
    if (device.is_cuda()) save("cuda_rng", device_random_state(device));
    nlohmann::json workers = nlohmann::json::array();
    int64_t rank = 0;
    for (const auto& text : group_->all_gather(mine.dump(), "the checkpoint's worker states")) {
      auto worker = nlohmann::json::parse(text);
      for (const auto& [key, name] :
           {std::pair{"rng", "rng/cpu/"}, std::pair{"cuda_rng", "rng/cuda/"}}) {
        if (!worker.contains(key)) continue;
        auto bytes = worker.at(key).get<std::vector<uint8_t>>();
        data.tensors[name + std::to_string(rank)] =
            torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8)
                .clone();
        worker.erase(key);
      }
      ++rank;
      workers.push_back(std::move(worker));
    }
    data.meta["workers"] = std::move(workers);
  }

 private:
  distribute::ProcessGroupPtr group_;
  std::unique_ptr<distribute::GradientSync> gradient_sync_;
  int64_t loop_examples_ = 0;
  bool stop_agreed_ = false;
};

}  // namespace

distribute::ProcessGroupPtr replica_group() {
  std::lock_guard<std::mutex> lock(replica_group_mutex);
  return current_replica_group.lock();
}

std::shared_ptr<DistributionStrategy> mirrored_strategy(distribute::ProcessGroupPtr group) {
  return std::make_shared<MirroredStrategy>(std::move(group));
}

}  // namespace garden
