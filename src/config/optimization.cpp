#include "garden/config/optimization.h"

#include "garden/config/validation.h"

namespace garden::config {

void BaseOptimizerConfig::visit(Visitor& v) {
  v("clipnorm", clipnorm, "Clip each gradient to this L2 norm.");
  v("clipvalue", clipvalue, "Clip each gradient element to [-clipvalue, clipvalue].");
  v("global_clipnorm", global_clipnorm, "Clip all gradients together to this global L2 norm.");
}

void BaseOptimizerConfig::validate() const {
  check_range("clipnorm", clipnorm, Range::above(0));
  check_range("clipvalue", clipvalue, Range::above(0));
  check_range("global_clipnorm", global_clipnorm, Range::above(0));
  // Keras refuses the pair (OptimizerV2.__init__).
  if (clipnorm && global_clipnorm)
    refuse("global_clipnorm", "cannot be set together with clipnorm; set one of them");
}

namespace {
// A rate of decay per step (a beta, rho or momentum): 1 would never forget.
Range decay_factor() { return Range::at_least(0).below(1); }
// Added to a denominator: 0 can divide by zero.
Range denominator_epsilon() { return Range::above(0); }
const char* const kKerasName = "Keras's name for the optimizer; Garden does not use it";
const char* const kScheduleName = "Keras's name for the schedule; Garden does not use it";
}  // namespace

void SGDConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("decay", decay, "Legacy Keras time-based decay.");
  v("nesterov", nesterov, "Use Nesterov momentum.");
  v("momentum", momentum, "Momentum factor.");
}

void SGDConfig::validate() const {
  BaseOptimizerConfig::validate();
  check_range("decay", decay, Range::at_least(0));
  // Keras SGD: momentum in [0, 1].
  check_range("momentum", momentum, Range::at_least(0).at_most(1));
}

std::vector<IgnoredKey> SGDConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, SGDConfig().name, kKerasName);
  return out;
}

void AdamConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("beta_1", beta_1, "Decay of the first-moment estimate.");
  v("beta_2", beta_2, "Decay of the second-moment estimate.");
  v("epsilon", epsilon, "Added to the denominator (Keras placement).");
  v("amsgrad", amsgrad, "Use the AMSGrad variant.");
}

void AdamConfig::validate() const {
  BaseOptimizerConfig::validate();
  check_range("beta_1", beta_1, decay_factor());
  check_range("beta_2", beta_2, decay_factor());
  check_range("epsilon", epsilon, denominator_epsilon());
}

std::vector<IgnoredKey> AdamConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, AdamConfig().name, kKerasName);
  return out;
}

void AdamWeightDecayConfig::visit(Visitor& v) {
  AdamConfig::visit(v);
  v("weight_decay_rate", weight_decay_rate, "Decoupled weight decay, scaled by the learning rate.");
  v("include_in_weight_decay", include_in_weight_decay,
    "Regexes of parameter names that always get weight decay.");
  v("exclude_from_weight_decay", exclude_from_weight_decay,
    "Regexes of parameter names that get no weight decay.");
  v("gradient_clip_norm", gradient_clip_norm, "Global-norm gradient clipping; 0 disables.");
}

void AdamWeightDecayConfig::validate() const {
  AdamConfig::validate();
  check_range("weight_decay_rate", weight_decay_rate, Range::at_least(0));
  check_regexes("include_in_weight_decay", include_in_weight_decay);
  check_regexes("exclude_from_weight_decay", exclude_from_weight_decay);
  // 0 disables.
  check_range("gradient_clip_norm", gradient_clip_norm, Range::at_least(0));
}

std::vector<IgnoredKey> AdamWeightDecayConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, AdamWeightDecayConfig().name, kKerasName);
  return out;
}

void LAMBConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("beta_1", beta_1, "Decay of the first-moment estimate.");
  v("beta_2", beta_2, "Decay of the second-moment estimate.");
  v("epsilon", epsilon, "Added to sqrt of the bias-corrected second moment.");
  v("weight_decay_rate", weight_decay_rate,
    "Decoupled weight decay, added to the update before the trust ratio.");
  v("exclude_from_weight_decay", exclude_from_weight_decay,
    "Regexes of parameter names that get no weight decay.");
  v("exclude_from_layer_adaptation", exclude_from_layer_adaptation,
    "Regexes of parameter names that get no trust ratio; null uses exclude_from_weight_decay.");
}

