#include "garden/core/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/yaml_io.h"
#include "garden/core/actions.h"
#include "garden/core/cuda_graph.h"
#include "garden/core/parameter_server.h"
#include "garden/distribute/gradient_sync.h"
#include "garden/distribute/input.h"

namespace garden {

Trainer::Trainer(std::shared_ptr<const config::ExperimentConfig> config, TaskPtr task,
                 ModelPtr model, std::shared_ptr<optim::Optimizer> optimizer, bool train,
                 bool evaluate, DatasetPtr train_dataset, DatasetPtr validation_dataset,
                 std::shared_ptr<CheckpointExporter> checkpoint_exporter,
                 distribute::ProcessGroupPtr process_group,
                 std::shared_ptr<ParameterServers> parameter_servers)
    : config_(std::move(config)),
      task_(std::move(task)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      train_dataset_(std::move(train_dataset)),
      validation_dataset_(std::move(validation_dataset)),
      checkpoint_exporter_(std::move(checkpoint_exporter)),
      group_(std::move(process_group)),
      servers_(std::move(parameter_servers)) {
  if (!config_ || !task_ || !model_) throw Error("Trainer needs a config, a task and a model");
  if (group_ && servers_)
    throw Error("a Trainer trains synchronously over a process group or with parameter servers, "
                "not both");
  device_ = at::Device(config_->runtime.device);
  task_->set_mixed_precision(config_->runtime.mixed_precision_dtype, device_);
  const auto build = [this](const config::DataConfig& params, const InputContext& context) {
    return task_->build_inputs(params, context);
  };
  if (optimizer_) {
    minimizer_ = std::make_unique<Minimizer>(*optimizer_);
    minimizer_->set_accumulation_steps(config_->trainer.gradient_accumulation_steps);
  }
  if (group_ && optimizer_ && train) {
    // Synchronous data parallel: the loss is each worker's share of the
    // global mean, and the gradients are summed over the workers while
    // backward runs.
    std::vector<at::Tensor> parameters;
    for (const auto& parameter : optimizer_->parameters()) parameters.push_back(parameter.tensor);
    const auto bucket_bytes =
        static_cast<int64_t>(config_->runtime.bucket_cap_mb * 1024.0 * 1024.0);
    gradient_sync_ = std::make_unique<distribute::GradientSync>(group_, parameters, bucket_bytes);
    minimizer_->set_backward_observer([this](bool last) { gradient_sync_->begin_backward(last); });
    minimizer_->add_gradient_hook([this](std::vector<at::Tensor>& gradients) {
      gradient_sync_->finish(gradients, "the gradient all-reduce at step " +
                                            std::to_string(global_step_ + 1));
    });
    minimizer_->set_count_reducer([this](const std::vector<at::Tensor>& counts) {
      std::vector<at::Tensor> stacked = {
          torch::stack(counts).to(torch::kFloat64).to(counts.front().device())};
      group_->all_reduce(stacked, distribute::ReduceOp::kSum,
                         "the loss counts at step " + std::to_string(global_step_ + 1));
      std::vector<at::Tensor> global;
      for (std::size_t i = 0; i < counts.size(); ++i)
        global.push_back(stacked[0][static_cast<int64_t>(i)].to(counts[i].scalar_type()));
      return global;
    });
  }
  if (servers_ && !servers_->is_chief() && optimizer_ && train) {
    // The worker's optimizer transforms the whole gradient (unscale,
    // clipping, noise); the ps tasks update the weights.
    minimizer_->set_apply([this] {
      if (!optimizer_->transform_gradients(pending_push_)) pending_push_.clear();
    });
  }
  if (config_->runtime.cuda_graphs && optimizer_ && train) enable_cuda_graphs();
  // The config the run resolved travels in every checkpoint (the config
  // itself does not change after it is locked).
  params_yaml_ = config::to_yaml_string(const_cast<config::ExperimentConfig&>(*config_));
  // The chief of parameter servers reads no training data: the workers do.
  const bool reads_train_data = !(servers_ && servers_->is_chief());
  if (train) {
    if (!optimizer_) throw Error("a training Trainer needs an optimizer");
    if (!train_dataset_ && reads_train_data)
      train_dataset_ = distribute_dataset(build, config_->task->train_data_config());
    train_metrics_ = task_->build_metrics(/*training=*/true);
  }
  if (evaluate) {
    if (!validation_dataset_)
      validation_dataset_ = distribute_dataset(build, config_->task->validation_data_config());
    validation_metrics_ = task_->build_metrics(/*training=*/false);
  }
}

Trainer::~Trainer() = default;

DatasetPtr Trainer::distribute_dataset(const DatasetFn& dataset_fn,
                                       const config::DataConfig& params) {
  if (servers_ && !servers_->is_chief()) {
    // Each worker's step is a whole global batch (steps are not split over
    // workers); with sharding, each worker reads its own shard.
    if (!params.sharding) return dataset_fn(params, InputContext{});
    InputContext context;
    context.num_input_pipelines = servers_->num_workers();
    context.input_pipeline_id = servers_->worker_index();
    return dataset_fn(params, context);
  }
  // One process is one input pipeline and one replica.
  if (!group_) return dataset_fn(params, InputContext{});
  if (!params.sharding)
    return distribute::split_batches(dataset_fn(params, InputContext{}), group_->rank(),
                                     group_->size(), params.is_training.value_or(false));
  InputContext context;
  context.num_input_pipelines = group_->size();
  context.input_pipeline_id = group_->rank();
  context.num_replicas_in_sync = group_->size();
  return dataset_fn(params, context);
}

bool Trainer::stop_requested() const {
  if (group_) return stop_agreed_;
  // The coordinator also stops for a signal any worker reported.
  if (servers_ && servers_->is_chief() && servers_->signal_from_workers() != 0) return true;
  return StopSignals::pending() != 0;
}

void Trainer::init_async() {
  if (servers_ && servers_->is_chief()) servers_->initialize(*optimizer_, global_step_);
}

void Trainer::join() {
  if (servers_ && servers_->is_chief()) servers_->join();
}

Coordinator* Trainer::coordinator_for_async() {
  return servers_ && servers_->is_chief() ? servers_.get() : nullptr;
}

void Trainer::run_async_worker() {
  if (!servers_ || servers_->is_chief()) throw Error("run_async_worker: this is not a ps worker");
  while (const auto step = servers_->next_step()) {
    global_step_ = *step - 1;  // the step being computed, for messages
    servers_->pull();
    const Batch inputs = next_train_inputs();
    const Logs logs = run_task_step(inputs);
    std::map<std::string, double> scalars;
    for (const auto& [key, value] : logs)
      if (is_scalar(value)) scalars[key] = to_double(value);
    servers_->push(pending_push_, scalars, task_->num_examples(inputs));
    pending_push_.clear();
    global_step_ = *step;
  }
}

void Trainer::wait_for_async_steps(int64_t num_steps) {
  // The coordinator's loop: schedule the steps, join them, then hold the
  // weights and optimizer state they made (for checkpoints and evaluation).
  const int64_t target = global_step_ + num_steps;
  servers_->schedule(target);
  const auto progress = servers_->join_steps(target);
  servers_->pull_state(*optimizer_);
  for (const auto& [key, sum_steps] : progress.scalars) {
    const double mean = sum_steps.first / static_cast<double>(std::max<int64_t>(1, sum_steps.second));
    train_scalars_[key].add(mean, /*weighted=*/false);
  }
  examples_seen_ += progress.examples;
  global_step_ = target;
  if (step_observer_) step_observer_(global_step_);
}

void Trainer::initialize() { task_->initialize(*model_); }

Batch Trainer::to_device(const Batch& batch) const {
  if (device_.is_cpu()) return batch;
  Batch out;
  for (const auto& [key, tensor] : batch) {
    // From pageable memory a copy waits for the device's queue; from pinned
    // memory it is queued behind this step's work and the host goes on.
    const bool pin = device_.is_cuda() && tensor.device().is_cpu() && !tensor.is_pinned();
    out[key] = (pin ? tensor.pin_memory() : tensor).to(device_, /*non_blocking=*/true);
  }
  return out;
}

Batch Trainer::next_train_inputs() {
  if (!train_dataset_) throw Error("this Trainer has no training data");
  auto batch = train_dataset_->next();
  if (group_) {
    // The end of the data and a stop signal are decided by all workers.
    const auto agreed =
        group_->sum({batch ? 0.0 : 1.0, StopSignals::pending() ? 1.0 : 0.0},
                    "the step agreement at step " + std::to_string(global_step_ + 1));
    stop_agreed_ = agreed[1] > 0;
    if (agreed[0] > 0)
      throw Error("the training data ended on " + std::to_string(static_cast<int64_t>(agreed[0])) +
                  " of " + std::to_string(group_->size()) +
                  " workers at step " + std::to_string(global_step_ + 1) +
                  "; set task.train_data.is_training: true so it repeats");
  }
  if (!batch) throw Error("the training data ended; set task.train_data.is_training: true so it repeats");
  return to_device(*batch);
}

void Trainer::check_validation_data() {
  if (!validation_dataset_) return;
  validation_dataset_->reset();
  bool has_batch = validation_dataset_->next().has_value();
  validation_dataset_->reset();
  // Over several workers, a shard may be empty; the whole set may not.
  if (group_) has_batch = group_->sum({has_batch ? 1.0 : 0.0}, "the validation data check")[0] > 0;
  if (!has_batch) {
    const std::string& path = config_->task->validation_data_config().input_path;
    throw Error("the validation data " +
                (path.empty() ? std::string("(none given)") : "'" + path + "'") +
                " gives no batch to evaluate: it is empty, or smaller than "
                "task.validation_data.global_batch_size with drop_remainder: true");
  }
}

std::optional<std::pair<Batch, Logs>> Trainer::next_eval_inputs() {
  if (!validation_dataset_) throw Error("this Trainer has no validation data");
  auto batch = validation_dataset_->next();
  if (!batch) return std::nullopt;
  return std::make_pair(to_device(*batch), Logs{});
}

Minimizer& Trainer::minimizer() {
  if (!minimizer_) throw Error("this Trainer has no optimizer");
  return *minimizer_;
}

// ---- folding scalars -----------------------------------------------------------

void Trainer::ScalarFolder::add(const LogValue& value, bool weighted) {
  const auto* average = std::get_if<Average>(&value);
  if (!weighted || !average) {
    plain_total_ += to_double(value);
    ++plain_count_;
    return;
  }
  weighted_ = true;
  if (terms_.empty()) terms_.resize(average->terms.size(), {0.0, 0.0, 0.0});
  if (terms_.size() != average->terms.size())
    throw Error("a loss changed its number of parts between steps");
  for (std::size_t i = 0; i < terms_.size(); ++i) {
    const AverageTerm& term = average->terms[i];
    const double count = to_double(term.count);
    terms_[i][0] += to_double(term.value) * count;
    terms_[i][1] += count;
    terms_[i][2] = term.weight;
  }
}

nlohmann::json Trainer::ScalarFolder::state() const {
  return {{"plain_total", plain_total_}, {"plain_count", plain_count_}, {"terms", terms_},
          {"weighted", weighted_}};
}

void Trainer::ScalarFolder::merge(const nlohmann::json& state) {
  plain_total_ += state.at("plain_total").get<double>();
  plain_count_ += state.at("plain_count").get<int64_t>();
  const auto terms = state.at("terms").get<std::vector<std::array<double, 3>>>();
  if (!terms.empty() && terms_.empty()) terms_.resize(terms.size(), {0.0, 0.0, 0.0});
  if (!terms.empty() && terms.size() != terms_.size())
    throw Error("workers report a loss of different numbers of parts");
  for (std::size_t i = 0; i < terms.size(); ++i) {
    terms_[i][0] += terms[i][0];
    terms_[i][1] += terms[i][1];
    terms_[i][2] = terms[i][2];
  }
  weighted_ = weighted_ || state.at("weighted").get<bool>();
}

double Trainer::ScalarFolder::result() const {
  if (!weighted_) return plain_count_ > 0 ? plain_total_ / static_cast<double>(plain_count_) : 0.0;
  double total = 0.0;
  for (const auto& [sum, count, weight] : terms_) total += weight * (count > 0 ? sum / count : 0.0);
  return total;
}

// ---- steps ----------------------------------------------------------------------

namespace {

// Gradient accumulation: the batch's rows in `parts` near-equal slices.
std::vector<Batch> split_rows(const Batch& batch, int64_t parts) {
  int64_t rows = -1;
  std::string first;
  for (const auto& [key, tensor] : batch) {
    if (tensor.dim() == 0)
      throw Error("trainer.gradient_accumulation_steps splits the batch by rows, but its '" + key +
                  "' is a scalar");
    if (rows < 0) {
      rows = tensor.size(0);
      first = key;
    } else if (tensor.size(0) != rows) {
      throw Error("trainer.gradient_accumulation_steps splits the batch by rows, but its '" + key +
                  "' has " + std::to_string(tensor.size(0)) + " rows and '" + first + "' " +
                  std::to_string(rows));
    }
  }
  if (rows < parts)
    throw Error("trainer.gradient_accumulation_steps=" + std::to_string(parts) +
                " needs at least as many rows in each batch, but one has " + std::to_string(rows) +
                "; lower it or raise the batch size");
  std::vector<Batch> out(static_cast<std::size_t>(parts));
  for (const auto& [key, tensor] : batch) {
    const auto slices = at::tensor_split(tensor, parts, 0);
    for (int64_t i = 0; i < parts; ++i) out[static_cast<std::size_t>(i)][key] = slices[static_cast<std::size_t>(i)];
  }
  return out;
}

// One step's logs from its accumulation parts' logs: an Average term by term
// over the parts' counts (the whole batch's mean), anything else the mean.
// Computed where the parts' tensors are: nothing is read to the host.
Logs merge_part_logs(const std::vector<Logs>& parts) {
  const auto as_double = [](const at::Tensor& t) { return t.detach().reshape({}).to(at::kDouble); };
  Logs merged;
  for (const auto& [key, value] : parts.front()) {
    if (!is_scalar(value)) {
      merged[key] = value;
      continue;
    }
    if (const auto* first = std::get_if<Average>(&value)) {
      Average whole;
      for (std::size_t t = 0; t < first->terms.size(); ++t) {
        at::Tensor sum, count;
        for (const auto& logs : parts) {
          const auto* average = std::get_if<Average>(&logs.at(key));
          if (!average || average->terms.size() != first->terms.size())
            throw Error("the accumulation parts of one step logged '" + key + "' differently");
          const auto& term = average->terms[t];
          const at::Tensor c = as_double(term.count);
          const at::Tensor weighted = as_double(term.value) * c;
          sum = sum.defined() ? sum + weighted : weighted;
          count = count.defined() ? count + c : c;
        }
        // A count on the host beside values on a GPU joins them there
        // (queued, not waited for): where() takes one device.
        const at::Tensor on = count.to(sum.device(), at::kDouble, /*non_blocking=*/true);
        const at::Tensor mean = at::where(on > 0, sum / on, at::zeros_like(sum));
        whole.terms.push_back(AverageTerm{mean.to(at::kFloat), count, first->terms[t].weight});
      }
      merged[key] = std::move(whole);
      continue;
    }
    // Numbers add on the host, tensors where they are.
    double host_total = 0.0;
    at::Tensor total;
    for (const auto& logs : parts) {
      const LogValue& part = logs.at(key);
      if (const auto* tensor = std::get_if<at::Tensor>(&part))
        total = total.defined() ? total + as_double(*tensor) : as_double(*tensor);
      else
        host_total += to_double(part);
    }
    const double n = static_cast<double>(parts.size());
    if (total.defined())
      merged[key] = (total + host_total) / n;
    else
      merged[key] = host_total / n;
  }
  return merged;
}

}  // namespace

Logs Trainer::run_task_step(const Batch& inputs) {
  const int64_t accumulation = config_->trainer.gradient_accumulation_steps;
  if (accumulation == 1) return task_->train_step(inputs, *model_, minimizer(), train_metrics_);
  std::vector<Logs> part_logs;
  for (const Batch& part : split_rows(inputs, accumulation))
    part_logs.push_back(task_->train_step(part, *model_, minimizer(), train_metrics_));
  return merge_part_logs(part_logs);
}

void Trainer::enable_cuda_graphs() {
  const auto refuse = [](const std::string& why) {
    throw config::ConfigError("runtime.cuda_graphs: " + why);
  };
  if (!device_.is_cuda())
    refuse("needs runtime.device=cuda (this run's device is '" + device_.str() + "')");
  if (group_ || servers_)
    refuse("a multi-worker step (its gradient all-reduce) is not captured; train with one process");
  if (config_->trainer.gradient_accumulation_steps != 1)
    refuse("trainer.gradient_accumulation_steps must be 1 (a step of several parts is not captured)");
  try {
    optimizer_->set_capturable(true);
    graphs_ = std::make_unique<StepGraphs>(device_);
  } catch (const config::ConfigError&) {
    throw;
  } catch (const Error& error) {
    refuse(error.what());
  }
}

namespace {
// The step's log tensors in order (an Average's values and counts); a
// number computed on the host cannot change when a graph replays.
void flatten_logs(const Logs& logs, std::vector<at::Tensor>& out) {
  for (const auto& [key, value] : logs) {
    if (const auto* tensor = std::get_if<at::Tensor>(&value)) {
      out.push_back(*tensor);
    } else if (const auto* average = std::get_if<Average>(&value)) {
      for (const auto& term : average->terms) {
        out.push_back(term.value);
        out.push_back(term.count);
      }
    } else if (is_scalar(value)) {
      throw Error("runtime.cuda_graphs: the task's training step logs '" + key +
                  "' as a number computed on the host, which a replayed graph cannot update");
    }
  }
}

Logs unflatten_logs(Logs logs, const std::vector<at::Tensor>& tensors) {
  std::size_t at = 0;
  for (auto& [key, value] : logs) {
    if (auto* tensor = std::get_if<at::Tensor>(&value)) {
      *tensor = tensors.at(at++);
    } else if (auto* average = std::get_if<Average>(&value)) {
      for (auto& term : average->terms) {
        term.value = tensors.at(at++);
        term.count = tensors.at(at++);
      }
    }
  }
  return logs;
}
}  // namespace

Logs Trainer::run_graphed_step(const Batch& inputs) {
  optimizer_->prepare_step();
  std::string shape;
  std::vector<at::Tensor> tensors;
  for (const auto& [key, tensor] : inputs) {
    shape += key + c10::str(tensor.sizes()) + c10::toString(tensor.scalar_type()) + ";";
    tensors.push_back(tensor);
  }
  Logs logs;
  const StepGraphs::Result result =
      graphs_->run(tensors, [&](const std::vector<at::Tensor>& static_inputs) {
        Batch batch;
        std::size_t i = 0;
        for (const auto& [key, tensor] : inputs) batch[key] = static_inputs[i++];
        logs = run_task_step(batch);
        std::vector<at::Tensor> outputs;
        flatten_logs(logs, outputs);
        return outputs;
      });
  if (!result.replayed) {
    // Run eagerly or captured: the step's own logs, kept as the layout of
    // the graph's outputs.
    graph_logs_[shape] = logs;
    return logs;
  }
  optimizer_->count_replayed_step();
  return unflatten_logs(graph_logs_.at(shape), result.outputs);
}

void Trainer::train_step(const Batch& inputs) {
  const Logs logs = graphs_ ? run_graphed_step(inputs) : run_task_step(inputs);
  if (logs.find(task_->loss()) == logs.end())
    throw Error("task train_step returned no '" + std::string(task_->loss()) + "'");
  keep_step_scalars(logs);
  if (group_)
    loop_examples_ += task_->num_examples(inputs);
  else
    examples_seen_ += task_->num_examples(inputs);
  ++global_step_;
  if (step_observer_) step_observer_(global_step_);
}

void Trainer::keep_step_scalars(const Logs& logs) {
  // The step's tensors are copied into one vector on their device; reading
  // them waits until the loop ends, so the host never waits for a GPU step.
  PendingStep step;
  std::vector<at::Tensor> tensors;
  // The vector lives where the step ran: on the first accelerator a log
  // value is on, else on the CPU.
  at::Device device = at::kCPU;
  const auto consider = [&device](const at::Tensor& t) {
    if (device.is_cpu() && t.defined() && !t.device().is_cpu()) device = t.device();
  };
  for (const auto& [key, value] : logs) {
    if (const auto* tensor = std::get_if<at::Tensor>(&value)) consider(*tensor);
    if (const auto* average = std::get_if<Average>(&value))
      for (const auto& term : average->terms) {
        consider(term.value);
        consider(term.count);
      }
  }
  // The index of `t` in the step's vector; -1 when it was read at once
  // (into `host`: a CPU number beside device ones costs no wait).
  const auto keep = [&](const at::Tensor& t, const std::string& key, double& host) -> int64_t {
    if (!t.defined() || t.numel() != 1)
      throw Error("the training step's '" + key + "' is a tensor of " +
                  std::to_string(t.defined() ? t.numel() : 0) + " elements, not a scalar");
    if (t.device() != device && t.device().is_cpu()) {
      host = t.item<double>();
      return -1;
    }
    tensors.push_back(t.detach().reshape({1}).to(device, at::kDouble));
    return static_cast<int64_t>(tensors.size()) - 1;
  };
  for (const auto& [key, value] : logs) {
    if (!is_scalar(value)) continue;
    PendingStep::Entry entry{key, false, {}};
    if (const auto* number = std::get_if<double>(&value)) {
      entry.terms.push_back({*number, 1.0, 1.0, -1, -1});
    } else if (const auto* tensor = std::get_if<at::Tensor>(&value)) {
      PendingStep::Term term{0.0, 1.0, 1.0, -1, -1};
      term.value_at = keep(*tensor, key, term.value);
      entry.terms.push_back(term);
    } else {
      entry.average = true;
      for (const auto& part : std::get<Average>(value).terms) {
        // A term without a count counts once.
        PendingStep::Term term{0.0, 1.0, part.weight, -1, -1};
        term.value_at = keep(part.value, key, term.value);
        if (part.count.defined()) term.count_at = keep(part.count, key, term.count);
        entry.terms.push_back(term);
      }
    }
    step.entries.push_back(std::move(entry));
  }
  if (!tensors.empty()) step.values = at::cat(tensors);
  pending_steps_.push_back(std::move(step));
}

void Trainer::fold_pending_steps() {
  // One copy to the host per device for the whole loop.
  std::map<std::string, std::vector<std::size_t>> by_device;
  for (std::size_t i = 0; i < pending_steps_.size(); ++i)
    if (pending_steps_[i].values.defined())
      by_device[pending_steps_[i].values.device().str()].push_back(i);
  std::vector<at::Tensor> host(pending_steps_.size());
  for (const auto& [device, steps] : by_device) {
    std::vector<at::Tensor> parts;
    for (const std::size_t i : steps) parts.push_back(pending_steps_[i].values);
    const at::Tensor all = at::cat(parts).cpu().contiguous();
    int64_t at = 0;
    for (const std::size_t i : steps) {
      const int64_t n = pending_steps_[i].values.numel();
      host[i] = all.narrow(0, at, n);
      at += n;
    }
  }
  for (std::size_t i = 0; i < pending_steps_.size(); ++i) {
    const double* values = host[i].defined() ? host[i].data_ptr<double>() : nullptr;
    const auto read = [values](double host_value, int64_t index) {
      return index < 0 ? host_value : values[index];
    };
    if (group_) loop_steps_.emplace_back();
    for (const auto& entry : pending_steps_[i].entries) {
      if (!group_) {
        // Model Garden's Mean of the steps' values (an Average's result).
        double number = 0.0;
        for (const auto& term : entry.terms)
          number += term.weight * read(term.value, term.value_at);
        train_scalars_[entry.key].add(number, /*weighted=*/false);
        continue;
      }
      // The step's global value needs every worker's terms: kept until the
      // loop ends (an Average term by term, anything else as a mean).
      auto& terms = loop_steps_.back()[entry.key];
      for (const auto& term : entry.terms) {
        const double value = read(term.value, term.value_at);
        if (!entry.average) {
          terms.push_back({value, 1.0, 1.0});
          continue;
        }
        const double count = read(term.count, term.count_at);
        terms.push_back({value * count, count, term.weight});
      }
    }
  }
  pending_steps_.clear();
}

Logs Trainer::eval_step(const Batch& inputs, const Logs& passthrough) {
  Logs logs = task_->validation_step(inputs, *model_, validation_metrics_);
  for (const auto& [key, value] : logs)
    if (is_scalar(value)) eval_scalars_[key].add(value, /*weighted=*/true);
  ++eval_batches_;
  for (const auto& [key, value] : passthrough) logs.emplace(key, value);
  return logs;
}

namespace {
// The state of a device's default generator (a CUDA device's), on the host.
at::Tensor device_random_state(const at::Device& device) {
  auto generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

// The summary name of a step's scalar: Model Garden's training_loss /
// validation_loss for the loss itself, the scalar's own name otherwise.
std::string scalar_name(const std::string& key, const char* loss_key, const char* loss_name) {
  return key == loss_key ? loss_name : key;
}
}  // namespace

void Trainer::train_loop_begin() {
  // Metrics are reset at the end of each loop, so a loop's logs cover it alone.
}

void Trainer::fold_worker_scalars() {
  std::vector<double> flat;
  for (const auto& step : loop_steps_)
    for (const auto& [key, terms] : step)
      for (const auto& term : terms) {
        flat.push_back(term[0]);
        flat.push_back(term[1]);
      }
  flat.push_back(static_cast<double>(loop_examples_));
  // The length itself, so workers that logged different scalars are found.
  const double length = static_cast<double>(flat.size() + 1);
  flat.push_back(length);
  const auto sums = group_->sum(flat, "the training logs at step " + std::to_string(global_step_));
  if (sums.back() != length * static_cast<double>(group_->size()))
    throw Error("the workers' training steps logged different scalars; they cannot be reduced");
  std::size_t at = 0;
  for (const auto& step : loop_steps_)
    for (const auto& [key, terms] : step) {
      double value = 0.0;
      for (const auto& term : terms) {
        value += term[2] * (sums[at + 1] > 0 ? sums[at] / sums[at + 1] : 0.0);
        at += 2;
      }
      train_scalars_[key].add(value, /*weighted=*/false);
    }
  examples_seen_ += static_cast<int64_t>(sums[at]);
  loop_steps_.clear();
  loop_examples_ = 0;
}

void Trainer::reduce_metrics(MetricList& metrics, const std::string& what) {
  if (!group_) return;
  // One all-reduce per kind of reduction, over every metric's variables.
  for (const auto op : {Reduction::kSum, Reduction::kMax, Reduction::kMin}) {
    std::vector<at::Tensor> values;
    for (const auto& metric : metrics)
      for (const auto& variable : metric->variables())
        if (variable.reduction == op) values.push_back(variable.value.to(torch::kCPU, torch::kFloat64).reshape({-1}));
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
        state.push_back(flat[0].narrow(0, at, n).view(variable.value.sizes()).to(variable.value.device()));
        at += n;
        changed = true;
      }
      if (changed) metric->set_state(state);
    }
  }
}

Logs Trainer::gather_aggregated_logs(const Logs& local) {
  // Host-side lists (decoded ids, strings) are concatenated in rank order.
  nlohmann::json mine = nlohmann::json::object();
  for (const auto& [key, value] : local) {
    if (const auto* rows = std::get_if<std::vector<std::vector<int64_t>>>(&value))
      mine[key] = {{"rows", *rows}};
    else if (const auto* texts = std::get_if<std::vector<std::string>>(&value))
      mine[key] = {{"texts", *texts}};
    else
      throw Error("the task's aggregated log '" + key +
                  "' is not a list of strings or of id rows, so it cannot be gathered from "
                  "every worker");
  }
  Logs merged;
  for (const auto& text : group_->all_gather(mine.dump(), "the validation outputs")) {
    const nlohmann::json worker = nlohmann::json::parse(text);
    for (const auto& [key, entry] : worker.items()) {
      if (entry.contains("rows")) {
        auto [slot, inserted] = merged.try_emplace(key, std::vector<std::vector<int64_t>>{});
        auto& all = std::get<std::vector<std::vector<int64_t>>>(slot->second);
        for (const auto& row : entry.at("rows")) all.push_back(row.get<std::vector<int64_t>>());
      } else {
        auto [slot, inserted] = merged.try_emplace(key, std::vector<std::string>{});
        auto& all = std::get<std::vector<std::string>>(slot->second);
        for (const auto& t : entry.at("texts")) all.push_back(t.get<std::string>());
      }
    }
  }
  return merged;
}

Logs Trainer::train_loop_end() {
  Logs logs;
  fold_pending_steps();
  if (group_) {
    fold_worker_scalars();
    reduce_metrics(train_metrics_, "the training metrics at step " + std::to_string(global_step_));
    if (gradient_sync_) {
      const auto [seconds, steps] = gradient_sync_->take_wait();
      if (steps > 0) logs["all_reduce_wait_ms"] = 1000.0 * seconds / static_cast<double>(steps);
    }
  }
  // The chief of parameter servers computes no metric: the workers' losses
  // come through ps 0.
  if (!(servers_ && servers_->is_chief())) {
    for (auto& metric : train_metrics_) {
      logs[metric->name()] = metric->result();
      metric->reset();
    }
  }
  for (const auto& [key, folder] : train_scalars_)
    logs[scalar_name(key, task_->loss(), "training_loss")] = folder.result();
  train_scalars_.clear();
  logs["learning_rate"] = optimizer_->learning_rate();
  return logs;
}

void Trainer::eval_begin() {
  // Model Garden evaluates the averaged weights when there is an EMA.
  if (auto* ema = optimizer_ ? optimizer_->ema() : nullptr) {
    if (!ema_swapped_) ema->swap_weights();
    ema_swapped_ = true;
  }
  for (auto& metric : validation_metrics_) metric->reset();
  eval_scalars_.clear();
  eval_batches_ = 0;
  validation_dataset_->reset();
}

void Trainer::eval_reduce(Logs& state, const Logs& step_outputs) {
  task_->aggregate_logs(state, step_outputs);
}

void Trainer::swap_back_ema() {
  if (ema_swapped_) optimizer_->ema()->swap_weights();
  ema_swapped_ = false;
}

Logs Trainer::eval_end(const Logs& aggregated_logs) {
  swap_back_ema();
  Logs aggregated = aggregated_logs;
  if (group_) {
    // Every worker evaluated its shard: fold them all.
    nlohmann::json mine = {{"batches", eval_batches_}, {"scalars", nlohmann::json::object()}};
    for (const auto& [key, folder] : eval_scalars_) mine["scalars"][key] = folder.state();
    eval_batches_ = 0;
    eval_scalars_.clear();
    for (const auto& text : group_->all_gather(mine.dump(), "the validation logs")) {
      const auto worker = nlohmann::json::parse(text);
      eval_batches_ += worker.at("batches").get<int64_t>();
      for (const auto& [key, state] : worker.at("scalars").items()) eval_scalars_[key].merge(state);
    }
    reduce_metrics(validation_metrics_, "the validation metrics");
    aggregated = gather_aggregated_logs(aggregated_logs);
  }
  if (eval_batches_ == 0) {
    const std::string& path = config_->task->validation_data_config().input_path;
    throw Error("the validation data " +
                (path.empty() ? std::string("(none given)") : "'" + path + "'") +
                " gave no batch to evaluate: it is empty, or smaller than "
                "task.validation_data.global_batch_size with drop_remainder: true");
  }
  Logs logs;
  for (auto& metric : validation_metrics_) logs[metric->name()] = metric->result();
  for (const auto& [key, folder] : eval_scalars_)
    logs[scalar_name(key, task_->loss(), "validation_loss")] = folder.result();
  for (auto& [key, value] : task_->reduce_aggregated_logs(aggregated, global_step_))
    logs[key] = value;
  return logs;
}

Trainer::LoopFn Trainer::create_train_loop_fn() {
  if (servers_ && servers_->is_chief())
    return [this](int64_t num_steps) { wait_for_async_steps(num_steps); };
  return [this](int64_t num_steps) {
    for (int64_t i = 0; i < num_steps; ++i) train_step(next_train_inputs());
  };
}

Trainer::EvalLoopFn Trainer::create_eval_loop_fn() {
  return [this](int64_t num_steps) {
    Logs state;
    for (int64_t i = 0; num_steps < 0 || i < num_steps; ++i) {
      auto next = next_eval_inputs();
      if (!next) break;
      eval_reduce(state, eval_step(next->first, next->second));
      if (eval_batch_observer_) eval_batch_observer_();
    }
    return state;
  };
}

Logs Trainer::train(int64_t num_steps) {
  train_loop_begin();
  create_train_loop_fn()(num_steps);
  return train_loop_end();
}

Logs Trainer::evaluate(int64_t num_steps) {
  eval_begin();
  Logs state;
  try {
    state = create_eval_loop_fn()(num_steps);
  } catch (...) {
    swap_back_ema();  // never leave the averages in the live model
    throw;
  }
  return eval_end(state);
}

CheckpointData Trainer::checkpoint_state() const {
  CheckpointData data;
  for (const auto& [name, tensor] : model_state(*model_)) data.tensors["model/" + name] = tensor;
  nlohmann::json meta;
  meta["global_step"] = global_step_;
  meta["examples_seen"] = examples_seen_;
  if (optimizer_) {
    for (const auto& [name, tensor] : optimizer_->state_tensors())
      data.tensors["optimizer/" + name] = tensor;
    meta["optimizer"] = optimizer_->state_meta();
  }
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    data.tensors["rng/cpu"] = generator.get_state();
  }
  // On a GPU, dropout draws from the device's generator: it is saved too, so
  // a resumed GPU run continues as the CPU one does.
  if (device_.is_cuda()) data.tensors["rng/cuda"] = device_random_state(device_);
  if (train_dataset_ && !group_ && !servers_) meta["train_data"] = train_dataset_->state();
  meta["task"] = task_->checkpoint_metadata();
  meta["checkpoint_items"] = task_->checkpoint_items();
  meta["params"] = params_yaml_;
  data.meta = std::move(meta);
  return data;
}

