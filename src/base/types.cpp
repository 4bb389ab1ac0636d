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

int64_t InputContext::per_replica_batch_size(int64_t global_batch_size) const {
  if (num_replicas_in_sync < 1 || global_batch_size % num_replicas_in_sync != 0)
    throw Error("global_batch_size " + std::to_string(global_batch_size) +
                " is not divisible by the " + std::to_string(num_replicas_in_sync) + " replicas");
  return global_batch_size / num_replicas_in_sync;
}

}  // namespace garden
