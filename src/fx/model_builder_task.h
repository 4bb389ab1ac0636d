// TensorFX's ModelBuilder as a Garden Task, so that ModelTrainer runs on the
// core's Trainer, Controller and strategies (as Model Garden runs every task
// on one base_trainer): the training and evaluation graphs become the task's
// train and validation steps, TensorFX's input readers Garden datasets.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "garden/base/dataset.h"
#include "garden/config/definitions.h"
#include "garden/core/task.h"
#include "garden/fx/training.h"

namespace garden::fx {

// A source's instances as a Garden Dataset: each batch is the row numbers
// ("fx/rows") of the instances an InputReader gives next; batch() turns
// them back into the transformed instances. Its state is TensorFX's epoch
// and position. A reader made on first use (`make`) can depend on the step
// the run starts at (a parameter-server worker's shard).
class InstanceDataset : public Dataset {
 public:
  explicit InstanceDataset(std::function<InputReader()> make);
  std::optional<Batch> next() override;
  void reset() override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  // The transformed instances of a batch next() gave.
  Transformed batch(const Batch& rows) const;

 private:
  InputReader& reader() const;
  std::function<InputReader()> make_;
  mutable std::optional<InputReader> reader_;
};

// The config a ModelTrainer's run gives the core: no keys of its own (the
// job's arguments are TensorFX's).
struct ModelBuilderConfig : config::Config {
  void visit(config::Visitor&) override {}
};
struct ModelBuilderTaskConfig : config::TaskConfigWith<ModelBuilderConfig> {};

class ModelBuilderTask : public Task {
 public:
  // `train` and `eval` give the batches the steps see (either may be null);
  // `global_step` the step being trained (build_training's global_steps).
  ModelBuilderTask(ModelBuilder& builder, std::shared_ptr<InstanceDataset> train,
                   std::shared_ptr<InstanceDataset> eval, std::function<int64_t()> global_step);

  DatasetPtr build_inputs(const config::DataConfig& params, const InputContext& context) override;
  ModelPtr build_model() override;
  Batch call_model(garden::Model& model, const Batch& features, bool training) override;
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  // Evaluation: the builder's evaluation metric, a streaming mean of what
  // build_evaluation returns for each batch.
  MetricList build_metrics(bool training = true) override;
  Logs train_step(const Batch& inputs, garden::Model& model, Minimizer& minimizer,
                  MetricList& metrics) override;
  Logs validation_step(const Batch& inputs, garden::Model& model, MetricList& metrics) override;

 private:
  ModelBuilder& builder_;
  std::shared_ptr<InstanceDataset> train_, eval_;
  std::function<int64_t()> global_step_;
};

}  // namespace garden::fx
