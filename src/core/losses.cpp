#include "garden/core/losses.h"

#include <ATen/ATen.h>

#include "garden/base/error.h"

namespace garden {

namespace {
constexpr const char* kTotalName = "loss";

at::Tensor scalar_count(const at::Tensor& count, const at::Tensor& like, const std::string& name) {
  if (!count.defined()) return at::ones({}, like.options().dtype(at::kFloat).requires_grad(false));
  if (count.numel() != 1)
    throw Error("loss '" + name + "': its count must be a scalar, got a tensor of " +
                std::to_string(count.numel()) + " elements");
  return count.detach().reshape({}).to(at::kFloat);
}
}  // namespace

Losses::Losses(at::Tensor mean, at::Tensor count) {
  add(kTotalName, std::move(mean), std::move(count));
}

void Losses::add(const std::string& name, at::Tensor mean, at::Tensor count, double weight) {
  if (name.empty()) throw Error("a loss part needs a name");
  if (!mean.defined() || mean.numel() != 1)
    throw Error("loss '" + name + "' must be a scalar tensor");
  for (const auto& part : parts_) {
    if (part.name == name) throw Error("loss '" + name + "' is added twice");
    if (part.name == kTotalName)
      throw Error("loss 'loss' names the whole loss; a loss of several parts names each part");
  }
  if (name == kTotalName && !parts_.empty())
    throw Error("loss 'loss' names the whole loss; a loss of several parts names each part");
  at::Tensor c = scalar_count(count, mean, name);
  parts_.push_back({name, mean.reshape({}), std::move(c), weight});
}

void Losses::add_aux(const at::Tensor& aux_losses) {
  if (aux_losses.defined()) add("aux_loss", aux_losses.sum());
}

at::Tensor Losses::total() const {
  if (parts_.empty()) throw Error("the task's build_losses returned no loss");
  at::Tensor total;
  for (const auto& part : parts_) {
    at::Tensor term = part.mean.to(at::kFloat);
    if (part.weight != 1.0) term = term * part.weight;
    total = total.defined() ? total + term : term;
  }
  return total;
}

at::Tensor Losses::total_for(const std::vector<at::Tensor>& global_counts) const {
  if (global_counts.size() != parts_.size())
    throw Error("total_for: " + std::to_string(global_counts.size()) + " counts for " +
                std::to_string(parts_.size()) + " loss parts");
  at::Tensor total;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const auto& part = parts_[i];
    at::Tensor term = part.mean.to(at::kFloat) * (part.count / global_counts[i].to(at::kFloat));
    if (part.weight != 1.0) term = term * part.weight;
    total = total.defined() ? total + term : term;
  }
  return total;
}

Logs Losses::logs() const {
  Logs logs;
  Average whole;
  for (const auto& part : parts_) {
    AverageTerm term{part.mean.detach().to(at::kFloat), part.count, part.weight};
    whole.terms.push_back(term);
    if (part.name != kTotalName)
      logs[part.name] = Average{{AverageTerm{term.value, term.count, 1.0}}};
  }
  logs[kTotalName] = std::move(whole);
  return logs;
}

}  // namespace garden