void Trainer::restore_checkpoint_state(const CheckpointData& data, bool restore_input) {
  // The task checks its own metadata first: its message (e.g. "trained with
  // other classes") says more than a tensor shape mismatch.
  if (data.meta.contains("task")) task_->restore_checkpoint_metadata(data.meta.at("task"));
  load_model_state(*model_, data.tensors, "model/", /*strict=*/true);
  random_state_restored_ = false;
  global_step_ = data.meta.value("global_step", int64_t{0});
  examples_seen_ = data.meta.value("examples_seen", int64_t{0});
  if (optimizer_) {
    std::map<std::string, at::Tensor> slots;
    for (const auto& [name, tensor] : data.tensors)
      if (name.rfind("optimizer/", 0) == 0) slots[name.substr(10)] = tensor;
    optimizer_->load_state(slots, data.meta.value("optimizer", nlohmann::json::object()));
  }
  if (!restore_input) return;
  // Each worker's own position and random state (a checkpoint of as many
  // workers as this run), or the one process's.
  const int64_t workers = group_ ? group_->size() : 1;
  const int64_t written_by =
      data.meta.contains("workers") ? static_cast<int64_t>(data.meta.at("workers").size()) : 1;
  if (written_by != workers) {
    log_warning() << "the checkpoint was written by " << written_by << " worker(s), this run has "
                  << workers << ": the model and optimizer continue, the input starts over "
                  << "and the random state comes from the seed";
    return;
  }
  std::string rng_key = "rng/cpu";
  std::string cuda_rng_key = "rng/cuda";
  nlohmann::json input_state;
  if (group_) {
    rng_key += "/" + std::to_string(group_->rank());
    cuda_rng_key += "/" + std::to_string(group_->rank());
    input_state = data.meta.at("workers").at(static_cast<std::size_t>(group_->rank())).value(
        "train_data", nlohmann::json());
  } else if (data.meta.contains("train_data")) {
    input_state = data.meta.at("train_data");
  }
  if (const auto it = data.tensors.find(rng_key); it != data.tensors.end()) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(it->second);
    random_state_restored_ = true;
  }
  // A GPU's state continues on a GPU; a CPU run, or a checkpoint written on a
  // CPU, leaves the device's generator as the seed set it.
  if (const auto it = data.tensors.find(cuda_rng_key);
      it != data.tensors.end() && device_.is_cuda()) {
    auto generator = at::globalContext().defaultGenerator(device_);
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(it->second);
  }
  if (train_dataset_ && !input_state.is_null()) train_dataset_->restore(input_state);
}

CheckpointData Trainer::checkpoint_state_of_all_workers() {
  CheckpointData data = checkpoint_state();
  if (!group_) return data;
  nlohmann::json mine = nlohmann::json::object();
  if (train_dataset_) mine["train_data"] = train_dataset_->state();
  // Each generator's state travels as bytes in the worker's JSON.
  const auto save = [&mine](const char* key, const at::Tensor& state) {
    const at::Tensor bytes = state.contiguous();
    mine[key] =
        std::vector<uint8_t>(bytes.data_ptr<uint8_t>(), bytes.data_ptr<uint8_t>() + bytes.numel());
  };
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    save("rng", generator.get_state());
  }
  if (device_.is_cuda()) save("cuda_rng", device_random_state(device_));
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
  return data;
}

}  // namespace garden
