// The optimizers Garden registers (optimizer_registry): Keras's and Model
// Garden's SGD, Adam, AdamWeightDecay, LAMB, RMSprop and Adagrad, on the
// Optimizer base of optimizer.cpp.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "garden/base/error.h"
#include "garden/base/torch_features.h"
#include "garden/kernels/adam.h"
#include "garden/optim/optimizer.h"

namespace garden::optim {

namespace {

// Python's re.search over a list: does any pattern occur in `name`?
bool any_matches(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& pattern : patterns)
    if (std::regex_search(name, std::regex(pattern))) return true;
  return false;
}

// Keras SGD: v = momentum * v - lr * g; p += v (nesterov: p += momentum * v - lr * g).
class SGD : public Optimizer {
 public:
  SGD(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c, const config::SGDConfig& cfg)
      : Optimizer(std::move(p), std::move(s), c), cfg_(cfg) {}

 protected:
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    // Legacy Keras time-based decay.
    if (cfg_.decay > 0) lr /= 1.0 + cfg_.decay * static_cast<double>(iterations());
    if (cfg_.momentum == 0.0) {
      param.sub_(grad, lr);
      return;
    }
    at::Tensor& velocity = slot(i, "momentum");
    velocity.mul_(cfg_.momentum).sub_(grad, lr);
    if (cfg_.nesterov)
      param.add_(velocity, cfg_.momentum).sub_(grad, lr);
    else
      param.add_(velocity);
  }

 private:
  config::SGDConfig cfg_;
};

// adam_pass's blocks of a parameter spread over the threads: 64 Ki floats
// (four arrays of 256 KiB, a multiple of every vector width); smaller
// parameters take one thread.
constexpr int64_t kAdamBlock = 65536;

bool adam_pass_applies(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& m,
                       const at::Tensor& v) {
  for (const at::Tensor* t : {&param, &grad, &m, &v})
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat || !t->is_contiguous() ||
        t->numel() != param.numel())
      return false;
  return true;
}

// Keras Adam: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t); p -= lr_t * m / (sqrt(v) + eps).
class Adam : public Optimizer {
 public:
  Adam(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c, double beta_1, double beta_2,
       double epsilon, bool amsgrad)
      : Optimizer(std::move(p), std::move(s), c),
        beta_1_(beta_1),
        beta_2_(beta_2),
        epsilon_(epsilon),
        amsgrad_(amsgrad) {}

