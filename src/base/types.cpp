#include "garden/base/types.h"

#include <ATen/ATen.h>

#include "garden/base/error.h"

namespace garden {

namespace {
double scalar_value(const at::Tensor& t, const char* what) {
  if (!t.defined() || t.numel() != 1)
    throw Error(std::string(what) + " is a tensor of " +
                std::to_string(t.defined() ? t.numel() : 0) + " elements, not a scalar");
  // item() converts from any dtype and copies from any device itself.
  return t.item<double>();
}
}  // namespace

double Average::result() const {
  double total = 0.0;
  for (const auto& term : terms)
    total += term.weight * scalar_value(term.value, "an average's value");
  return total;
}

bool is_scalar(const LogValue& value) {
  if (std::holds_alternative<double>(value) || std::holds_alternative<Average>(value)) return true;
  if (const auto* t = std::get_if<at::Tensor>(&value)) return t->defined() && t->numel() == 1;
  return false;
}

double to_double(const LogValue& value) {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (const auto* t = std::get_if<at::Tensor>(&value)) return scalar_value(*t, "log value");
  if (const auto* average = std::get_if<Average>(&value)) return average->result();
  throw Error("log value is host-side data, not a number");
}

bool is_host_list(const LogValue& value) {
  return std::holds_alternative<std::vector<std::string>>(value) ||
         std::holds_alternative<IdRows>(value) || std::holds_alternative<ValueRows>(value);
}

namespace {
// Appends `value` to state[key] when it is a List; false when it is not.
template <class List>
bool append_list(Logs& state, const std::string& key, const LogValue& value) {
  const auto* list = std::get_if<List>(&value);
  if (!list) return false;
  auto* all = std::get_if<List>(&state.try_emplace(key, List{}).first->second);
  if (!all) throw Error("the validation log '" + key + "' changed its kind of list between steps");
  all->insert(all->end(), list->begin(), list->end());
  return true;
}
}  // namespace

void append_host_lists(Logs& state, const Logs& step_logs) {
  for (const auto& [key, value] : step_logs)
    append_list<std::vector<std::string>>(state, key, value) ||
        append_list<IdRows>(state, key, value) || append_list<ValueRows>(state, key, value);
}

int64_t InputContext::per_replica_batch_size(int64_t global_batch_size) const {
  if (num_replicas_in_sync < 1 || global_batch_size % num_replicas_in_sync != 0)
    throw Error("global_batch_size " + std::to_string(global_batch_size) +
                " is not divisible by the " + std::to_string(num_replicas_in_sync) + " replicas");
  return global_batch_size / num_replicas_in_sync;
}

}  // namespace garden
