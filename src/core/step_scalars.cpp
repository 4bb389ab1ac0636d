#include "garden/core/step_scalars.h"

#include <ATen/ATen.h>

#include <map>

#include "garden/base/error.h"

namespace garden {

void ScalarMean::add(const LogValue& value, bool weighted) {
  const auto* average = std::get_if<Average>(&value);
  if (!weighted || !average) {
    plain_total_ += to_double(value);
    ++plain_count_;
    return;
  }
  weighted_ = true;
  if (terms_.empty()) terms_.resize(average->terms.size(), {0.0, 0.0, 0.0});
  if (terms_.size() != average->terms.size())
    throw Error("a loss changed its number of parts between steps");
  for (std::size_t i = 0; i < terms_.size(); ++i) {
    const AverageTerm& term = average->terms[i];
    const double count = to_double(term.count);
    terms_[i][0] += to_double(term.value) * count;
    terms_[i][1] += count;
    terms_[i][2] = term.weight;
  }
}

nlohmann::json ScalarMean::state() const {
  return {{"plain_total", plain_total_}, {"plain_count", plain_count_}, {"terms", terms_},
          {"weighted", weighted_}};
}

void ScalarMean::merge(const nlohmann::json& state) {
  plain_total_ += state.at("plain_total").get<double>();
  plain_count_ += state.at("plain_count").get<int64_t>();
  const auto terms = state.at("terms").get<std::vector<std::array<double, 3>>>();
  if (!terms.empty() && terms_.empty()) terms_.resize(terms.size(), {0.0, 0.0, 0.0});
  if (!terms.empty() && terms.size() != terms_.size())
    throw Error("workers report a loss of different numbers of parts");
  for (std::size_t i = 0; i < terms.size(); ++i) {
    terms_[i][0] += terms[i][0];
    terms_[i][1] += terms[i][1];
    terms_[i][2] = terms[i][2];
  }
  weighted_ = weighted_ || state.at("weighted").get<bool>();
}

double ScalarMean::result() const {
  if (!weighted_) return plain_count_ > 0 ? plain_total_ / static_cast<double>(plain_count_) : 0.0;
  double total = 0.0;
  for (const auto& [sum, count, weight] : terms_) total += weight * (count > 0 ? sum / count : 0.0);
  return total;
}

void PendingStepScalars::keep(const Logs& logs) {
  // The step's tensors are copied into one vector on their device; reading
  // them waits until the loop ends, so the host never waits for a GPU step.
  Step step;
  std::vector<at::Tensor> tensors;
  // The vector lives where the step ran: on the first accelerator a log
  // value is on, else on the CPU.
  at::Device device = at::kCPU;
  const auto consider = [&device](const at::Tensor& t) {
    if (device.is_cpu() && t.defined() && !t.device().is_cpu()) device = t.device();
  };
  for (const auto& [key, value] : logs) {
    if (const auto* tensor = std::get_if<at::Tensor>(&value)) consider(*tensor);
    if (const auto* average = std::get_if<Average>(&value))
      for (const auto& term : average->terms) {
        consider(term.value);
        consider(term.count);
      }
  }
  // The index of `t` in the step's vector; -1 when it was read at once
  // (into `host`: a CPU number beside device ones costs no wait).
  const auto keep = [&](const at::Tensor& t, const std::string& key, double& host) -> int64_t {
    if (!t.defined() || t.numel() != 1)
      throw Error("the training step's '" + key + "' is a tensor of " +
                  std::to_string(t.defined() ? t.numel() : 0) + " elements, not a scalar");
    if (t.device() != device && t.device().is_cpu()) {
      host = t.item<double>();
      return -1;
    }
    tensors.push_back(t.detach().reshape({1}).to(device, at::kDouble));
    return static_cast<int64_t>(tensors.size()) - 1;
  };
  for (const auto& [key, value] : logs) {
    if (!is_scalar(value)) continue;
    Step::Entry entry{key, false, {}};
    if (const auto* number = std::get_if<double>(&value)) {
      entry.terms.push_back({*number, 1.0, 1.0, -1, -1});
    } else if (const auto* tensor = std::get_if<at::Tensor>(&value)) {
      Step::Term term{0.0, 1.0, 1.0, -1, -1};
      term.value_at = keep(*tensor, key, term.value);
      entry.terms.push_back(term);
    } else {
      entry.average = true;
      for (const auto& part : std::get<Average>(value).terms) {
        // A term without a count counts once.
        Step::Term term{0.0, 1.0, part.weight, -1, -1};
        term.value_at = keep(part.value, key, term.value);
        if (part.count.defined()) term.count_at = keep(part.count, key, term.count);
        entry.terms.push_back(term);
      }
    }
    step.entries.push_back(std::move(entry));
  }
  if (!tensors.empty()) step.values = at::cat(tensors);
  steps_.push_back(std::move(step));
}


std::vector<StepScalars> PendingStepScalars::take() {
  // One copy to the host per device for the whole loop.
  std::map<std::string, std::vector<std::size_t>> by_device;
  for (std::size_t i = 0; i < steps_.size(); ++i)
    if (steps_[i].values.defined()) by_device[steps_[i].values.device().str()].push_back(i);
  std::vector<at::Tensor> host(steps_.size());
  for (const auto& [device, steps] : by_device) {
    std::vector<at::Tensor> parts;
    for (const std::size_t i : steps) parts.push_back(steps_[i].values);
    const at::Tensor all = at::cat(parts).cpu().contiguous();
    int64_t at = 0;
    for (const std::size_t i : steps) {
      const int64_t n = steps_[i].values.numel();
      host[i] = all.narrow(0, at, n);
      at += n;
    }
  }
  std::vector<StepScalars> out(steps_.size());
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const double* values = host[i].defined() ? host[i].data_ptr<double>() : nullptr;
    const auto read = [values](double host_value, int64_t index) {
      return index < 0 ? host_value : values[index];
    };
    for (const auto& entry : steps_[i].entries) {
      StepScalar scalar{entry.key, entry.average, {}};
      for (const auto& term : entry.terms)
        scalar.terms.push_back(
            {read(term.value, term.value_at), read(term.count, term.count_at), term.weight});
      out[i].push_back(std::move(scalar));
    }
  }
  steps_.clear();
  return out;
}

}  // namespace garden