 protected:
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    adam_update(i, param, grad, lr, decay(i, lr));
  }

  // CPU float32 parameters take the one-pass kernel, one by one. The others
  // (a GPU's) are updated together, per device and dtype, by LibTorch's
  // multi-tensor ops: a handful of kernel launches for the whole model
  // rather than a handful per parameter. The same operations in the same
  // order as adam_update's, parameter by parameter.
  void update_all(const std::vector<std::size_t>& indices, const std::vector<at::Tensor>& gradients,
                  double lr) override {
    if (capturable()) {
      capturable_update(indices, gradients);
      return;
    }
    std::map<GroupKey, Group> groups;
    for (const std::size_t i : indices) {
      at::Tensor param = parameters()[i].tensor;  // a handle: updated in place
      const at::Tensor& grad = gradients[i];
      at::Tensor& m = slot(i, "m");
      at::Tensor& v = slot(i, "v");
      if (amsgrad_ || adam_pass_applies(param, grad, m, v)) {
        adam_update(i, param, grad, lr, decay(i, lr));
        continue;
      }
      add_to_group(groups, i, grad, lr);
    }
    const double lr_t = corrected_rate(lr);
    for (auto& [key, g] : groups) {
      // p -= decay * p, per decay (AdamWeightDecay's: one for all).
      for (auto& [decay, tensors] : g.decaying) at::_foreach_add_(tensors, tensors, -decay);
      const std::vector<at::Tensor> denominators = moments(g);
      at::_foreach_addcdiv_(g.params, g.m, denominators, -lr_t);
    }
  }

  std::string capture_refusal() const override {
    return amsgrad_ ? "amsgrad's maximum is kept per parameter" : "";
  }

  // Per device and dtype of the parameters: {-bias-corrected rate, rate},
  // filled in place (a kernel each, no copy from the host).
  void write_step_scalars(double lr) override {
    const double lr_t = corrected_rate(lr);
    for (const auto& parameter : parameters()) {
      const at::Tensor& p = parameter.tensor;
      at::Tensor& scalars = step_scalars_[{p.device().str(), static_cast<int>(p.scalar_type())}];
      if (!scalars.defined())
        scalars =
            at::empty({2}, p.options()
                               .dtype(p.scalar_type() == at::kDouble ? at::kDouble : at::kFloat)
                               .requires_grad(false));
    }
    for (auto& [key, scalars] : step_scalars_) {
      scalars.select(0, 0).fill_(-lr_t);
      scalars.select(0, 1).fill_(lr);
    }
  }

  // The update of update_all with the numbers that change from step to step
  // read from step_scalars_: p -= rate * (lr * p) where it decays, then
  // Adam's m, v and p += (m / (sqrt(v) + eps)) * (-lr_t). All parameters
  // take LibTorch's multi-tensor ops (the CPU's too).
  void capturable_update(const std::vector<std::size_t>& indices,
                         const std::vector<at::Tensor>& gradients) {
#if GARDEN_HAS_FOREACH_TENSOR_FACTOR
    std::map<GroupKey, Group> groups;
    for (const std::size_t i : indices) add_to_group(groups, i, gradients[i], 1.0);
    for (auto& [key, g] : groups) {
      const auto found = step_scalars_.find(key);
      if (found == step_scalars_.end())
        throw Error("a capturable optimizer step ran without prepare_step() before it");
      const at::Tensor step_size = found->second.select(0, 0);
      const at::Tensor rate = found->second.select(0, 1);
      for (auto& [decay_rate, tensors] : g.decaying) {
        const std::vector<at::Tensor> scaled = at::_foreach_mul(tensors, rate);
        at::_foreach_add_(tensors, scaled, -decay_rate);
      }
      std::vector<at::Tensor> updates = at::_foreach_div(g.m, moments(g));
      at::_foreach_mul_(updates, step_size);
      at::_foreach_add_(g.params, updates);
    }
#else
    (void)indices;
    (void)gradients;
    throw Error("capturable optimizer steps need LibTorch 2.1 or later");
#endif
  }

  // The parameters one multi-tensor update takes together: those of one
  // device and dtype, and among them the decaying ones by their decay.
  using GroupKey = std::pair<std::string, int>;
  struct Group {
    std::vector<at::Tensor> params, grads, m, v;
    std::map<double, std::vector<at::Tensor>> decaying;
  };
  // Adds parameter i (gradient `grad`, decay at rate `lr`) to its group.
  void add_to_group(std::map<GroupKey, Group>& groups, std::size_t i, const at::Tensor& grad,
                    double lr) {
    const at::Tensor& param = parameters()[i].tensor;
    Group& group = groups[{param.device().str(), static_cast<int>(param.scalar_type())}];
    group.params.push_back(param);
    group.grads.push_back(grad);
    group.m.push_back(slot(i, "m"));
    group.v.push_back(slot(i, "v"));
    if (const double d = decay(i, lr); d > 0) group.decaying[d].push_back(param);
  }
  // Keras's m and v of a group, in place; returns sqrt(v) + epsilon.
  std::vector<at::Tensor> moments(Group& g) const {
    at::_foreach_mul_(g.m, beta_1_);
    at::_foreach_add_(g.m, g.grads, 1.0 - beta_1_);
    at::_foreach_mul_(g.v, beta_2_);
    at::_foreach_addcmul_(g.v, g.grads, g.grads, 1.0 - beta_2_);
    std::vector<at::Tensor> denominators = at::_foreach_sqrt(g.v);
    at::_foreach_add_(denominators, epsilon_);
    return denominators;
  }

  // AdamWeightDecay's lr * rate for parameter i where it decays; 0 else.
  virtual double decay(std::size_t i, double lr) const {
    (void)i;
    (void)lr;
    return 0.0;
  }

  // Keras's bias-corrected rate of this step: lr * sqrt(1 - b2^t) / (1 - b1^t).
  double corrected_rate(double lr) const {
    const double t = static_cast<double>(iterations() + 1);
    return lr * std::sqrt(1.0 - std::pow(beta_2_, t)) / (1.0 - std::pow(beta_1_, t));
  }

  // The update after p -= decay * p where decay > 0 (AdamWeightDecay).
  void adam_update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr,
                   double decay) {
    const double lr_t = corrected_rate(lr);
    at::Tensor& m = slot(i, "m");
    at::Tensor& v = slot(i, "v");
    if (!amsgrad_ && adam_pass_applies(param, grad, m, v)) {
      // In fixed blocks over the threads: each element then takes the same
      // path through the kernel's vector loop and its scalar remainder
      // (which round differently where GCC contracts a multiply-add) with
      // any number of threads, so the bits do not depend on it.
      float* const p = param.data_ptr<float>();
      const float* const g = grad.data_ptr<float>();
      float* const mp = m.data_ptr<float>();
      float* const vp = v.data_ptr<float>();
      const int64_t n = param.numel(), blocks = (n + kAdamBlock - 1) / kAdamBlock;
      at::parallel_for(int64_t{0}, blocks, 1, [&](int64_t first, int64_t last) {
        for (int64_t b = first; b < last; ++b) {
          const int64_t begin = b * kAdamBlock, count = std::min(kAdamBlock, n - begin);
          kernels::adam_pass(p + begin, g + begin, mp + begin, vp + begin, count,
                             static_cast<float>(beta_1_), static_cast<float>(beta_2_),
                             static_cast<float>(-lr_t), static_cast<float>(epsilon_), decay > 0,
                             static_cast<float>(decay));
        }
      });
      // Written through pointers: raise the versions the in-place ops would,
      // so a graph that saved the parameter still refuses to use it.
      for (at::Tensor* t : {&param, &m, &v}) t->unsafeGetTensorImpl()->bump_version();
      return;
    }
    if (decay > 0) param.sub_(param, decay);
    m.mul_(beta_1_).add_(grad, 1.0 - beta_1_);
    v.mul_(beta_2_).addcmul_(grad, grad, 1.0 - beta_2_);
    at::Tensor denominator;
    if (amsgrad_) {
      at::Tensor& v_hat = slot(i, "vhat");
      at::maximum_out(v_hat, v_hat, v);
      denominator = v_hat.sqrt().add_(epsilon_);
    } else {
      denominator = v.sqrt().add_(epsilon_);
    }
    param.addcdiv_(m, denominator, -lr_t);
  }

 private:
  double beta_1_, beta_2_, epsilon_;
  bool amsgrad_;
  std::map<std::pair<std::string, int>, at::Tensor> step_scalars_;
};

