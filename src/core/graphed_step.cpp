// runtime.cuda_graphs: the Trainer's step captured once per batch shape and
// replayed (core/cuda_graph.h).
#include "garden/base/error.h"
#include "garden/config/validation.h"
#include "garden/core/cuda_graph.h"
#include "garden/core/strategy.h"
#include "garden/core/trainer.h"
#include "garden/optim/optimizer.h"

namespace garden {

void Trainer::enable_cuda_graphs() {
  const auto refuse = [](const std::string& why) {
    throw config::ConfigError("runtime.cuda_graphs: " + why);
  };
  if (!device_.is_cuda())
    refuse("needs runtime.device=cuda (this run's device is '" + device_.str() + "')");
  if (!strategy_->one_process())
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

}  // namespace garden
