// An in-memory table of features and labels served as a Dataset.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "garden/base/dataset.h"
#include "garden/base/types.h"

namespace garden::tabular {

// An in-memory table served in batches: a seeded full shuffle per epoch and
// repetition when training, one ordered pass otherwise.
class TableDataset : public Dataset {
 public:
  TableDataset(at::Tensor features, at::Tensor labels, int64_t batch_size, bool training,
               bool drop_remainder, uint64_t seed);
  std::optional<Batch> next() override;
  void reset() override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  int64_t size() const { return features_.size(0); }

 private:
  void start_epoch();

  at::Tensor features_, labels_;
  int64_t batch_size_;
  bool training_;
  bool drop_remainder_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  at::Tensor order_;
};

}  // namespace garden::tabular