// Model Garden's AdamWeightDecay: decoupled decay p -= lr * rate * p on the
// parameters the regexes select, then Adam; gradients clipped by global norm.
class AdamWeightDecay : public Adam {
 public:
  AdamWeightDecay(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c,
                  const config::AdamWeightDecayConfig& cfg)
      : Adam(std::move(p), std::move(s), c, cfg.beta_1, cfg.beta_2, cfg.epsilon, cfg.amsgrad),
        cfg_(cfg) {
    for (const auto& param : parameters()) decays_.push_back(uses_weight_decay(param.name));
  }

  bool uses_weight_decay(const std::string& name) const {
    if (cfg_.weight_decay_rate == 0.0) return false;
    if (cfg_.include_in_weight_decay && any_matches(*cfg_.include_in_weight_decay, name))
      return true;
    if (cfg_.exclude_from_weight_decay && any_matches(*cfg_.exclude_from_weight_decay, name))
      return false;
    return true;
  }

 protected:
  // Model Garden's AdamWeightDecay.apply_gradients clips before handing the
  // gradients to Keras, i.e. before clipvalue/clipnorm/global_clipnorm.
  void before_clipping(std::vector<at::Tensor>& gradients) override {
    if (cfg_.gradient_clip_norm > 0) {
      for (auto& g : gradients)
        if (g.defined()) g = g.clone();
      clip_by_global_norm(gradients, cfg_.gradient_clip_norm);
    }
  }
  double decay(std::size_t i, double lr) const override {
    return decays_[i] ? lr * cfg_.weight_decay_rate : 0.0;
  }

