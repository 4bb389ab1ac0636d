// A training step's scalar logs on their way to the loop's means: kept on
// the step's device until the loop ends, read to the host once, and folded
// into running means (over every worker by the distribution strategy).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/core/task.h"

namespace garden {

// A running mean of one scalar log: plain (training, Model Garden's Mean of
// step values) or weighted by what an Average averages (evaluation).
class ScalarMean {
 public:
  void add(const LogValue& value, bool weighted);
  double result() const;
  void reset() { *this = ScalarMean(); }
  // The sums, to fold another worker's mean in with merge().
  nlohmann::json state() const;
  void merge(const nlohmann::json& state);

 private:
  double plain_total_ = 0.0;
  int64_t plain_count_ = 0;
  // Per Average term: sum of value * count, sum of count, weight.
  std::vector<std::array<double, 3>> terms_;
  bool weighted_ = false;
};

// One scalar a training step logged, on the host: a number or a tensor is
// one term (its value, count 1, weight 1); an Average one term per part (the
// part's mean, the count it averages, its weight).
struct StepScalar {
  struct Term {
    double value, count, weight;
  };
  std::string key;
  bool average = false;
  std::vector<Term> terms;
};
using StepScalars = std::vector<StepScalar>;

// The scalars of a loop's steps. keep() copies a step's tensors into one
// vector on their device; take() reads every step's to the host in one copy
// per device, so the host never waits for a GPU step.
class PendingStepScalars {
 public:
  void keep(const Logs& logs);
  std::vector<StepScalars> take();

 private:
  struct Step {
    struct Term {
      double value, count, weight;
      int64_t value_at, count_at;  // index into values; -1: the number beside it
    };
    struct Entry {
      std::string key;
      bool average;
      std::vector<Term> terms;
    };
    std::vector<Entry> entries;
    at::Tensor values;
  };
  std::vector<Step> steps_;
};

}  // namespace garden