void LAMBConfig::validate() const {
  BaseOptimizerConfig::validate();
  check_range("beta_1", beta_1, decay_factor());
  check_range("beta_2", beta_2, decay_factor());
  check_range("epsilon", epsilon, denominator_epsilon());
  check_range("weight_decay_rate", weight_decay_rate, Range::at_least(0));
  check_regexes("exclude_from_weight_decay", exclude_from_weight_decay);
  check_regexes("exclude_from_layer_adaptation", exclude_from_layer_adaptation);
}

std::vector<IgnoredKey> LAMBConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, LAMBConfig().name, kKerasName);
  return out;
}

void RMSPropConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("rho", rho, "Decay of the mean-square estimate.");
  v("momentum", momentum, "Momentum factor; 0 disables.");
  v("epsilon", epsilon,
    "Numerical stability (Keras: outside the sqrt without momentum, inside with it).");
  v("centered", centered, "Normalize by the variance estimate instead of the mean square.");
}

void RMSPropConfig::validate() const {
  BaseOptimizerConfig::validate();
  check_range("rho", rho, decay_factor());
  check_range("momentum", momentum, decay_factor());
  check_range("epsilon", epsilon, denominator_epsilon());
}

std::vector<IgnoredKey> RMSPropConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, RMSPropConfig().name, kKerasName);
  return out;
}

void AdagradConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("initial_accumulator_value", initial_accumulator_value,
    "Starting value of the squared-gradient accumulators.");
  v("epsilon", epsilon, "Added to sqrt of the accumulator.");
}

void AdagradConfig::validate() const {
  BaseOptimizerConfig::validate();
  // TensorFlow: the accumulators must start non-negative.
  check_range("initial_accumulator_value", initial_accumulator_value, Range::at_least(0));
  check_range("epsilon", epsilon, denominator_epsilon());
}

std::vector<IgnoredKey> AdagradConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, AdagradConfig().name, kKerasName);
  return out;
}

void EMAConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("trainable_weights_only", trainable_weights_only,
    "Average only trainable weights; false also averages buffers (batch-norm statistics).");
  v("average_decay", average_decay, "Decay of the moving average.");
  v("start_step", start_step, "Before this step the average just copies the weights.");
  v("dynamic_decay", dynamic_decay,
    "Use min(average_decay, (1 + s) / (10 + s)), s = step - start_step.");
}

void EMAConfig::validate() const {
  BaseOptimizerConfig::validate();
  check_range("average_decay", average_decay, Range::at_least(0).at_most(1));
  check_range("start_step", start_step, Range::at_least(0));
}

std::vector<IgnoredKey> EMAConfig::ignored_keys() const {
  const EMAConfig d;
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, d.name, kKerasName);
  // Model Garden's EMA wraps the optimizer, which does the clipping.
  const char* const clipping = "the optimizer clips, not the moving average";
  note_ignored(out, "clipnorm", clipnorm, d.clipnorm, clipping);
  note_ignored(out, "clipvalue", clipvalue, d.clipvalue, clipping);
  note_ignored(out, "global_clipnorm", global_clipnorm, d.global_clipnorm, clipping);
  return out;
}

void OptimizerConfig::visit(Visitor& v) {
  v("type", type, "sgd, adam, adamw, lamb, rmsprop or adagrad.");
  v("sgd", sgd, "Stochastic gradient descent.");
  v("adam", adam, "Adam.");
  v("adamw", adamw, "Adam with decoupled weight decay.");
  v("lamb", lamb, "Layer-wise adaptive moments (LAMB).");
  v("rmsprop", rmsprop, "RMSprop.");
  v("adagrad", adagrad, "Adagrad.");
  visit_registered_choices(v, typeid(OptimizerConfig));
}

void ConstantLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("learning_rate", learning_rate, "The learning rate.");
}

void ConstantLrConfig::validate() const {
  check_range("learning_rate", learning_rate, Range::at_least(0));
}

std::vector<IgnoredKey> ConstantLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, ConstantLrConfig().name, kScheduleName);
  return out;
}

void StepwiseLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("boundaries", boundaries, "Steps at which the rate changes.");
  v("values", values, "Rates before, between and after the boundaries.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
}

void StepwiseLrConfig::validate() const {
  if (values) check_each("values", *values, Range::at_least(0));
  if (boundaries) {
    check_each("boundaries", *boundaries, Range::at_least(0));
    for (std::size_t i = 1; i < boundaries->size(); ++i)
      if ((*boundaries)[i] <= (*boundaries)[i - 1])
        refuse("boundaries[" + std::to_string(i) + "]",
               std::to_string((*boundaries)[i]) + " is not above the boundary before it (" +
                   std::to_string((*boundaries)[i - 1]) + "); boundaries must increase");
  }
  check_range("offset", offset, Range::at_least(0));
  const std::size_t nb = boundaries ? boundaries->size() : 0;
  const std::size_t nv = values ? values->size() : 0;
  if ((nb || nv) && nv != nb + 1)
    refuse("values", "has " + std::to_string(nv) + " entries for " + std::to_string(nb) +
                         " boundaries; it needs one more than boundaries");
}

