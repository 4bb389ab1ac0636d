#include "garden/core/metrics.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <typeinfo>

#include "garden/base/error.h"

namespace garden {
namespace {

// Keras broadcasts the weights to the values' shape. Returns the weighted sum
// as a float64 tensor on the values' device, and the weight sum: a tensor, or
// (without weights) the number of values in `count`, which saves a tensor.
struct WeightedTotal {
  at::Tensor total;
  at::Tensor weight;  // undefined without weights
  double count = 0.0;
};
WeightedTotal weighted_total(const at::Tensor& values, const at::Tensor& weights) {
  const at::Tensor v = values.detach().to(at::kDouble);
  if (!weights.defined()) return {v.sum(), at::Tensor(), static_cast<double>(v.numel())};
  const at::Tensor w = weights.detach().to(v.device()).to(at::kDouble).expand_as(v);
  return {(v * w).sum(), w.sum(), 0.0};
}

const at::Tensor* find_input(const Batch& batch, const std::string& key) {
  const auto it = batch.find(key);
  return it == batch.end() ? nullptr : &it->second;
}

std::string keys_of(const Batch& batch) {
  std::string keys;
  for (const auto& [key, value] : batch) keys += (keys.empty() ? "" : ", ") + key;
  return keys.empty() ? "(none)" : keys;
}

}  // namespace

Metric::Metric(std::string name, MetricInputs inputs)
    : name_(std::move(name)), inputs_(std::move(inputs)) {
  if (name_.empty()) throw Error("a metric needs a name");
}

std::size_t Metric::add_variable(const std::string& name, Reduction reduction,
                                 double initial_value) {
  variables_.push_back({name, at::full({}, initial_value, at::TensorOptions().dtype(at::kDouble)),
                        reduction, initial_value});
  return variables_.size() - 1;
}

at::Tensor& Metric::variable(std::size_t index, const c10::Device& device) {
  at::Tensor& v = variables_.at(index).value;
  if (v.device() != device) v = v.to(device);
  return v;
}

double Metric::value(std::size_t index) const { return variables_.at(index).value.item<double>(); }

void Metric::reset() {
  // In place: a step captured as a CUDA graph keeps adding to these tensors.
  for (auto& v : variables_) v.value.fill_(v.initial_value);
}

void Metric::update(const Batch& labels, const Batch& outputs) {
  const auto lookup = [&](const std::string& key, bool labels_first) -> at::Tensor {
    const at::Tensor* found = labels_first ? find_input(labels, key) : find_input(outputs, key);
    if (!found) found = labels_first ? find_input(outputs, key) : find_input(labels, key);
    if (!found)
      throw Error("metric '" + name_ + "' reads '" + key + "', which neither the labels (" +
                  keys_of(labels) + ") nor the model outputs (" + keys_of(outputs) + ") have");
    return *found;
  };
  at::Tensor y_true;
  if (!inputs_.y_true.empty()) y_true = lookup(inputs_.y_true, /*labels_first=*/true);
  const at::Tensor y_pred = lookup(inputs_.y_pred, /*labels_first=*/false);
  at::Tensor weight;
  if (!inputs_.sample_weight.empty()) weight = lookup(inputs_.sample_weight, false);
  update_state(y_true, y_pred, weight);
}

void Metric::merge_state(const Metric& other) {
  if (typeid(*this) != typeid(other) || other.variables_.size() != variables_.size())
    throw Error("metric '" + name_ + "' cannot merge the state of metric '" + other.name_ +
                "', another kind of metric");
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    at::Tensor& mine = variables_[i].value;
    const at::Tensor theirs = other.variables_[i].value.to(mine.device());
    switch (variables_[i].reduction) {
      case Reduction::kSum:
        mine = mine + theirs;
        break;
      case Reduction::kMax:
        mine = at::maximum(mine, theirs);
        break;
      case Reduction::kMin:
        mine = at::minimum(mine, theirs);
        break;
    }
  }
}

