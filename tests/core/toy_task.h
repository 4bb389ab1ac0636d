// A small regression task for the core tests: y is a fixed linear function of
// three deterministic features; the model has two named sub-modules
// (`encoder`, `head`); the loss is one part, or three named parts
// (mse, mae weighted 0.5, weight_penalty weighted 0.01, the last over a count
// of 1). The validation set has `validation_rows` rows; a run is fast.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "garden/base/dataset.h"
#include "garden/config/definitions.h"
#include "garden/config/registry.h"
#include "garden/core/task.h"

namespace garden_test {

struct ToyModelConfig : garden::config::Config {
  int64_t width = 4;
  void visit(garden::config::Visitor& v) override { v("width", width, "Hidden width."); }
};

struct ToyTaskConfig : garden::config::TaskConfigWith<ToyModelConfig> {
  int64_t validation_rows = 10;
  bool three_parts = false;
  // A training row whose label is NaN, from this many rows on (-1: none).
  int64_t poison_from_row = -1;

 protected:
  void visit_task_fields(garden::config::Visitor& v) override {
    v("validation_rows", validation_rows, "Rows of validation data.");
    v("three_parts", three_parts, "Report the loss as three named parts.");
    v("poison_from_row", poison_from_row, "Training rows from here have a NaN label.");
  }
};

class ToyDataset : public garden::Dataset {
 public:
  ToyDataset(int64_t batch, int64_t first_row, int64_t rows, int64_t poison_from)
      : batch_(batch), first_(first_row), rows_(rows), poison_from_(poison_from) {}
  std::optional<garden::Batch> next() override {
    int64_t count = batch_;
    if (rows_ >= 0) count = std::min(batch_, rows_ - position_);
    if (count <= 0) return std::nullopt;
    at::Tensor x = torch::empty({count, 3});
    at::Tensor y = torch::empty({count, 1});
    for (int64_t i = 0; i < count; ++i) {
      const double r = static_cast<double>(first_ + position_ + i);
      const double f[3] = {std::sin(0.1 * r), std::cos(0.2 * r), std::sin(0.3 * r + 1.0)};
      for (int k = 0; k < 3; ++k) x[i][k] = f[k];
      const bool poisoned = poison_from_ >= 0 && position_ + i >= poison_from_;
      y[i][0] = poisoned ? std::nan("") : 0.5 * f[0] - 0.3 * f[1] + 0.2 * f[2] + 0.1;
    }
    position_ += count;
    return garden::Batch{{"x", x}, {"y", y}};
  }
  void reset() override { position_ = 0; }
  nlohmann::json state() const override { return {{"position", position_}}; }
  void restore(const nlohmann::json& state) override { position_ = state.at("position"); }

 private:
  int64_t batch_, first_, rows_, poison_from_;
  int64_t position_ = 0;
};

struct ToyModelImpl : torch::nn::Module {
  explicit ToyModelImpl(int64_t width)
      : encoder(register_module("encoder", torch::nn::Linear(3, width))),
        head(register_module("head", torch::nn::Linear(width, 1))) {}
  at::Tensor forward(const at::Tensor& x) { return head(torch::tanh(encoder(x))); }
  torch::nn::Linear encoder, head;
};
TORCH_MODULE(ToyModel);

class ToyTask : public garden::Task {
 public:
  ToyTask(std::shared_ptr<const ToyTaskConfig> params, std::string dir)
      : Task(params, std::move(dir)), config_(*params) {}
  garden::DatasetPtr build_inputs(const garden::config::DataConfig& params,
                                  const garden::InputContext&) override {
    if (params.is_training.value_or(false))
      return std::make_shared<ToyDataset>(params.global_batch_size, 0, -1, config_.poison_from_row);
    return std::make_shared<ToyDataset>(params.global_batch_size, 100000, config_.validation_rows,
                                        -1);
  }
  // The penalty part reads the head's weight of the model built last.
  garden::ModelPtr build_model() override {
    ToyModel model(config_.model.width);
    head_weight_ = &model->head->weight;
    return model.ptr();
  }
  garden::Batch call_model(garden::Model& model, const garden::Batch& inputs, bool) override {
    return {{"predictions", model.as<ToyModelImpl>()->forward(inputs.at("x"))}};
  }
  garden::Losses build_losses(const garden::Batch& labels, const garden::Batch& outputs,
                              const at::Tensor& aux_losses) override {
    const at::Tensor error = outputs.at("predictions") - labels.at("y");
    const at::Tensor rows = torch::full({}, static_cast<double>(error.size(0)));
    garden::Losses losses;
    if (!config_.three_parts) {
      losses.add("loss", error.square().mean(), rows);
    } else {
      losses.add("mse", error.square().mean(), rows);
      losses.add("mae", error.abs().mean(), rows, 0.5);
      losses.add("weight_penalty", head_weight_->square().sum(), {}, 0.01);
    }
    losses.add_aux(aux_losses);
    return losses;
  }
  std::vector<std::string> loss_part_names() const override {
    if (!config_.three_parts) return {};
    return {"mse", "mae", "weight_penalty"};
  }
  garden::MetricList build_metrics(bool) override {
    return {std::make_shared<garden::MeanAbsoluteError>(
        "mean_absolute_error", garden::MetricInputs{"y", "predictions", ""})};
  }

 private:
  const ToyTaskConfig& config_;
  at::Tensor* head_weight_ = nullptr;
};

inline std::shared_ptr<garden::config::ExperimentConfig> toy_experiment() {
  auto e = std::make_shared<garden::config::ExperimentConfig>();
  auto task = std::make_shared<ToyTaskConfig>();
  task->train_data.is_training = true;
  task->train_data.global_batch_size = 8;
  task->validation_data.is_training = false;
  task->validation_data.global_batch_size = 4;
  task->validation_data.drop_remainder = false;
  e->task = task;
  e->trainer.train_steps = 40;
  e->trainer.steps_per_loop = 10;
  e->trainer.summary_interval = 10;
  e->trainer.checkpoint_interval = 20;
  e->trainer.validation_interval = 20;
  e->trainer.optimizer_config.optimizer.type = "sgd";
  e->trainer.optimizer_config.learning_rate.constant.learning_rate = 0.1;
  e->runtime.seed = 1;
  return e;
}

// Registers task and experiment "test/core_toy" once per process.
inline void register_toy_task() {
  static bool done = false;
  if (done) return;
  garden::register_task<ToyTaskConfig, ToyTask>("test/core_toy");
  garden::config::register_experiment("test/core_toy", "the core tests' regression",
                                      toy_experiment);
  done = true;
}

}  // namespace garden_test