 private:
  config::AdamWeightDecayConfig cfg_;
  std::vector<bool> decays_;
};

// Model Garden's LAMB (official/modeling/optimization/lamb.py):
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,  bias-corrected m_hat, v_hat
//   update = m_hat / (sqrt(v_hat) + eps) + rate * p   (decay unless excluded)
//   ratio = ||p|| / ||update|| when both are > 0, else 1 (1 when excluded
//   from layer adaptation);  p -= lr * ratio * update.
class LAMB : public Optimizer {
 public:
  LAMB(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c, const config::LAMBConfig& cfg)
      : Optimizer(std::move(p), std::move(s), c), cfg_(cfg) {
    // Model Garden: a missing (or empty) exclude_from_layer_adaptation means
    // "the same as exclude_from_weight_decay".
    const auto& layer_exclusions =
        cfg.exclude_from_layer_adaptation && !cfg.exclude_from_layer_adaptation->empty()
            ? cfg.exclude_from_layer_adaptation
            : cfg.exclude_from_weight_decay;
    for (const auto& param : parameters()) {
      decays_.push_back(!(cfg.exclude_from_weight_decay &&
                          any_matches(*cfg.exclude_from_weight_decay, param.name)));
      adapts_.push_back(!(layer_exclusions && any_matches(*layer_exclusions, param.name)));
    }
  }

 protected:
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    const double t = static_cast<double>(iterations() + 1);
    at::Tensor& m = slot(i, "m");
    at::Tensor& v = slot(i, "v");
    m.mul_(cfg_.beta_1).add_(grad, 1.0 - cfg_.beta_1);
    v.mul_(cfg_.beta_2).addcmul_(grad, grad, 1.0 - cfg_.beta_2);
    const at::Tensor m_hat = m / (1.0 - std::pow(cfg_.beta_1, t));
    const at::Tensor v_hat = v / (1.0 - std::pow(cfg_.beta_2, t));
    at::Tensor step_direction = m_hat / (v_hat.sqrt() + cfg_.epsilon);
    if (decays_[i]) step_direction.add_(param, cfg_.weight_decay_rate);
    if (!adapts_[i]) {
      param.sub_(step_direction, lr);
      return;
    }
    // Kept as tensors: no device synchronization for the trust ratio.
    const at::Tensor weight_norm = param.norm();
    const at::Tensor update_norm = step_direction.norm();
    const at::Tensor one = at::ones_like(weight_norm);
    const at::Tensor ratio =
        at::where(weight_norm > 0, at::where(update_norm > 0, weight_norm / update_norm, one), one);
    param.sub_(step_direction.mul_(ratio * lr));
  }

 private:
  config::LAMBConfig cfg_;
  std::vector<bool> decays_, adapts_;
};

// Keras (legacy) RMSprop. Epsilon's place depends on momentum, as in Keras:
//   momentum == 0:  p -= lr * g / (sqrt(denominator) + eps)
//   momentum  > 0:  mom = momentum * mom + lr * g / sqrt(denominator + eps);  p -= mom
// (TensorFlow's ApplyRMSProp kernels), with rms = rho rms + (1 - rho) g^2 and
// denominator = rms, or rms - mg^2 with mg = rho mg + (1 - rho) g when centered.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c,
          const config::RMSPropConfig& cfg)
      : Optimizer(std::move(p), std::move(s), c), cfg_(cfg) {}

 protected:
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    at::Tensor& rms = slot(i, "rms");
    rms.mul_(cfg_.rho).addcmul_(grad, grad, 1.0 - cfg_.rho);
    at::Tensor denominator = rms;
    if (cfg_.centered) {
      at::Tensor& mg = slot(i, "mg");
      mg.mul_(cfg_.rho).add_(grad, 1.0 - cfg_.rho);
      denominator = rms - mg * mg;
    }
    if (cfg_.momentum > 0) {
      at::Tensor& mom = slot(i, "momentum");
      mom.mul_(cfg_.momentum).addcdiv_(grad, (denominator + cfg_.epsilon).sqrt(), lr);
      param.sub_(mom);
    } else {
      param.addcdiv_(grad, denominator.sqrt().add_(cfg_.epsilon), -lr);
    }
  }

 private:
  config::RMSPropConfig cfg_;
};

