#include "garden/tabular/table_dataset.h"

#include <torch/torch.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"

namespace garden::tabular {

TableDataset::TableDataset(at::Tensor features, at::Tensor labels, int64_t batch_size,
                           bool training, bool drop_remainder, uint64_t seed)
    : features_(std::move(features)),
      labels_(std::move(labels)),
      batch_size_(batch_size),
      training_(training),
      drop_remainder_(drop_remainder),
      seed_(seed) {
  if (batch_size_ < 1) throw Error("global_batch_size must be >= 1");
  start_epoch();
}

void TableDataset::start_epoch() {
  const int64_t n = features_.size(0);
  if (!training_) {
    order_ = torch::arange(n, torch::kLong);
    return;
  }
  // Each epoch's order depends only on (seed, epoch): a restored position
  // sees exactly the rows an uninterrupted run would.
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  std::mt19937_64 engine(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch_));
  for (int64_t i = n - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(pick(engine))]);
  }
  order_ = torch::tensor(order, torch::kLong);
}

std::optional<Batch> TableDataset::next() {
  const int64_t n = features_.size(0);
  if (n == 0) return std::nullopt;
  int64_t remaining = n - position_;
  if (remaining <= 0 || (drop_remainder_ && remaining < batch_size_)) {
    if (!training_) return std::nullopt;
    ++epoch_;
    position_ = 0;
    start_epoch();
    remaining = n;
    if (drop_remainder_ && remaining < batch_size_)
      throw Error("the training data has " + std::to_string(n) +
                  " rows, fewer than global_batch_size " + std::to_string(batch_size_) +
                  " with drop_remainder: true");
  }
  const int64_t size = std::min(batch_size_, remaining);
  const at::Tensor index = order_.narrow(0, position_, size);
  position_ += size;
  return Batch{{"features", features_.index_select(0, index)},
               {"label", labels_.index_select(0, index)}};
}

void TableDataset::reset() {
  epoch_ = 0;
  position_ = 0;
  start_epoch();
}

nlohmann::json TableDataset::state() const {
  return {{"epoch", epoch_}, {"position", position_}, {"seed", seed_}};
}

void TableDataset::restore(const nlohmann::json& state) {
  if (state.value("seed", seed_) != seed_)
    throw Error(
        "the checkpoint's data seed differs from this run's; set the same task.*_data.seed");
  epoch_ = state.at("epoch");
  position_ = state.at("position");
  start_epoch();
}

}  // namespace garden::tabular
