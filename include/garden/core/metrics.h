// Streaming metrics with Keras's update / result / reset protocol; results
// appear in the logs under the metric's name.
//
// A metric reads what it needs from a step's labels and model outputs by
// name (MetricInputs), so a task lists its metrics and needs no code to feed
// them. Its state is a few tensors, each with a declared reduction: the
// states of two metrics (two halves of a batch, two workers) merge into the
// state of one metric that saw both, and a later issue all-reduces them over
// c10d without knowing the metric.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "garden/base/types.h"

namespace garden {

// How a state variable combines across metrics that saw different data.
enum class Reduction { kSum, kMax, kMin };

struct MetricVariable {
  std::string name;
  at::Tensor value;  // float64, on the device of the data it last saw
  Reduction reduction;
  double initial_value = 0.0;
};

// Where a metric finds its inputs: y_true in the labels (the batch), y_pred
// and, when named, sample_weight in the model outputs or else the labels.
// An empty y_true means the metric reads only y_pred (Mean, Sum).
struct MetricInputs {
  std::string y_true = "label";
  std::string y_pred = "logits";
  std::string sample_weight;
};

class Metric {
 public:
  explicit Metric(std::string name, MetricInputs inputs = {});
  virtual ~Metric() = default;
  const std::string& name() const { return name_; }
  const MetricInputs& inputs() const { return inputs_; }

  // Keras's update_state(y_true, y_pred, sample_weight); sample_weight may be
  // undefined.
  virtual void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                            const at::Tensor& sample_weight = {}) = 0;
  // update_state with the inputs read by name from one step's labels and
  // outputs; a missing input is an error naming the metric and the key.
  void update(const Batch& labels, const Batch& outputs);
  virtual double result() const = 0;
  // Every variable back to its initial value, in place (a step captured as
  // a CUDA graph goes on updating the same tensors).
  void reset();

  // The state (Keras's metric.variables).
  const std::vector<MetricVariable>& variables() const { return variables_; }
  // Folds `other`'s state into this one, variable by variable, by each
  // variable's reduction. Both must be the same kind of metric.
  void merge_state(const Metric& other);
  // Replaces the state's values (an all-reduced state, a restored one).
  void set_state(const std::vector<at::Tensor>& values);

 protected:
  // Declares a scalar state variable; returns its index.
  std::size_t add_variable(const std::string& name, Reduction reduction,
                           double initial_value = 0.0);
  // The variable, moved to `device` first if it lives elsewhere.
  at::Tensor& variable(std::size_t index, const c10::Device& device);
  double value(std::size_t index) const;

 private:
  std::string name_;
  MetricInputs inputs_;
  std::vector<MetricVariable> variables_;
};

using MetricPtr = std::shared_ptr<Metric>;
using MetricList = std::vector<MetricPtr>;

// Weighted mean of the values it is given: variables total and count (sums).
class Mean : public Metric {
 public:
  explicit Mean(std::string name, MetricInputs inputs = {"", "", ""});
  void update(const at::Tensor& values, const at::Tensor& sample_weight = {});
  void update(double value, double weight = 1.0);
  using Metric::update;
  // Keras Mean ignores y_true: the values are y_pred.
  void update_state(const at::Tensor&, const at::Tensor& values,
                    const at::Tensor& sample_weight = {}) override {
    update(values, sample_weight);
  }
  double result() const override;
  double total() const { return value(total_); }
  double count() const { return value(count_); }

 private:
  std::size_t total_, count_;
};

// Weighted sum of the values it is given.
class Sum : public Metric {
 public:
  explicit Sum(std::string name, MetricInputs inputs = {"", "", ""});
  void update_state(const at::Tensor&, const at::Tensor& values,
                    const at::Tensor& sample_weight = {}) override;
  double result() const override { return value(total_); }

 private:
  std::size_t total_;
};

// Fraction of predictions equal to the labels (same shapes).
class Accuracy : public Mean {
 public:
  explicit Accuracy(std::string name, MetricInputs inputs = {"label", "predictions", ""})
      : Mean(std::move(name), std::move(inputs)) {}
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;
};

// Fraction of rows whose argmax over the last axis of y_pred (logits or
// probabilities) equals the integer label in y_true.
class SparseCategoricalAccuracy : public Mean {
 public:
  explicit SparseCategoricalAccuracy(std::string name, MetricInputs inputs = {})
      : Mean(std::move(name), std::move(inputs)) {}
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;
};

// Keras's SparseTopKCategoricalAccuracy: the share of examples whose label is
// among the k largest of y_pred (Model Garden's top_5_accuracy).
class SparseTopKCategoricalAccuracy : public Mean {
 public:
  SparseTopKCategoricalAccuracy(std::string name, int64_t k, MetricInputs inputs = {})
      : Mean(std::move(name), std::move(inputs)), k_(k) {}
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;

 private:
  int64_t k_;
};

// Mean of |y_pred - y_true| (Keras's MeanAbsoluteError), per element.
class MeanAbsoluteError : public Mean {
 public:
  explicit MeanAbsoluteError(std::string name, MetricInputs inputs = {"label", "predictions", ""})
      : Mean(std::move(name), std::move(inputs)) {}
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;
};

// Mean of (y_pred - y_true)^2 (Keras's MeanSquaredError), per element.
class MeanSquaredError : public Mean {
 public:
  explicit MeanSquaredError(std::string name, MetricInputs inputs = {"label", "predictions", ""})
      : Mean(std::move(name), std::move(inputs)) {}
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;
};

// Keras's Precision and Recall at the threshold 0.5: a prediction above 0.5
// is positive, a label is positive when it is not 0; sample_weight weights
// each element. Variables true_positives, false_positives, false_negatives
// (sums).
class BinaryConfusion : public Metric {
 public:
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred,
                    const at::Tensor& sample_weight = {}) override;
  double true_positives() const { return value(true_positives_); }
  double false_positives() const { return value(false_positives_); }
  double false_negatives() const { return value(false_negatives_); }

 protected:
  BinaryConfusion(std::string name, MetricInputs inputs);

 private:
  std::size_t true_positives_, false_positives_, false_negatives_;
};

// true_positives / (true_positives + false_positives); 0 before any
// positive prediction.
class Precision : public BinaryConfusion {
 public:
  explicit Precision(std::string name, MetricInputs inputs = {"label", "predictions", ""})
      : BinaryConfusion(std::move(name), std::move(inputs)) {}
  double result() const override;
};

// true_positives / (true_positives + false_negatives); 0 before any
// positive label.
class Recall : public BinaryConfusion {
 public:
  explicit Recall(std::string name, MetricInputs inputs = {"label", "predictions", ""})
      : BinaryConfusion(std::move(name), std::move(inputs)) {}
  double result() const override;
};

}  // namespace garden
