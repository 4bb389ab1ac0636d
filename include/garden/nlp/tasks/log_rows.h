// Host-side rows a fine-tuning task keeps from each validation step (labels
// and predictions, logits as bits) and folds over an evaluation.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "garden/base/types.h"

namespace garden::nlp {

using LogRows = std::vector<std::vector<int64_t>>;

// Floating-point values travel through the rows (and across workers) as
// their bits.
inline int64_t bits_of(double value) {
  int64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline double double_of_bits(int64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline int64_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<int64_t>(bits);
}
inline float float_of_bits(int64_t bits) {
  const auto narrow = static_cast<uint32_t>(bits);
  float value;
  std::memcpy(&value, &narrow, sizeof value);
  return value;
}

// Appends step_logs[key]'s rows to state[key] (made empty when absent);
// does nothing when the step has none.
inline void append_log_rows(Logs& state, const Logs& step_logs, const char* key) {
  const auto it = step_logs.find(key);
  if (it == step_logs.end()) return;
  const auto& rows = std::get<LogRows>(it->second);
  auto slot = state.try_emplace(key, LogRows{}).first;
  auto& all = std::get<LogRows>(slot->second);
  all.insert(all.end(), rows.begin(), rows.end());
}

}  // namespace garden::nlp