std::vector<IgnoredKey> StepwiseLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, StepwiseLrConfig().name, kScheduleName);
  return out;
}

void ExponentialLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at step 0.");
  v("decay_steps", decay_steps, "Steps per decay period.");
  v("decay_rate", decay_rate, "Factor applied per period.");
  v("staircase", staircase, "Decay in whole periods.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
}

void ExponentialLrConfig::validate() const {
  check_range("initial_learning_rate", initial_learning_rate, Range::at_least(0));
  check_range("decay_steps", decay_steps, Range::at_least(1));
  check_range("decay_rate", decay_rate, Range::above(0));
  check_range("offset", offset, Range::at_least(0));
}

std::vector<IgnoredKey> ExponentialLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, ExponentialLrConfig().name, kScheduleName);
  return out;
}

void PolynomialLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at step 0.");
  v("decay_steps", decay_steps, "Steps to reach end_learning_rate.");
  v("end_learning_rate", end_learning_rate, "Final rate.");
  v("power", power, "Polynomial power.");
  v("cycle", cycle, "Restart the decay after decay_steps.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
}

void PolynomialLrConfig::validate() const {
  check_range("initial_learning_rate", initial_learning_rate, Range::at_least(0));
  check_range("decay_steps", decay_steps, Range::at_least(1));
  check_range("end_learning_rate", end_learning_rate, Range::at_least(0));
  // (1 - step / decay_steps)^power: a negative power grows without bound.
  check_range("power", power, Range::at_least(0));
  check_range("offset", offset, Range::at_least(0));
}

std::vector<IgnoredKey> PolynomialLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, PolynomialLrConfig().name, kScheduleName);
  return out;
}

void CosineLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at step 0.");
  v("decay_steps", decay_steps, "Steps of the cosine decay.");
  v("alpha", alpha, "Final rate as a fraction of the initial rate.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
}

void CosineLrConfig::validate() const {
  check_range("initial_learning_rate", initial_learning_rate, Range::at_least(0));
  check_range("decay_steps", decay_steps, Range::at_least(1));
  check_range("alpha", alpha, Range::at_least(0).at_most(1));
  check_range("offset", offset, Range::at_least(0));
}

std::vector<IgnoredKey> CosineLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, CosineLrConfig().name, kScheduleName);
  return out;
}

void DirectPowerLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at steps 0 and 1.");
  v("power", power, "Exponent of the step; -0.5 is inverse square root.");
}

void DirectPowerLrConfig::validate() const {
  check_range("initial_learning_rate", initial_learning_rate, Range::at_least(0));
  check_range("power", power, Range::any());
}

std::vector<IgnoredKey> DirectPowerLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, DirectPowerLrConfig().name, kScheduleName);
  return out;
}

void PowerAndLinearDecayLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at steps 0 and 1 (after offset).");
  v("total_decay_steps", total_decay_steps, "Step (after offset) at which the rate reaches 0.");
  v("power", power, "Exponent of the step; -0.5 is inverse square root.");
  v("linear_decay_fraction", linear_decay_fraction,
    "Final fraction of total_decay_steps over which the rate ramps linearly to 0.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
}

void PowerAndLinearDecayLrConfig::validate() const {
  check_range("initial_learning_rate", initial_learning_rate, Range::at_least(0));
  check_range("total_decay_steps", total_decay_steps, Range::at_least(1));
  check_range("power", power, Range::any());
  check_range("linear_decay_fraction", linear_decay_fraction, Range::at_least(0).at_most(1));
  check_range("offset", offset, Range::at_least(0));
}

std::vector<IgnoredKey> PowerAndLinearDecayLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, PowerAndLinearDecayLrConfig().name, kScheduleName);
  return out;
}

void PowerDecayWithOffsetLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at steps offset + 1.");
  v("power", power, "Exponent of (step - offset); -0.5 is inverse square root.");
  v("offset", offset, "The power decay starts after this step.");
  v("pre_offset_learning_rate", pre_offset_learning_rate,
    "Rate up to and at offset; also caps the decayed rate.");
}

void PowerDecayWithOffsetLrConfig::validate() const {
  check_range("initial_learning_rate", initial_learning_rate, Range::at_least(0));
  check_range("power", power, Range::any());
  check_range("offset", offset, Range::at_least(0));
  check_range("pre_offset_learning_rate", pre_offset_learning_rate, Range::at_least(0));
}