void Metric::set_state(const std::vector<at::Tensor>& values) {
  if (values.size() != variables_.size())
    throw Error("metric '" + name_ + "' has " + std::to_string(variables_.size()) +
                " state variables, not " + std::to_string(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i)
    variables_[i].value = values[i].detach().to(at::kDouble).reshape({});
}

// ---- Mean and Sum ----------------------------------------------------------

Mean::Mean(std::string name, MetricInputs inputs) : Metric(std::move(name), std::move(inputs)) {
  total_ = add_variable("total", Reduction::kSum);
  count_ = add_variable("count", Reduction::kSum);
}

void Mean::update(const at::Tensor& values, const at::Tensor& sample_weight) {
  const WeightedTotal sums = weighted_total(values, sample_weight);
  const c10::Device device = sums.total.device();
  variable(total_, device).add_(sums.total);
  if (sums.weight.defined())
    variable(count_, device).add_(sums.weight);
  else
    variable(count_, device).add_(sums.count);
}

void Mean::update(double value, double weight) {
  variable(total_, at::kCPU).add_(value * weight);
  variable(count_, at::kCPU).add_(weight);
}

double Mean::result() const {
  const double count = value(count_);
  return count > 0 ? value(total_) / count : 0.0;
}

Sum::Sum(std::string name, MetricInputs inputs) : Metric(std::move(name), std::move(inputs)) {
  total_ = add_variable("total", Reduction::kSum);
}

void Sum::update_state(const at::Tensor&, const at::Tensor& values,
                       const at::Tensor& sample_weight) {
  const at::Tensor total = weighted_total(values, sample_weight).total;
  variable(total_, total.device()).add_(total);
}

// ---- accuracies ------------------------------------------------------------

void Accuracy::update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                            const at::Tensor& sample_weight) {
  if (y_true.sizes() != y_pred.sizes())
    throw Error("metric '" + name() + "': labels " + c10::str(y_true.sizes()) +
                " and predictions " + c10::str(y_pred.sizes()) + " differ in shape");
  update(y_true.eq(y_pred).to(at::kDouble), sample_weight);
}

void SparseCategoricalAccuracy::update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                                             const at::Tensor& sample_weight) {
  const at::Tensor predicted = y_pred.detach().argmax(-1);
  const at::Tensor labels = y_true.detach().reshape(predicted.sizes()).to(at::kLong);
  update(labels.eq(predicted).to(at::kDouble), sample_weight);
}

void SparseTopKCategoricalAccuracy::update_state(const at::Tensor& y_true,
                                                 const at::Tensor& y_pred,
                                                 const at::Tensor& sample_weight) {
  const at::Tensor logits = y_pred.detach();
  const int64_t k = std::min<int64_t>(k_, logits.size(-1));
  const at::Tensor top = std::get<1>(logits.topk(k, -1));
  const at::Tensor labels = y_true.detach().reshape({-1, 1}).to(at::kLong).to(top.device());
  update(top.eq(labels).any(-1).to(at::kDouble), sample_weight);
}

namespace {
at::Tensor difference(const Metric& metric, const at::Tensor& y_true, const at::Tensor& y_pred) {
  if (y_true.numel() != y_pred.numel())
    throw Error("metric '" + metric.name() + "': labels " + c10::str(y_true.sizes()) +
                " and predictions " + c10::str(y_pred.sizes()) + " differ in size");
  return y_pred.detach().to(at::kDouble).reshape(-1) -
         y_true.detach().to(y_pred.device()).to(at::kDouble).reshape(-1);
}
}  // namespace

void MeanAbsoluteError::update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                                     const at::Tensor& sample_weight) {
  update(difference(*this, y_true, y_pred).abs(),
         sample_weight.defined() ? sample_weight.reshape(-1) : sample_weight);
}

void MeanSquaredError::update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                                    const at::Tensor& sample_weight) {
  update(difference(*this, y_true, y_pred).square(),
         sample_weight.defined() ? sample_weight.reshape(-1) : sample_weight);
}

BinaryConfusion::BinaryConfusion(std::string name, MetricInputs inputs)
    : Metric(std::move(name), std::move(inputs)) {
  true_positives_ = add_variable("true_positives", Reduction::kSum);
  false_positives_ = add_variable("false_positives", Reduction::kSum);
  false_negatives_ = add_variable("false_negatives", Reduction::kSum);
}

void BinaryConfusion::update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                                   const at::Tensor& sample_weight) {
  if (y_true.numel() != y_pred.numel())
    throw Error("metric '" + name() + "': labels " + c10::str(y_true.sizes()) +
                " and predictions " + c10::str(y_pred.sizes()) + " differ in size");
  const at::Tensor predicted = y_pred.detach().reshape(-1).gt(0.5).to(at::kDouble);
  const at::Tensor actual = y_true.detach().to(y_pred.device()).reshape(-1).ne(0).to(at::kDouble);
  at::Tensor weight = sample_weight.defined()
                          ? sample_weight.detach().to(y_pred.device()).to(at::kDouble).reshape(-1)
                          : at::ones_like(predicted);
  const c10::Device device = predicted.device();
  variable(true_positives_, device).add_((predicted * actual * weight).sum());
  variable(false_positives_, device).add_((predicted * (1 - actual) * weight).sum());
  variable(false_negatives_, device).add_(((1 - predicted) * actual * weight).sum());
}

double Precision::result() const {
  const double predicted = true_positives() + false_positives();
  return predicted > 0 ? true_positives() / predicted : 0.0;
}

double Recall::result() const {
  const double positive = true_positives() + false_negatives();
  return positive > 0 ? true_positives() / positive : 0.0;
}

}  // namespace garden
