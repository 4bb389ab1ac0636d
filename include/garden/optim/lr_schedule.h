// Learning-rate schedules and warmups with Model Garden's formulas
// (official/modeling/optimization/lr_schedule.py): the base schedule is
// evaluated at the raw step while warmup is in force.
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
