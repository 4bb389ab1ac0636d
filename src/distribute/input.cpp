#include "garden/distribute/input.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"

namespace garden::distribute {

namespace {

class SplitBatches : public Dataset {
 public:
  SplitBatches(DatasetPtr global, int64_t rank, int64_t size, bool training)
      : global_(std::move(global)), rank_(rank), size_(size), training_(training) {}

  std::optional<Batch> next() override {
    auto batch = global_->next();
    if (!batch || batch->empty()) return batch;
    const int64_t rows = batch->begin()->second.dim() > 0 ? batch->begin()->second.size(0) : 0;
    if (!training_ && rows <= rank_) return next();
    if (training_ && rows < size_)
      throw Error("a global batch of " + std::to_string(rows) + " rows cannot be split over " +
                  std::to_string(size_) +
                  " workers (sharding: false); use a larger global_batch_size");
    const at::Tensor mine = torch::arange(rank_, rows, size_, torch::kLong);
    Batch out;
    for (const auto& [key, tensor] : *batch) {
      if (tensor.dim() == 0 || tensor.size(0) != rows)
        throw Error("batch feature '" + key + "' does not have the batch's " +
                    std::to_string(rows) + " rows, so it cannot be split over workers");
      out[key] = tensor.index_select(0, mine.to(tensor.device()));
    }
    return out;
  }
  void reset() override { global_->reset(); }
  nlohmann::json state() const override { return global_->state(); }
  void restore(const nlohmann::json& state) override { global_->restore(state); }

 private:
  DatasetPtr global_;
  int64_t rank_, size_;
  bool training_;
};

}  // namespace

DatasetPtr split_batches(DatasetPtr global, int64_t rank, int64_t size, bool training) {
  if (size <= 1) return global;
  return std::make_shared<SplitBatches>(std::move(global), rank, size, training);
}

}  // namespace garden::distribute
