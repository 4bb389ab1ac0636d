#include "garden/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace garden::optim {
namespace {
using config::ConfigError;

class FunctionSchedule : public LearningRateSchedule {
 public:
  explicit FunctionSchedule(std::function<double(double)> f, int64_t offset = 0)
      : f_(std::move(f)), offset_(offset) {}
  double operator()(int64_t step) const override { return f_(static_cast<double>(step - offset_)); }

 private:
  std::function<double(double)> f_;
  int64_t offset_;
};

template <class T>
T require(const std::optional<T>& value, const char* schedule, const char* key) {
  if (!value)
    throw ConfigError("trainer.optimizer_config." + std::string(schedule) + "." + key +
                      " must be set");
  return *value;
}

// Garden's own schedules; their config subsections are LrConfig's members.
void register_builtin_schedules(config::Registry<ScheduleFactory>& r) {
  r.add("constant", [](const config::Config& subsection) -> SchedulePtr {
    const double lr = static_cast<const config::ConstantLrConfig&>(subsection).learning_rate;
    return std::make_shared<FunctionSchedule>([lr](double) { return lr; });
  });
  r.add("stepwise", [](const config::Config& subsection) -> SchedulePtr {
    const auto& c = static_cast<const config::StepwiseLrConfig&>(subsection);
    const auto boundaries = require(c.boundaries, "learning_rate.stepwise", "boundaries");
    const auto values = require(c.values, "learning_rate.stepwise", "values");
    if (values.size() != boundaries.size() + 1)
      throw ConfigError("stepwise learning rate needs one more value than boundaries");
    return std::make_shared<FunctionSchedule>(
        [boundaries, values](double step) {
          // Keras PiecewiseConstantDecay: values[i] while step <= boundaries[i].
          for (std::size_t i = 0; i < boundaries.size(); ++i)
            if (step <= static_cast<double>(boundaries[i])) return values[i];
          return values.back();
        },
        c.offset);
  });
  r.add("exponential", [](const config::Config& subsection) -> SchedulePtr {
    const auto& c = static_cast<const config::ExponentialLrConfig&>(subsection);
    const double initial =
        require(c.initial_learning_rate, "learning_rate.exponential", "initial_learning_rate");
    const double decay_steps =
        static_cast<double>(require(c.decay_steps, "learning_rate.exponential", "decay_steps"));
    const double rate = require(c.decay_rate, "learning_rate.exponential", "decay_rate");
    const bool staircase = c.staircase.value_or(false);
    return std::make_shared<FunctionSchedule>(
        [=](double step) {
          double p = step / decay_steps;
          if (staircase) p = std::floor(p);
          return initial * std::pow(rate, p);
        },
        c.offset);
  });
  r.add("polynomial", [](const config::Config& subsection) -> SchedulePtr {
    const auto& c = static_cast<const config::PolynomialLrConfig&>(subsection);
    const double initial =
        require(c.initial_learning_rate, "learning_rate.polynomial", "initial_learning_rate");
    const double decay_steps =
        static_cast<double>(require(c.decay_steps, "learning_rate.polynomial", "decay_steps"));
    const double end = c.end_learning_rate;
    const double power = c.power;
    const bool cycle = c.cycle;
    return std::make_shared<FunctionSchedule>(
        [=](double step) {
          double steps = decay_steps;
          if (cycle) {
            // Keras: multiplier 1 at step 0, then ceil(step / decay_steps).
            const double multiplier = step == 0 ? 1.0 : std::ceil(step / decay_steps);
            steps = decay_steps * multiplier;
          } else {
            step = std::min(step, decay_steps);
          }
          return (initial - end) * std::pow(1.0 - step / steps, power) + end;
        },
        c.offset);
  });
  r.add("cosine", [](const config::Config& subsection) -> SchedulePtr {
    const auto& c = static_cast<const config::CosineLrConfig&>(subsection);
    const double initial =
        require(c.initial_learning_rate, "learning_rate.cosine", "initial_learning_rate");
    const double decay_steps =
        static_cast<double>(require(c.decay_steps, "learning_rate.cosine", "decay_steps"));
    const double alpha = c.alpha;
    return std::make_shared<FunctionSchedule>(
        [=](double step) {
          step = std::min(step, decay_steps);
          const double cosine = 0.5 * (1.0 + std::cos(M_PI * step / decay_steps));
          return initial * ((1.0 - alpha) * cosine + alpha);
        },
        c.offset);
  });
  r.add("power", [](const config::Config& subsection) -> SchedulePtr {
    const auto& c = static_cast<const config::DirectPowerLrConfig&>(subsection);
    const double initial =
        require(c.initial_learning_rate, "learning_rate.power", "initial_learning_rate");
    const double power = c.power;
    // max(step, 1): step 0 would give infinity for a negative power.
    return std::make_shared<FunctionSchedule>(
        [=](double step) { return initial * std::pow(std::max(step, 1.0), power); });
  });
  r.add("power_linear", [](const config::Config& subsection) -> SchedulePtr {
    const auto& p = static_cast<const config::PowerAndLinearDecayLrConfig&>(subsection);
    const double initial =
        require(p.initial_learning_rate, "learning_rate.power_linear", "initial_learning_rate");
    const double total = static_cast<double>(
        require(p.total_decay_steps, "learning_rate.power_linear", "total_decay_steps"));
    const double power = p.power;
    const double linear_steps = total * p.linear_decay_fraction;
    return std::make_shared<FunctionSchedule>(
        [=](double step) {
          double lr = initial * std::pow(std::max(step, 1.0), power);
          if (linear_steps > 0)
            lr = std::max(0.0, lr * std::min(1.0, (total - step) / linear_steps));
          return lr;
        },
        p.offset);
  });
  r.add("power_with_offset", [](const config::Config& subsection) -> SchedulePtr {
    const auto& p = static_cast<const config::PowerDecayWithOffsetLrConfig&>(subsection);
    const double initial = require(p.initial_learning_rate, "learning_rate.power_with_offset",
                                   "initial_learning_rate");
    const double power = p.power;
    const double offset = static_cast<double>(p.offset);
    const double pre_offset = p.pre_offset_learning_rate;
    // The offset is part of the formula here (the rate before it is
    // pre_offset_learning_rate), so the raw step is passed in.
    return std::make_shared<FunctionSchedule>([=](double step) {
      const double decayed = initial * std::pow(std::max(step - offset, 1.0), power);
      // A negative power can make the decayed rate huge: capped, as in Model Garden.
      return std::min(step > offset ? decayed : pre_offset, pre_offset);
    });
  });
}

SchedulePtr base_schedule(const config::LrConfig& c) {
  const std::string type = c.type.empty() ? "constant" : c.type;
  const config::Config* subsection = c.get();
  if (c.type.empty()) subsection = &c.constant;
  if (!subsection) throw ConfigError("unknown learning_rate type '" + type + "'");
  return schedule_registry().get(type)(*subsection);
}

class WarmupSchedule : public LearningRateSchedule {
 public:
  WarmupSchedule(SchedulePtr after, int64_t warmup_steps, std::function<double(double, double)> f)
      : after_(std::move(after)), warmup_steps_(warmup_steps), f_(std::move(f)) {}
  double operator()(int64_t step) const override {
    if (step < warmup_steps_) {
      const double target = (*after_)(warmup_steps_);
      return f_(static_cast<double>(step), target);
    }
    return (*after_)(step);
  }

