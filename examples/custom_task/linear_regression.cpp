#include "linear_regression.h"

#include <ATen/CPUGeneratorImpl.h>

#include <garden/base/error.h>
#include <garden/config/registry.h>
#include <garden/config/validation.h>
#include <garden/core/metrics.h>

namespace example {

namespace gc = garden::config;

// ---- config ------------------------------------------------------------------

void LinearModelConfig::visit(gc::Visitor& v) {
  v("use_bias", use_bias, "Learn an intercept b.");
  v("init_stddev", init_stddev, "Stddev of the initial weights (the bias starts at 0).");
}

// Errors from check_range / refuse name the full key, the value and the range.
void LinearModelConfig::validate() const {
  gc::check_range("init_stddev", init_stddev, gc::Range::at_least(0));
}

void LinearRegressionConfig::visit_task_fields(gc::Visitor& v) {
  v("num_features", num_features, "Number of features (columns of X).");
  v("noise_stddev", noise_stddev, "Stddev of the Gaussian noise added to y.");
  v("problem_seed", problem_seed, "Seed of the true weights and bias.");
  v("validation_examples", validation_examples, "Rows in one pass over the validation data.");
}

void LinearRegressionConfig::validate() const {
  gc::check_range("num_features", num_features, gc::Range::at_least(1));
  gc::check_range("noise_stddev", noise_stddev, gc::Range::at_least(0));
  gc::check_range("problem_seed", problem_seed, gc::Range::at_least(0));
  gc::check_range("validation_examples", validation_examples, gc::Range::at_least(1));
}

// ---- data --------------------------------------------------------------------

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

SyntheticLinearDataset::SyntheticLinearDataset(at::Tensor weights, double bias,
                                               double noise_stddev, int64_t batch_size,
                                               int64_t num_examples, bool drop_remainder,
                                               uint64_t seed)
    : weights_(std::move(weights)),
      bias_(bias),
      noise_stddev_(noise_stddev),
      batch_size_(batch_size),
      num_examples_(num_examples),
      drop_remainder_(drop_remainder),
      seed_(seed) {
  if (batch_size_ < 1) throw garden::Error("global_batch_size must be >= 1");
}

std::optional<garden::Batch> SyntheticLinearDataset::next() {
  int64_t size = batch_size_;
  if (num_examples_ >= 0) {
    const int64_t remaining = num_examples_ - position_;
    if (remaining <= 0 || (drop_remainder_ && remaining < batch_size_)) return std::nullopt;
    size = std::min(size, remaining);
  }
  // This batch's rows depend only on (seed, batch index).
  auto generator = at::detail::createCPUGenerator(splitmix64(seed_ ^ splitmix64(batches_)));
  const auto options = torch::TensorOptions().dtype(torch::kFloat);
  at::Tensor x = torch::randn({size, weights_.size(0)}, generator, options);
  at::Tensor noise = torch::randn({size}, generator, options);
  at::Tensor y = x.matmul(weights_) + bias_ + noise_stddev_ * noise;
  ++batches_;
  position_ += size;
  return garden::Batch{{"features", x}, {"label", y}};
}

void SyntheticLinearDataset::reset() {
  batches_ = 0;
  position_ = 0;
}

nlohmann::json SyntheticLinearDataset::state() const {
  return {{"batches", batches_}, {"position", position_}, {"seed", seed_}};
}

void SyntheticLinearDataset::restore(const nlohmann::json& state) {
  if (state.value("seed", seed_) != seed_)
    throw garden::Error(
        "the checkpoint's data seed differs from this run's; set the same task.train_data.seed");
  batches_ = state.at("batches").get<int64_t>();
  position_ = state.at("position").get<int64_t>();
}

// ---- model -------------------------------------------------------------------

LinearRegressorImpl::LinearRegressorImpl(int64_t num_features, const LinearModelConfig& config) {
  dense_ = register_module(
      "dense", torch::nn::Linear(torch::nn::LinearOptions(num_features, 1).bias(config.use_bias)));
  torch::NoGradGuard no_grad;
  dense_->weight.normal_(0.0, config.init_stddev);
  if (config.use_bias) dense_->bias.zero_();
}

at::Tensor LinearRegressorImpl::forward(const at::Tensor& features) {
  return dense_->forward(features).squeeze(-1);
}

// ---- task --------------------------------------------------------------------

LinearRegressionTask::LinearRegressionTask(std::shared_ptr<const LinearRegressionConfig> params,
                                           std::string logging_dir)
    : garden::Task(params, std::move(logging_dir)), config_(*params) {
  // The problem itself (w, b) comes from problem_seed, so training and
  // validation data describe the same line.
  auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(config_.problem_seed));
  true_weights_ = torch::randn({config_.num_features}, generator, torch::kFloat);
  true_bias_ = torch::randn({1}, generator, torch::kFloat).item<double>();
}