std::vector<IgnoredKey> PowerDecayWithOffsetLrConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, PowerDecayWithOffsetLrConfig().name, kScheduleName);
  return out;
}

void LrConfig::visit(Visitor& v) {
  v("type", type,
    "constant, stepwise, exponential, polynomial, cosine, power, power_linear or "
    "power_with_offset.");
  v("constant", constant, "A constant rate.");
  v("stepwise", stepwise, "Piecewise-constant rates.");
  v("exponential", exponential, "Exponential decay.");
  v("polynomial", polynomial, "Polynomial decay.");
  v("cosine", cosine, "Cosine decay.");
  v("power", power, "lr * step^power.");
  v("power_linear", power_linear, "lr * step^power, then a linear ramp to zero.");
  v("power_with_offset", power_with_offset, "A constant rate, then power decay after offset.");
  visit_registered_choices(v, typeid(LrConfig));
}

void LrConfig::validate() const {
  OneOfConfig::validate();
  // What the chosen schedule cannot do without (null by default, as in
  // Model Garden).
  const auto require = [&](const char* key, bool set) {
    if (!set) refuse(type + "." + key, "must be set for learning_rate.type " + type);
  };
  if (type == "stepwise") {
    require("boundaries", stepwise.boundaries.has_value());
    require("values", stepwise.values.has_value());
  } else if (type == "exponential") {
    require("initial_learning_rate", exponential.initial_learning_rate.has_value());
    require("decay_steps", exponential.decay_steps.has_value());
    require("decay_rate", exponential.decay_rate.has_value());
  } else if (type == "polynomial") {
    require("initial_learning_rate", polynomial.initial_learning_rate.has_value());
    require("decay_steps", polynomial.decay_steps.has_value());
  } else if (type == "cosine") {
    require("initial_learning_rate", cosine.initial_learning_rate.has_value());
    require("decay_steps", cosine.decay_steps.has_value());
  } else if (type == "power") {
    require("initial_learning_rate", power.initial_learning_rate.has_value());
  } else if (type == "power_linear") {
    require("initial_learning_rate", power_linear.initial_learning_rate.has_value());
    require("total_decay_steps", power_linear.total_decay_steps.has_value());
  } else if (type == "power_with_offset") {
    require("initial_learning_rate", power_with_offset.initial_learning_rate.has_value());
  }
}

void LinearWarmupConfig::visit(Visitor& v) {
  v("name", name, "Warmup name.");
  v("warmup_learning_rate", warmup_learning_rate, "Rate at step 0.");
  v("warmup_steps", warmup_steps, "Steps of warmup.");
}

void LinearWarmupConfig::validate() const {
  check_range("warmup_learning_rate", warmup_learning_rate, Range::at_least(0));
  check_range("warmup_steps", warmup_steps, Range::at_least(0));
}

std::vector<IgnoredKey> LinearWarmupConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, LinearWarmupConfig().name, kScheduleName);
  return out;
}

void PolynomialWarmupConfig::visit(Visitor& v) {
  v("name", name, "Warmup name.");
  v("power", power, "Polynomial power of the warmup.");
  v("warmup_steps", warmup_steps, "Steps of warmup.");
}

void PolynomialWarmupConfig::validate() const {
  // (step / warmup_steps)^power: a negative power starts above the target.
  check_range("power", power, Range::at_least(0));
  check_range("warmup_steps", warmup_steps, Range::at_least(0));
}

std::vector<IgnoredKey> PolynomialWarmupConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "name", name, PolynomialWarmupConfig().name, kScheduleName);
  return out;
}

void WarmupConfig::visit(Visitor& v) {
  v("type", type, "linear or polynomial; empty for none.");
  v("linear", linear, "Linear warmup.");
  v("polynomial", polynomial, "Polynomial warmup.");
}

void WarmupConfig::validate() const {
  OneOfConfig::validate();
  if (type == "linear" && !linear.warmup_steps)
    refuse("linear.warmup_steps", "must be set for warmup.type linear");
  if (type == "polynomial" && !polynomial.warmup_steps)
    refuse("polynomial.warmup_steps", "must be set for warmup.type polynomial");
}

void OptimizationConfig::visit(Visitor& v) {
  v("optimizer", optimizer, "The optimizer.");
  v("ema", ema, "Exponential moving average of the weights; null for none.");
  v("learning_rate", learning_rate, "The learning-rate schedule.");
  v("warmup", warmup, "The warmup; type empty for none.");
}

}  // namespace garden::config
