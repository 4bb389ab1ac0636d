// A task of your own for Garden: linear regression on synthetic data.
//
// Everything a task needs is here: its config (model keys plus task keys), its
// dataset, its model and its Task. main.cpp registers it and runs the CLI.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include <garden/base/dataset.h>
#include <garden/config/definitions.h>
#include <garden/core/task.h>

namespace example {

// ---- config ------------------------------------------------------------------

// The model's keys: task.model.* in YAML and --params_override.
struct LinearModelConfig : garden::config::Config {
  bool use_bias = true;
  double init_stddev = 0.01;
  void visit(garden::config::Visitor& v) override;
  void validate() const override;
};

// The task's config. TaskConfigWith supplies `model`, `train_data` and
// `validation_data` (garden::config::DataConfig: input_path, global_batch_size,
// seed, ...); the task's own keys go in visit_task_fields.
struct LinearRegressionConfig
    : garden::config::TaskConfigWith<LinearModelConfig, garden::config::DataConfig> {
  int64_t num_features = 4;          // width of X
  double noise_stddev = 0.1;         // stddev of the noise added to y
  int64_t problem_seed = 42;         // seed of the true w and b (shared by all data)
  int64_t validation_examples = 512; // rows in one pass over the validation data
  void validate() const override;

 protected:
  void visit_task_fields(garden::config::Visitor& v) override;
};

// ---- data --------------------------------------------------------------------

// y = X·w + b + noise_stddev·N(0, 1), X ~ N(0, 1). Batch k is drawn from a
// generator seeded by (seed, k) alone, so the iterator's whole state is the
// number of rows produced: restore() continues exactly where state() was.
// num_examples < 0 means endless (training data).
class SyntheticLinearDataset : public garden::Dataset {
 public:
  SyntheticLinearDataset(at::Tensor weights, double bias, double noise_stddev,
                         int64_t batch_size, int64_t num_examples, bool drop_remainder,
                         uint64_t seed);
  std::optional<garden::Batch> next() override;
  void reset() override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;

 private:
  at::Tensor weights_;  // [num_features]
  double bias_;
  double noise_stddev_;
  int64_t batch_size_;
  int64_t num_examples_;
  bool drop_remainder_;
  uint64_t seed_;
  int64_t batches_ = 0;  // batches produced so far
  int64_t position_ = 0; // rows produced so far
};

// ---- model -------------------------------------------------------------------

class LinearRegressorImpl : public torch::nn::Module {
 public:
  LinearRegressorImpl(int64_t num_features, const LinearModelConfig& config);
  // [batch, num_features] -> [batch]
  at::Tensor forward(const at::Tensor& features);

 private:
  torch::nn::Linear dense_{nullptr};
};
TORCH_MODULE(LinearRegressor);

// ---- task --------------------------------------------------------------------

class LinearRegressionTask : public garden::Task {
 public:
  LinearRegressionTask(std::shared_ptr<const LinearRegressionConfig> params,
                       std::string logging_dir = "");

  garden::DatasetPtr build_inputs(const garden::config::DataConfig& params,
                                  const garden::InputContext& input_context) override;
  garden::ModelPtr build_model() override;
  garden::Batch call_model(garden::Model& model, const garden::Batch& features,
                           bool training) override;
  garden::Losses build_losses(const garden::Batch& labels, const garden::Batch& model_outputs,
                              const at::Tensor& aux_losses = {}) override;
  garden::MetricList build_metrics(bool training = true) override;
  nlohmann::json checkpoint_metadata() const override;
  void restore_checkpoint_metadata(const nlohmann::json& metadata) override;

 private:
  const LinearRegressionConfig& config_;
  at::Tensor true_weights_;  // [num_features], from problem_seed
  double true_bias_ = 0.0;
};

// Registers the task and the experiment `example/linear_regression`.
void register_linear_regression();

}  // namespace example
