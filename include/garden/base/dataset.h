// A dataset is an iterator over batches that can say where it is and be put
// back there, so a checkpoint resumes the data exactly.
#pragma once

#include <memory>
#include <optional>

#include <nlohmann/json_fwd.hpp>

#include "garden/base/types.h"

namespace garden {

class Dataset {
 public:
  virtual ~Dataset() = default;
  // The next batch, or nullopt when a finite dataset has ended.
  virtual std::optional<Batch> next() = 0;
  // Starts over from the beginning (a new pass over validation data).
  virtual void reset() = 0;
  // Where the iterator is: enough to continue exactly after restore().
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
};

using DatasetPtr = std::shared_ptr<Dataset>;

}  // namespace garden
