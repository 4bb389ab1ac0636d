// Host-side rows a fine-tuning task keeps from each validation step (labels
// and predictions, logits as bits) and folds over an evaluation.
#pragma once

#include <cstdint>
#include <vector>

#include "garden/base/types.h"

namespace garden::nlp {

using LogRows = std::vector<std::vector<int64_t>>;

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
