// Model Garden's InputReader (official/core/input_reader.py) in C++: files ->
// shard -> shuffle files -> interleave -> cache -> repeat -> shuffle records ->
// map -> batch -> prefetch, with a state() that resumes exactly.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "garden/base/dataset.h"
#include "garden/base/types.h"
#include "garden/config/definitions.h"
#include "garden/data/batching.h"
#include "garden/data/parse_spec.h"

namespace garden::data {

// Turns one record into one example (named tensors). It must be a pure
// function of the record: restore() re-runs it on buffered records.
using MapFn = std::function<Batch(const std::string& record)>;
// The same, told where the record came from (its file and its index in that
// file), so that errors can name them: pass `where` to data::parse().
using LocatedMapFn = std::function<Batch(const std::string& record, const RecordLocation& where)>;

class InputPipeline : public Dataset {
 public:
  // Throws garden::Error for a bad input_path, file_type or batch size.
  InputPipeline(const config::DataConfig& config, MapFn map_fn, BatchingOptions batching = {},
                const InputContext& context = {});
  InputPipeline(const config::DataConfig& config, LocatedMapFn map_fn,
                BatchingOptions batching = {}, const InputContext& context = {});
  ~InputPipeline() override;  // stops and joins the prefetch thread

  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // The next batch; nullopt at the end of an evaluation pass (training never
  // ends). An error in the prefetch thread is rethrown here as it was thrown.
  std::optional<Batch> next() override;
  void reset() override;
  // The position after the last batch next() returned (not what the prefetch
  // thread has produced ahead).
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;

  // Every file input_path matched (sorted), and whether this pipeline shards
  // by record (fewer files than pipelines) rather than by file.
  const std::vector<std::string>& files() const;
  bool shards_by_record() const;

 private:
  class Core;
  class Prefetcher;
  std::unique_ptr<Core> core_;
  std::unique_ptr<Prefetcher> prefetcher_;
};

}  // namespace garden::data