garden::DatasetPtr LinearRegressionTask::build_inputs(const gc::DataConfig& params,
                                                      const garden::InputContext& input_context) {
  const bool training = params.is_training.value_or(false);
  const int64_t batch = input_context.per_replica_batch_size(params.global_batch_size);
  // Each input pipeline draws from its own seed.
  const uint64_t seed = static_cast<uint64_t>(params.seed.value_or(0)) +
                        static_cast<uint64_t>(input_context.input_pipeline_id) * 1000003ull;
  const int64_t rows = training ? -1 : config_.validation_examples;
  if (!training && params.drop_remainder && rows < batch)
    throw garden::Error("validation_examples (" + std::to_string(rows) +
                        ") is smaller than validation_data.global_batch_size (" +
                        std::to_string(batch) + ") with drop_remainder: true");
  return std::make_shared<SyntheticLinearDataset>(true_weights_, true_bias_, config_.noise_stddev,
                                                  batch, rows, params.drop_remainder, seed);
}

garden::ModelPtr LinearRegressionTask::build_model() {
  return LinearRegressor(config_.num_features, config_.model).ptr();
}

garden::Batch LinearRegressionTask::call_model(garden::Model& model,
                                               const garden::Batch& features, bool) {
  auto* regressor = model.as<LinearRegressorImpl>();
  if (!regressor) throw garden::Error("example/linear_regression needs its LinearRegressor model");
  return {{"predictions", regressor->forward(features.at("features"))}};
}

garden::Losses LinearRegressionTask::build_losses(const garden::Batch& labels,
                                                  const garden::Batch& model_outputs,
                                                  const at::Tensor& aux_losses) {
  const at::Tensor& y = labels.at("label");
  // The mean squared error over the batch's rows, and how many rows that is.
  garden::Losses losses(torch::mse_loss(model_outputs.at("predictions"), y),
                        torch::full({}, static_cast<double>(y.size(0))));
  losses.add_aux(aux_losses);
  return losses;
}

garden::MetricList LinearRegressionTask::build_metrics(bool) {
  // Reads labels["label"] and outputs["predictions"] by name.
  return {std::make_shared<garden::MeanAbsoluteError>("mean_absolute_error")};
}

nlohmann::json LinearRegressionTask::checkpoint_metadata() const {
  return {{"num_features", config_.num_features}, {"problem_seed", config_.problem_seed}};
}

void LinearRegressionTask::restore_checkpoint_metadata(const nlohmann::json& metadata) {
  if (metadata.value("num_features", config_.num_features) != config_.num_features ||
      metadata.value("problem_seed", config_.problem_seed) != config_.problem_seed)
    throw garden::Error("the checkpoint was trained on another problem (num_features " +
                        metadata.value("num_features", nlohmann::json()).dump() +
                        ", problem_seed " +
                        metadata.value("problem_seed", nlohmann::json()).dump() + ")");
}

// ---- registration ------------------------------------------------------------

namespace {
std::shared_ptr<gc::ExperimentConfig> linear_regression_experiment() {
  auto experiment = std::make_shared<gc::ExperimentConfig>();
  auto task = std::make_shared<LinearRegressionConfig>();
  task->name = "linear_regression";
  task->num_features = 4;
  task->noise_stddev = 0.1;
  task->train_data.global_batch_size = 32;
  task->train_data.is_training = true;
  task->validation_data.global_batch_size = 128;
  task->validation_data.is_training = false;
  task->validation_data.drop_remainder = false;
  experiment->task = task;

  auto& trainer = experiment->trainer;
  trainer.train_steps = 200;
  trainer.steps_per_loop = 50;
  trainer.summary_interval = 50;
  trainer.checkpoint_interval = 100;
  trainer.validation_interval = 100;
  trainer.max_to_keep = 2;
  trainer.optimizer_config.optimizer.type = "sgd";
  trainer.optimizer_config.learning_rate.type = "constant";
  trainer.optimizer_config.learning_rate.constant.learning_rate = 0.1;

  experiment->runtime.distribution_strategy = "one_device";
  experiment->runtime.seed = 1;
  return experiment;
}
}  // namespace

void register_linear_regression() {
  garden::register_task<LinearRegressionConfig, LinearRegressionTask>(
      "example/linear_regression");
  gc::register_experiment("example/linear_regression",
                          "linear regression on synthetic data (the custom-task example)",
                          linear_regression_experiment);
}

}  // namespace example
