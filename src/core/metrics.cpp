#include "garden/core/metrics.h"

#include <ATen/ATen.h>

#include "garden/base/error.h"

namespace garden {
namespace {
at::Tensor as_double_cpu(const at::Tensor& t) { return t.detach().to(at::kCPU).to(at::kDouble); }

// Keras broadcasts the weights to the values' shape.
std::pair<double, double> weighted_total(const at::Tensor& values, const at::Tensor& weights) {
  const at::Tensor v = as_double_cpu(values);
  if (!weights.defined())
    return {v.sum().item<double>(), static_cast<double>(v.numel())};
  const at::Tensor w = as_double_cpu(weights).expand_as(v);
  return {(v * w).sum().item<double>(), w.sum().item<double>()};
}
}  // namespace

void Mean::update(const at::Tensor& values, const at::Tensor& sample_weight) {
  const auto [total, count] = weighted_total(values, sample_weight);
  total_ += total;
  count_ += count;
}

void Mean::update(double value, double weight) {
  total_ += value * weight;
  count_ += weight;
}

void Sum::update_state(const at::Tensor&, const at::Tensor& values,
                       const at::Tensor& sample_weight) {
  total_ += weighted_total(values, sample_weight).first;
}

void Accuracy::update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                            const at::Tensor& sample_weight) {
  if (y_true.sizes() != y_pred.sizes())
    throw Error("metric '" + name() + "': labels and predictions differ in shape");
  update(y_true.eq(y_pred).to(at::kDouble), sample_weight);
}

void SparseCategoricalAccuracy::update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                                             const at::Tensor& sample_weight) {
  const at::Tensor predicted = y_pred.detach().argmax(-1);
  const at::Tensor labels = y_true.detach().reshape(predicted.sizes()).to(at::kLong);
  update(labels.eq(predicted).to(at::kDouble), sample_weight);
}

}  // namespace garden
