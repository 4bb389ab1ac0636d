// Streaming metrics with Keras's update / result / reset protocol; results
// appear in the logs under the metric's name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace garden {

class Metric {
 public:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  virtual ~Metric() = default;
  const std::string& name() const { return name_; }
  // Keras's update_state(y_true, y_pred, sample_weight); sample_weight may be
  // undefined.
  virtual void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                            const at::Tensor& sample_weight = {}) = 0;
  virtual double result() const = 0;
  virtual void reset() = 0;

 private:
  std::string name_;
};

using MetricPtr = std::shared_ptr<Metric>;
using MetricList = std::vector<MetricPtr>;

// Weighted mean of the values it is given.
class Mean : public Metric {
 public:
  using Metric::Metric;
  void update(const at::Tensor& values, const at::Tensor& sample_weight = {});
  void update(double value, double weight = 1.0);
  // Keras Mean ignores y_true: the values are y_pred.
  void update_state(const at::Tensor&, const at::Tensor& values,
                    const at::Tensor& sample_weight = {}) override {
    update(values, sample_weight);
  }
  double result() const override { return count_ > 0 ? total_ / count_ : 0.0; }
  void reset() override { total_ = count_ = 0.0; }
  double total() const { return total_; }
  double count() const { return count_; }

 private:
  double total_ = 0.0;
  double count_ = 0.0;
};

// Weighted sum of the values it is given.
class Sum : public Metric {
 public:
  using Metric::Metric;
  void update_state(const at::Tensor&, const at::Tensor& values,
                    const at::Tensor& sample_weight = {}) override;
  double result() const override { return total_; }
  void reset() override { total_ = 0.0; }

 private:
  double total_ = 0.0;
};

// Fraction of predictions equal to the labels (same shapes).
class Accuracy : public Mean {
 public:
  using Mean::Mean;
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;
};

// Fraction of rows whose argmax over the last axis of y_pred (logits or
// probabilities) equals the integer label in y_true.
class SparseCategoricalAccuracy : public Mean {
 public:
  using Mean::Mean;
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;
};

}  // namespace garden