// Keras (legacy) Adagrad, TensorFlow's ApplyAdagradV2: the accumulator starts
// at initial_accumulator_value; acc += g^2;  p -= lr * g / (sqrt(acc) + eps).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<NamedParameter> p, SchedulePtr s, ClipOptions c,
          const config::AdagradConfig& cfg)
      : Optimizer(std::move(p), std::move(s), c), cfg_(cfg) {}

 protected:
  void update(std::size_t i, at::Tensor& param, const at::Tensor& grad, double lr) override {
    at::Tensor& accumulator = slot(i, "accumulator", cfg_.initial_accumulator_value);
    accumulator.addcmul_(grad, grad);
    param.addcdiv_(grad, accumulator.sqrt().add_(cfg_.epsilon), -lr);
  }

 private:
  config::AdagradConfig cfg_;
};

}  // namespace

config::Registry<OptimizerFactory>& optimizer_registry() {
  static config::Registry<OptimizerFactory>* registry = [] {
    auto* r = new config::Registry<OptimizerFactory>("optimizer");
    // Garden's own: their config subsections are OptimizerConfig's members.
    r->add("sgd",
           [](const config::Config& c, std::vector<NamedParameter> p, SchedulePtr s,
              ClipOptions clip) -> std::unique_ptr<Optimizer> {
             return std::make_unique<SGD>(std::move(p), std::move(s), clip,
                                          static_cast<const config::SGDConfig&>(c));
           });
    r->add("adam",
           [](const config::Config& c, std::vector<NamedParameter> p, SchedulePtr s,
              ClipOptions clip) -> std::unique_ptr<Optimizer> {
             const auto& adam = static_cast<const config::AdamConfig&>(c);
             return std::make_unique<Adam>(std::move(p), std::move(s), clip, adam.beta_1,
                                           adam.beta_2, adam.epsilon, adam.amsgrad);
           });
    r->add("adamw",
           [](const config::Config& c, std::vector<NamedParameter> p, SchedulePtr s,
              ClipOptions clip) -> std::unique_ptr<Optimizer> {
             return std::make_unique<AdamWeightDecay>(
                 std::move(p), std::move(s), clip,
                 static_cast<const config::AdamWeightDecayConfig&>(c));
           });
    r->add("lamb",
           [](const config::Config& c, std::vector<NamedParameter> p, SchedulePtr s,
              ClipOptions clip) -> std::unique_ptr<Optimizer> {
             return std::make_unique<LAMB>(std::move(p), std::move(s), clip,
                                           static_cast<const config::LAMBConfig&>(c));
           });
    r->add("rmsprop",
           [](const config::Config& c, std::vector<NamedParameter> p, SchedulePtr s,
              ClipOptions clip) -> std::unique_ptr<Optimizer> {
             return std::make_unique<RMSprop>(std::move(p), std::move(s), clip,
                                              static_cast<const config::RMSPropConfig&>(c));
           });
    r->add("adagrad",
           [](const config::Config& c, std::vector<NamedParameter> p, SchedulePtr s,
              ClipOptions clip) -> std::unique_ptr<Optimizer> {
             return std::make_unique<Adagrad>(std::move(p), std::move(s), clip,
                                              static_cast<const config::AdagradConfig&>(c));
           });
    return r;
  }();
  return *registry;
}

}  // namespace garden::optim