 private:
  SchedulePtr after_;
  int64_t warmup_steps_;
  std::function<double(double, double)> f_;
};

}  // namespace

config::Registry<ScheduleFactory>& schedule_registry() {
  static config::Registry<ScheduleFactory>* registry = [] {
    auto* r = new config::Registry<ScheduleFactory>("schedule");
    register_builtin_schedules(*r);
    return r;
  }();
  return *registry;
}

SchedulePtr make_schedule(const config::LrConfig& learning_rate,
                          const config::WarmupConfig& warmup) {
  SchedulePtr base = base_schedule(learning_rate);
  if (warmup.type.empty()) return base;
  if (warmup.type == "linear") {
    const int64_t steps = require(warmup.linear.warmup_steps, "warmup.linear", "warmup_steps");
    const double start = warmup.linear.warmup_learning_rate;
    return std::make_shared<WarmupSchedule>(base, steps, [=](double step, double target) {
      return start + step / static_cast<double>(steps) * (target - start);
    });
  }
  if (warmup.type == "polynomial") {
    const int64_t steps =
        require(warmup.polynomial.warmup_steps, "warmup.polynomial", "warmup_steps");
    const double power = warmup.polynomial.power;
    return std::make_shared<WarmupSchedule>(base, steps, [=](double step, double target) {
      // Model Garden starts from step 1 (max(step, 1)) so that a negative
      // power cannot give infinity: the rate at step 0 is the rate at step 1.
      const double done = steps <= 0 ? 1.0 : std::max(step, 1.0) / static_cast<double>(steps);
      return target * std::pow(done, power);
    });
  }
  throw ConfigError("unknown warmup type '" + warmup.type + "'");
}

}  // namespace garden::optim
