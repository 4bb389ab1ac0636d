#include "model_builder_task.h"

#include <torch/torch.h>

#include "garden/base/error.h"
#include "garden/core/minimizer.h"

namespace garden::fx {

namespace {

const char* const kRows = "fx/rows";

// The builder's evaluation metric: the sums and counts build_evaluation
// gives each batch, folded as one streaming mean.
class EvaluationMean : public Metric {
 public:
  explicit EvaluationMean(std::string name) : Metric(std::move(name), {"", "", ""}) {
    sum_ = add_variable("sum", Reduction::kSum);
    count_ = add_variable("count", Reduction::kSum);
  }
  void add(const EvaluationValue& value) {
    variable(sum_, c10::kCPU).add_(value.sum);
    variable(count_, c10::kCPU).add_(value.count);
  }
  void update_state(const at::Tensor&, const at::Tensor&, const at::Tensor&) override {
    throw Error("the " + name() + " of a TensorFX model is updated by its evaluation graph");
  }
  double result() const override {
    const double count = value(count_);
    return count > 0 ? value(sum_) / count : 0.0;
  }

 private:
  std::size_t sum_, count_;
};

}  // namespace

// ---- InstanceDataset --------------------------------------------------------------------

InstanceDataset::InstanceDataset(std::function<InputReader()> make) : make_(std::move(make)) {}

InputReader& InstanceDataset::reader() const {
  if (!reader_) reader_.emplace(make_());
  return *reader_;
}

std::optional<Batch> InstanceDataset::next() {
  const auto rows = reader().next_rows();
  if (!rows) return std::nullopt;
  return Batch{{kRows, torch::tensor(*rows, torch::kLong)}};
}

void InstanceDataset::reset() { reader().seek(0, 0); }

nlohmann::json InstanceDataset::state() const {
  return {{"epoch", reader().epoch()}, {"position", reader().position()}};
}

void InstanceDataset::restore(const nlohmann::json& state) {
  reader().seek(state.value("epoch", int64_t{0}), state.value("position", int64_t{0}));
}

Transformed InstanceDataset::batch(const Batch& rows) const {
  const at::Tensor tensor = batch_tensor(rows, kRows, "TensorFX");
  const at::Tensor cpu = tensor.to(torch::kCPU, torch::kLong).contiguous();
  return reader().take(
      std::vector<int64_t>(cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel()));
}

// ---- ModelBuilderTask -------------------------------------------------------------------

ModelBuilderTask::ModelBuilderTask(ModelBuilder& builder, std::shared_ptr<InstanceDataset> train,
                                   std::shared_ptr<InstanceDataset> eval,
                                   std::function<int64_t()> global_step)
    : Task(std::make_shared<ModelBuilderTaskConfig>()),
      builder_(builder),
      train_(std::move(train)),
      eval_(std::move(eval)),
      global_step_(std::move(global_step)) {}

DatasetPtr ModelBuilderTask::build_inputs(const config::DataConfig&, const InputContext&) {
  throw Error("a TensorFX model reads its instances through its data set");
}

ModelPtr ModelBuilderTask::build_model() {
  // The builder owns its module: a pointer that does not.
  return ModelPtr(ModelPtr(), &builder_.module());
}

Batch ModelBuilderTask::call_model(garden::Model&, const Batch&, bool) {
  throw Error("a TensorFX model runs its own graphs (train_step, validation_step)");
}

Losses ModelBuilderTask::build_losses(const Batch&, const Batch&, const at::Tensor&) {
  throw Error("a TensorFX model's loss is its build_training");
}

MetricList ModelBuilderTask::build_metrics(bool training) {
  MetricList metrics;
  if (!training) metrics.push_back(std::make_unique<EvaluationMean>(builder_.evaluation_metric()));
  return metrics;
}

Logs ModelBuilderTask::train_step(const Batch& inputs, garden::Model& model, Minimizer& minimizer,
                                  MetricList&) {
  if (!train_) throw Error("this TensorFX run has no training data");
  const Transformed instances = train_->batch(inputs);
  model.train();
  const Values inferences = builder_.build_inference(instances, /*training=*/true);
  const Losses losses(builder_.build_training(global_step_(), instances, inferences));
  minimizer.minimize(losses);
  return losses.logs();
}

Logs ModelBuilderTask::validation_step(const Batch& inputs, garden::Model& model,
                                       MetricList& metrics) {
  if (!eval_) throw Error("this TensorFX run has no evaluation data");
  torch::NoGradGuard no_grad;
  model.eval();
  const Transformed instances = eval_->batch(inputs);
  const Values outputs =
      builder_.build_output(instances, builder_.build_inference(instances, /*training=*/false));
  const EvaluationValue value = builder_.build_evaluation(instances, outputs);
  for (auto& metric : metrics)
    if (auto* mean = dynamic_cast<EvaluationMean*>(metric.get())) mean->add(value);
  return {};
}

}  // namespace garden::fx
