// Optimizers with Keras's update formulas, so Model Garden hyperparameters
// mean the same here. Each owns its state tensors ("slots"), which the
// checkpoint saves by parameter name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "garden/core/config/optimization.h"
#include "garden/optim/lr_schedule.h"

namespace garden::optim {

struct NamedParameter {
  std::string name;
  at::Tensor tensor;  // a leaf that requires grad
};

struct ClipOptions {
  std::optional<double> clipnorm;         // per-gradient L2 norm
  std::optional<double> clipvalue;        // per-element
  std::optional<double> global_clipnorm;  // all gradients together
};

class Optimizer {
 public:
  Optimizer(std::vector<NamedParameter> parameters, SchedulePtr schedule, ClipOptions clip);
  virtual ~Optimizer() = default;

  void zero_grad();
  // Clips the gradients, applies one update at learning_rate(), and counts
  // the iteration. Parameters without a gradient are left alone.
  void step();
  // The rate the next step() uses: the schedule at iterations().
  double learning_rate() const { return (*schedule_)(iterations_); }
  int64_t iterations() const { return iterations_; }
  const std::vector<NamedParameter>& parameters() const { return parameters_; }

  // The state as named tensors ("<parameter>/<slot>") plus a JSON record.
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  nlohmann::json state_meta() const;
  // Restores what state_tensors() / state_meta() saved; throws garden::Error
  // when a slot's parameter or shape does not match.
  void load_state(const std::map<std::string, at::Tensor>& tensors, const nlohmann::json& meta);

 protected:
  // One parameter's update, under NoGradGuard, in place.
  virtual void update(std::size_t index, at::Tensor& parameter, const at::Tensor& gradient,
                      double learning_rate) = 0;
  // Called once per step before the updates (global transforms of gradients).
  virtual void before_updates(std::vector<at::Tensor>& gradients) { (void)gradients; }
  // Per-parameter state, created as zeros like the parameter on first use.
  at::Tensor& slot(std::size_t index, const std::string& name);

 private:
  void clip(std::vector<at::Tensor>& gradients) const;

  std::vector<NamedParameter> parameters_;
  SchedulePtr schedule_;
  ClipOptions clip_;
  int64_t iterations_ = 0;
  std::vector<std::map<std::string, at::Tensor>> slots_;
};

// Scales `gradients` in place so their global L2 norm is at most max_norm
// (tf.clip_by_global_norm); returns the norm before clipping.
double clip_by_global_norm(std::vector<at::Tensor>& gradients, double max_norm);

// Model Garden's OptimizerFactory: the optimizer and schedule the config
// names, over `parameters`.
std::unique_ptr<Optimizer> make_optimizer(const config::OptimizationConfig& config,
                                          std::vector<NamedParameter> parameters);

}  // namespace garden::optim
