// Gradient accumulation (trainer.gradient_accumulation_steps): a step's
// batch in parts and the parts' logs merged back into the step's.
#pragma once

#include <cstdint>
#include <vector>

#include "garden/core/task.h"

namespace garden {

// The batch's rows in `parts` near-equal slices; errors say which input
// cannot be split.
std::vector<Batch> split_rows(const Batch& batch, int64_t parts);

// One step's logs from its parts' logs: an Average term by term over the
// parts' counts (the whole batch's mean), anything else the mean. Computed
// where the parts' tensors are: nothing is read to the host.
Logs merge_part_logs(const std::vector<Logs>& parts);

}  // namespace garden
