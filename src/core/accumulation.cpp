#include "accumulation.h"

#include <ATen/ATen.h>

#include <string>

#include "garden/base/error.h"

namespace garden {

// Gradient accumulation: the batch's rows in `parts` near-equal slices.
std::vector<Batch> split_rows(const Batch& batch, int64_t parts) {
  int64_t rows = -1;
  std::string first;
  for (const auto& [key, tensor] : batch) {
    if (tensor.dim() == 0)
      throw Error("trainer.gradient_accumulation_steps splits the batch by rows, but its '" + key +
                  "' is a scalar");
    if (rows < 0) {
      rows = tensor.size(0);
      first = key;
    } else if (tensor.size(0) != rows) {
      throw Error("trainer.gradient_accumulation_steps splits the batch by rows, but its '" + key +
                  "' has " + std::to_string(tensor.size(0)) + " rows and '" + first + "' " +
                  std::to_string(rows));
    }
  }
  if (rows < parts)
    throw Error("trainer.gradient_accumulation_steps=" + std::to_string(parts) +
                " needs at least as many rows in each batch, but one has " + std::to_string(rows) +
                "; lower it or raise the batch size");
  std::vector<Batch> out(static_cast<std::size_t>(parts));
  for (const auto& [key, tensor] : batch) {
    const auto slices = at::tensor_split(tensor, parts, 0);
    for (int64_t i = 0; i < parts; ++i) out[static_cast<std::size_t>(i)][key] = slices[static_cast<std::size_t>(i)];
  }
  return out;
}

// One step's logs from its accumulation parts' logs: an Average term by term
// over the parts' counts (the whole batch's mean), anything else the mean.
// Computed where the parts' tensors are: nothing is read to the host.
Logs merge_part_logs(const std::vector<Logs>& parts) {
  const auto as_double = [](const at::Tensor& t) { return t.detach().reshape({}).to(at::kDouble); };
  Logs merged;
  for (const auto& [key, value] : parts.front()) {
    if (!is_scalar(value)) {
      merged[key] = value;
      continue;
    }
    if (const auto* first = std::get_if<Average>(&value)) {
      Average whole;
      for (std::size_t t = 0; t < first->terms.size(); ++t) {
        at::Tensor sum, count;
        for (const auto& logs : parts) {
          const auto* average = std::get_if<Average>(&logs.at(key));
          if (!average || average->terms.size() != first->terms.size())
            throw Error("the accumulation parts of one step logged '" + key + "' differently");
          const auto& term = average->terms[t];
          const at::Tensor c = as_double(term.count);
          const at::Tensor weighted = as_double(term.value) * c;
          sum = sum.defined() ? sum + weighted : weighted;
          count = count.defined() ? count + c : c;
        }
        // A count on the host beside values on a GPU joins them there
        // (queued, not waited for): where() takes one device.
        const at::Tensor on = count.to(sum.device(), at::kDouble, /*non_blocking=*/true);
        const at::Tensor mean = at::where(on > 0, sum / on, at::zeros_like(sum));
        whole.terms.push_back(AverageTerm{mean.to(at::kFloat), count, first->terms[t].weight});
      }
      merged[key] = std::move(whole);
      continue;
    }
    // Numbers add on the host, tensors where they are.
    double host_total = 0.0;
    at::Tensor total;
    for (const auto& logs : parts) {
      const LogValue& part = logs.at(key);
      if (const auto* tensor = std::get_if<at::Tensor>(&part))
        total = total.defined() ? total + as_double(*tensor) : as_double(*tensor);
      else
        host_total += to_double(part);
    }
    const double n = static_cast<double>(parts.size());
    if (total.defined())
      merged[key] = (total + host_total) / n;
    else
      merged[key] = host_total / n;
  }
  return merged;
}

}  // namespace garden
