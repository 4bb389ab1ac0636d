// How a worker's input is cut from the data (tf.distribute's input
// context), for data configs with sharding false: every worker reads the
// whole input, builds the same global batches, and keeps its rows of each
// (rank, rank + N, ...), so N workers see exactly the batches one process
// would.
#pragma once

#include <cstdint>

#include "garden/base/dataset.h"

namespace garden::distribute {

// Rows rank, rank + size, ... of every batch of `global`. A training batch
// of fewer rows than workers is an error naming both; in evaluation data a
// worker whose share of a (last, short) batch is empty goes on to the next.
DatasetPtr split_batches(DatasetPtr global, int64_t rank, int64_t size, bool training);

}  // namespace garden::distribute
