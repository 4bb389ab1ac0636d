#include "garden/core/config/optimization.h"

namespace garden::config {

void BaseOptimizerConfig::visit(Visitor& v) {
  v("clipnorm", clipnorm, "Clip each gradient to this L2 norm.");
  v("clipvalue", clipvalue, "Clip each gradient element to [-clipvalue, clipvalue].");
  v("global_clipnorm", global_clipnorm, "Clip all gradients together to this global L2 norm.");
}

void SGDConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("decay", decay, "Legacy Keras time-based decay.");
  v("nesterov", nesterov, "Use Nesterov momentum.");
  v("momentum", momentum, "Momentum factor.");
}

void AdamConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("beta_1", beta_1, "Decay of the first-moment estimate.");
  v("beta_2", beta_2, "Decay of the second-moment estimate.");
  v("epsilon", epsilon, "Added to the denominator (Keras placement).");
  v("amsgrad", amsgrad, "Use the AMSGrad variant.");
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

void RMSPropConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("rho", rho, "Decay of the mean-square estimate.");
  v("momentum", momentum, "Momentum factor; 0 disables.");
  v("epsilon", epsilon,
    "Numerical stability (Keras: outside the sqrt without momentum, inside with it).");
  v("centered", centered, "Normalize by the variance estimate instead of the mean square.");
}

void AdagradConfig::visit(Visitor& v) {
  v("name", name, "Optimizer name.");
  BaseOptimizerConfig::visit(v);
  v("initial_accumulator_value", initial_accumulator_value,
    "Starting value of the squared-gradient accumulators.");
  v("epsilon", epsilon, "Added to sqrt of the accumulator.");
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
  if (!(average_decay >= 0.0 && average_decay <= 1.0))
    throw ConfigError("average_decay must be in [0, 1], got " + std::to_string(average_decay));
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

void StepwiseLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("boundaries", boundaries, "Steps at which the rate changes.");
  v("values", values, "Rates before, between and after the boundaries.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
}

void StepwiseLrConfig::validate() const {
  const std::size_t nb = boundaries ? boundaries->size() : 0;
  const std::size_t nv = values ? values->size() : 0;
  if ((nb || nv) && nv != nb + 1)
    throw ConfigError("values must have one more entry than boundaries (" + std::to_string(nb) +
                      " boundaries, " + std::to_string(nv) + " values)");
}

void ExponentialLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at step 0.");
  v("decay_steps", decay_steps, "Steps per decay period.");
  v("decay_rate", decay_rate, "Factor applied per period.");
  v("staircase", staircase, "Decay in whole periods.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
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

void CosineLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at step 0.");
  v("decay_steps", decay_steps, "Steps of the cosine decay.");
  v("alpha", alpha, "Final rate as a fraction of the initial rate.");
  v("offset", offset, "Step subtracted before evaluating the schedule.");
}

void DirectPowerLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at steps 0 and 1.");
  v("power", power, "Exponent of the step; -0.5 is inverse square root.");
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

void PowerDecayWithOffsetLrConfig::visit(Visitor& v) {
  v("name", name, "Schedule name.");
  v("initial_learning_rate", initial_learning_rate, "Rate at steps offset + 1.");
  v("power", power, "Exponent of (step - offset); -0.5 is inverse square root.");
  v("offset", offset, "The power decay starts after this step.");
  v("pre_offset_learning_rate", pre_offset_learning_rate,
    "Rate up to and at offset; also caps the decayed rate.");
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

void LinearWarmupConfig::visit(Visitor& v) {
  v("name", name, "Warmup name.");
  v("warmup_learning_rate", warmup_learning_rate, "Rate at step 0.");
  v("warmup_steps", warmup_steps, "Steps of warmup.");
}

void PolynomialWarmupConfig::visit(Visitor& v) {
  v("name", name, "Warmup name.");
  v("power", power, "Polynomial power of the warmup.");
  v("warmup_steps", warmup_steps, "Steps of warmup.");
}

void WarmupConfig::visit(Visitor& v) {
  v("type", type, "linear or polynomial; empty for none.");
  v("linear", linear, "Linear warmup.");
  v("polynomial", polynomial, "Polynomial warmup.");
}

void OptimizationConfig::visit(Visitor& v) {
  v("optimizer", optimizer, "The optimizer.");
  v("ema", ema, "Exponential moving average of the weights; null for none.");
  v("learning_rate", learning_rate, "The learning-rate schedule.");
  v("warmup", warmup, "The warmup; type empty for none.");
}

}  // namespace garden::config
