// Learning-rate schedules and warmups with Model Garden's formulas
// (official/modeling/optimization/lr_schedule.py and the Keras schedules it
// wraps). A schedule's `offset` is subtracted from the step before the
// formula (so steps before the offset see the formula at a negative step, as
// in Model Garden), except power_with_offset, whose formula uses it directly.
// A warmup replaces the rate while step < warmup_steps, rising to the base
// schedule's rate at warmup_steps; afterwards the base schedule is evaluated
// at the raw step, not at step - warmup_steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "garden/config/optimization.h"
#include "garden/config/registry.h"

namespace garden::optim {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // The rate used by the update at `step` (the optimizer's iteration count).
  virtual double operator()(int64_t step) const = 0;
};

using SchedulePtr = std::shared_ptr<const LearningRateSchedule>;

// Builds a schedule from its config subsection (the one
// trainer.optimizer_config.learning_rate.type names).
using ScheduleFactory = std::function<SchedulePtr(const config::Config& subsection)>;

// Every learning-rate schedule by name: Garden's own (constant, stepwise,
// exponential, polynomial, cosine, power, power_linear, power_with_offset)
// and those registered with register_schedule.
config::Registry<ScheduleFactory>& schedule_registry();

// Registers a schedule of your own, from your project: `type` becomes a
// choice of trainer.optimizer_config.learning_rate with ConfigT's keys.
// Register before any config is made (first thing in main).
template <class ConfigT>
void register_schedule(const std::string& type, std::function<SchedulePtr(const ConfigT&)> build) {
  static_assert(std::is_base_of_v<config::Config, ConfigT>, "ConfigT must be a config::Config");
  config::register_oneof_choice(typeid(config::LrConfig), type,
                                [] { return std::make_unique<ConfigT>(); });
  schedule_registry().add(type, [build](const config::Config& subsection) {
    return build(static_cast<const ConfigT&>(subsection));
  });
}

// The schedule `learning_rate` describes, wrapped in `warmup` when its type
// is set. Throws config::ConfigError for a missing required value.
SchedulePtr make_schedule(const config::LrConfig& learning_rate,
                          const config::WarmupConfig& warmup);

}  // namespace garden::optim
