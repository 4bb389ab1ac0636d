// The shapes that flow between Task, Trainer and Controller.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

namespace garden {

// A batch: named tensors, like Model Garden's dict of tensors.
using Batch = std::map<std::string, at::Tensor>;

// One term of an Average: the mean `value` of `count` items (tokens,
// examples, total sample weight), entering the sum with `weight`.
struct AverageTerm {
  at::Tensor value;  // scalar
  at::Tensor count;  // scalar
  double weight = 1.0;
};

// A weighted sum of means, each over its own count, as a step reports a loss
// (one term for a plain mean; a loss of several parts over different counts,
// such as ELECTRA's generator and discriminator losses, has one term each).
// Averages are folded over steps, evaluations and workers term by term,
// sum(value * count) / sum(count), so the result is weighted by what each
// term averages, whatever the batch size (Marian's RationalLoss).
struct Average {
  std::vector<AverageTerm> terms;
  // sum of weight * value over the terms.
  double result() const;
};

// Host-side rows a task keeps from each validation step and folds over an
// evaluation: ids (decoded tokens, labels, argmax predictions) and values
// (logits, regression outputs). Both are gathered from every worker exactly.
using IdRows = std::vector<std::vector<int64_t>>;
using ValueRows = std::vector<std::vector<double>>;

// One value in the logs: a number, a tensor, an Average, or a host-side list
// (strings, id rows, value rows) that a task aggregates over an evaluation.
using LogValue =
    std::variant<double, at::Tensor, Average, std::vector<std::string>, IdRows, ValueRows>;
using Logs = std::map<std::string, LogValue>;

// Whether `value` is a host-side list.
bool is_host_list(const LogValue& value);
// Appends every host-side list of `step_logs` to the list of the same key
// in `state` (made empty first when absent). Throws garden::Error when a
// key holds lists of two kinds.
void append_host_lists(Logs& state, const Logs& step_logs);

// The number a log value stands for (a tensor must hold one element; an
// Average gives its result); throws garden::Error for host-side data.
double to_double(const LogValue& value);
bool is_scalar(const LogValue& value);

// tf.distribute.InputContext: which input pipeline this is, out of how many.
struct InputContext {
  int64_t num_input_pipelines = 1;
  int64_t input_pipeline_id = 0;
  int64_t num_replicas_in_sync = 1;
  // The batch one replica sees; throws unless it divides evenly.
  int64_t per_replica_batch_size(int64_t global_batch_size) const;
};

}  // namespace garden
