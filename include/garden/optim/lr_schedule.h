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
#include <memory>

#include "garden/core/config/optimization.h"

namespace garden::optim {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // The rate used by the update at `step` (the optimizer's iteration count).
  virtual double operator()(int64_t step) const = 0;
};

using SchedulePtr = std::shared_ptr<const LearningRateSchedule>;

// The schedule `learning_rate` describes, wrapped in `warmup` when its type
// is set. Throws config::ConfigError for a missing required value.
SchedulePtr make_schedule(const config::LrConfig& learning_rate,
                          const config::WarmupConfig& warmup);

}  // namespace garden::optim
