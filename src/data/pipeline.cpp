#include "garden/data/pipeline.h"

#include "garden/base/encoding.h"

#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "garden/base/error.h"
#include "garden/data/record_source.h"

namespace garden::data {

namespace {

// Records are shared and immutable: a snapshot of the shuffle buffer or the
// length buckets copies pointers, not bytes, so the prefetch thread can take
// one after every batch.
// Each carries where it came from, for the map function's error messages.
struct SourcedRecord {
  std::string bytes;
  RecordLocation where;
};
using Record = std::shared_ptr<const SourcedRecord>;

struct Element {
  Record record;
  Batch value;
};

struct Snapshot {
  nlohmann::json source;  // interleave cursors, record-shard counter, cache position
  std::string rng;        // the shuffle buffer's engine
  std::vector<Record> shuffle_buffer;
  bool upstream_done = false;
  std::vector<std::vector<Record>> buckets;  // records waiting in length buckets
  int64_t batches = 0;
};

uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  // splitmix64 of (seed, stream): unrelated engines for each epoch and stage.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

nlohmann::json records_to_json(const std::vector<Record>& records) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : records)
    out.push_back({{"b", base64_encode(r->bytes)},
                   {"f", r->where.file},
                   {"i", r->where.index},
                   {"e", r->where.epoch}});
  return out;
}

std::vector<Record> records_from_json(const nlohmann::json& j) {
  std::vector<Record> out;
  for (const auto& r : j) {
    std::string bytes;
    if (!base64_decode(r.at("b").get<std::string>(), bytes))
      throw Error("input pipeline state: a buffered record is not valid base64");
    // "e" is absent from the states of runs before the epoch was kept.
    out.push_back(std::make_shared<const SourcedRecord>(SourcedRecord{
        std::move(bytes), RecordLocation{r.at("f"), r.at("i").get<int64_t>(),
                                         r.value("e", int64_t{0})}}));
  }
  return out;
}

}  // namespace

// ---- the synchronous pipeline ---------------------------------------------

class InputPipeline::Core {
 public:
  Core(const config::DataConfig& config, LocatedMapFn map_fn, BatchingOptions batching,
       const InputContext& context);

  std::optional<Batch> next_batch();
  Snapshot snapshot() const;
  void restore(const Snapshot& snapshot);
  void reset();
  nlohmann::json to_json(const Snapshot& snapshot) const;
  Snapshot from_json(const nlohmann::json& state);

  std::vector<std::string> files_;
  bool shard_by_record_ = false;
  std::optional<int64_t> prefetch_;

 private:
  struct Slot {
    int64_t file_seq = -1;
    std::string path;
    std::unique_ptr<RecordReader> reader;
  };

  std::optional<std::string> file_for_seq(int64_t seq);
  bool next_interleaved(SourcedRecord& record);
  bool next_sharded(SourcedRecord& record);
  bool next_source(Record& record);
  bool next_shuffled(Record& record);
  std::optional<Element> make_element(Record record) const;
  int64_t example_length(const Batch& example) const;
  std::optional<Batch> next_fixed_batch();
  std::optional<Batch> next_bucket_batch();
  void restore_source(const nlohmann::json& source);

  // configuration
  LocatedMapFn map_fn_;
  BatchingOptions batching_;
  std::string file_type_;
  TFRecordReader::Options tfrecord_options_;
  bool training_ = false;
  bool cache_ = false;
  bool shard_by_file_ = false;
  bool shuffle_files_ = false;
  int64_t num_pipelines_ = 1, pipeline_id_ = 0;
  uint64_t seed_ = 0;
  bool seed_fixed_ = false;
  int64_t files_per_epoch_ = 0;
  int64_t cycle_length_ = 1, block_length_ = 1;
  int64_t shuffle_buffer_size_ = 0;
  int64_t batch_size_ = 1;
  bool drop_remainder_ = true;
  LengthBuckets buckets_spec_;

  // file order of one epoch, computed lazily from (seed, epoch)
  int64_t order_epoch_ = -1;
  std::vector<std::size_t> order_;

  // interleave
  std::vector<Slot> slots_;
  int64_t next_file_seq_ = 0;
  bool input_done_ = false;
  int64_t cycle_index_ = 0, block_index_ = 0;
  int64_t files_since_record_ = 0;
  // sharding by record: records seen before the shard filter
  int64_t records_seen_ = 0;
  // cache
  std::vector<Record> cache_records_;
  bool cache_filled_ = false;
  int64_t cache_pos_ = 0, cache_epoch_ = 0;
  // shuffle buffer
  std::mt19937_64 rng_;
  std::vector<Record> shuffle_buffer_;
  bool upstream_done_ = false;
  // length buckets
  std::vector<std::vector<Element>> buckets_;
  int64_t batches_ = 0;

  Snapshot initial_;
};

InputPipeline::Core::Core(const config::DataConfig& config, LocatedMapFn map_fn,
                          BatchingOptions batching, const InputContext& context)
    : map_fn_(std::move(map_fn)), batching_(std::move(batching)) {
  if (!map_fn_) throw Error("the input pipeline needs a map function");
  files_ = match_files(config.input_path);
  file_type_ = config.file_type;
  tfrecord_options_ = tfrecord_options(config);
  training_ = config.is_training.value_or(false);
  cache_ = config.cache;
  num_pipelines_ = std::max<int64_t>(1, context.num_input_pipelines);
  pipeline_id_ = context.input_pipeline_id;
  if (pipeline_id_ < 0 || pipeline_id_ >= num_pipelines_)
    throw Error("input_pipeline_id " + std::to_string(pipeline_id_) + " is not below " +
                std::to_string(num_pipelines_));
  const auto num_files = static_cast<int64_t>(files_.size());
  // Model Garden: shard files when there are enough of them, otherwise read
  // every file and keep every k-th record.
  if (config.sharding && num_pipelines_ > 1) {
    shard_by_record_ = num_files < num_pipelines_;
    shard_by_file_ = !shard_by_record_;
  }
  seed_fixed_ = config.seed.has_value();
  seed_ = seed_fixed_ ? static_cast<uint64_t>(*config.seed)
                      : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  files_per_epoch_ =
      shard_by_file_ ? (num_files - pipeline_id_ + num_pipelines_ - 1) / num_pipelines_ : num_files;
  // Record sharding reads the files in order, one at a time, like
  // Model Garden's _read_files_then_shard.
  shuffle_files_ = training_ && !shard_by_record_;
  cycle_length_ =
      shard_by_record_ ? 1 : config.cycle_length.value_or(std::min<int64_t>(files_per_epoch_, 8));
  if (cycle_length_ < 1) throw Error("cycle_length must be >= 1");
  block_length_ = std::max<int64_t>(1, config.block_length);
  shuffle_buffer_size_ = training_ ? config.shuffle_buffer_size : 0;
  prefetch_ = config.prefetch_buffer_size;

  const int64_t per_replica = context.per_replica_batch_size(config.global_batch_size);
  if (per_replica < 1) throw Error("global_batch_size must be >= 1");
  batch_size_ = per_replica;
  drop_remainder_ = config.drop_remainder;
  if (batching_.mode == BatchMode::kStatic) {
    // wmt_dataloader: in training the batch size counts tokens, and every
    // batch is full. Evaluation keeps drop_remainder as configured, so a
    // pass can keep every example.
    if (training_) batch_size_ = per_replica / batching_.max_length;
    if (training_) drop_remainder_ = true;
    if (batch_size_ < 1)
      throw Error("global_batch_size " + std::to_string(config.global_batch_size) +
                  " is too small for static batches of max_length " +
                  std::to_string(batching_.max_length));
  }
  if (batching_.mode == BatchMode::kBucketByLength) {
    buckets_spec_ = make_length_buckets(per_replica, batching_.max_length, batching_.min_boundary,
                                        batching_.boundary_scale);
    buckets_.resize(buckets_spec_.max.size());
  }
  slots_.resize(static_cast<std::size_t>(cycle_length_));
  rng_.seed(mix_seed(seed_, 0x5348554646ull));
  initial_ = snapshot();
}

std::optional<std::string> InputPipeline::Core::file_for_seq(int64_t seq) {
  if ((!training_ || cache_) && seq >= files_per_epoch_) return std::nullopt;
  const int64_t epoch = seq / files_per_epoch_;
  if (epoch != order_epoch_) {
    std::vector<std::size_t> all(files_.size());
    std::iota(all.begin(), all.end(), 0);
    if (shuffle_files_) {
      // A new file order each epoch, the same in every pipeline (same seed),
      // so the file shards of one epoch never overlap.
      std::mt19937_64 engine(mix_seed(seed_, 0x46494C45ull + static_cast<uint64_t>(epoch)));
      for (std::size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[engine() % i]);
    }
    order_.clear();
    for (std::size_t p = 0; p < all.size(); ++p)
      if (!shard_by_file_ || static_cast<int64_t>(p) % num_pipelines_ == pipeline_id_)
        order_.push_back(all[p]);
    order_epoch_ = epoch;
  }
  return files_[order_[static_cast<std::size_t>(seq % files_per_epoch_)]];
}

// tf.data's deterministic interleave: a slot whose turn comes and that is
// empty opens the next file; a slot gives block_length records, then the
// turn moves on; an exhausted file frees its slot and the turn moves on.
bool InputPipeline::Core::next_interleaved(SourcedRecord& record) {
  while (true) {
    Slot& slot = slots_[static_cast<std::size_t>(cycle_index_)];
    const auto advance = [&] {
      block_index_ = 0;
      cycle_index_ = (cycle_index_ + 1) % cycle_length_;
    };
    if (slot.reader) {
      if (slot.reader->next(record.bytes)) {
        record.where.file = slot.path;
        record.where.index = slot.reader->position() - 1;
        record.where.epoch = slot.file_seq / files_per_epoch_;
        files_since_record_ = 0;
        if (++block_index_ >= block_length_) advance();
        return true;
      }
      slot.reader.reset();
      slot.file_seq = -1;
      advance();
    } else if (!input_done_) {
      const auto path = file_for_seq(next_file_seq_);
      if (!path) {
        input_done_ = true;
        continue;
      }
      // Repeating files that hold no record would loop forever.
      if (++files_since_record_ > files_per_epoch_ + cycle_length_)
        throw Error("the input files of input_path have no records");
      slot.reader = open_record_reader(*path, file_type_, tfrecord_options_);
      slot.path = *path;
      slot.file_seq = next_file_seq_++;
    } else {
      const bool any_open =
          std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return bool(s.reader); });
      if (!any_open) return false;
      advance();
    }
  }
}

bool InputPipeline::Core::next_sharded(SourcedRecord& record) {
  while (next_interleaved(record)) {
    const bool mine = !shard_by_record_ || records_seen_ % num_pipelines_ == pipeline_id_;
    ++records_seen_;
    if (mine) return true;
  }
  return false;
}

bool InputPipeline::Core::next_source(Record& record) {
  if (!cache_) {
    SourcedRecord next;
    if (!next_sharded(next)) return false;
    record = std::make_shared<const SourcedRecord>(std::move(next));
    return true;
  }
  if (!cache_filled_) {
    SourcedRecord next;
    if (next_sharded(next)) {
      record = std::make_shared<const SourcedRecord>(std::move(next));
      cache_records_.push_back(record);
      return true;
    }
    cache_filled_ = true;
    cache_pos_ = static_cast<int64_t>(cache_records_.size());
    if (cache_records_.empty()) return false;
  }
  if (cache_pos_ >= static_cast<int64_t>(cache_records_.size())) {
    if (!training_) return false;
    cache_pos_ = 0;
    ++cache_epoch_;
  }
  record = cache_records_[static_cast<std::size_t>(cache_pos_++)];
  if (cache_epoch_ > 0) {
    // The cached record, told which pass this is.
    auto again = std::make_shared<SourcedRecord>(*record);
    again->where.epoch = cache_epoch_;
    record = std::move(again);
  }
  return true;
}

// tf.data's shuffle: keep the buffer full, hand out a uniformly chosen
// element. Repeat comes before it, so the buffer mixes across epochs.
bool InputPipeline::Core::next_shuffled(Record& record) {
  if (shuffle_buffer_size_ <= 1) return next_source(record);
  while (!upstream_done_ && static_cast<int64_t>(shuffle_buffer_.size()) < shuffle_buffer_size_) {
    Record incoming;
    if (next_source(incoming))
      shuffle_buffer_.push_back(std::move(incoming));
    else
      upstream_done_ = true;
  }
  if (shuffle_buffer_.empty()) return false;
  const std::size_t pick = rng_() % shuffle_buffer_.size();
  record = std::move(shuffle_buffer_[pick]);
  shuffle_buffer_[pick] = std::move(shuffle_buffer_.back());
  shuffle_buffer_.pop_back();
  return true;
}

int64_t InputPipeline::Core::example_length(const Batch& example) const {
  int64_t length = 0;
  for (const auto& key : batching_.length_keys) {
    const auto it = example.find(key);
    if (it != example.end() && it->second.dim() > 0) length = std::max(length, it->second.size(0));
  }
  return length;
}

std::optional<Element> InputPipeline::Core::make_element(Record record) const {
  Element element{record, map_fn_(record->bytes, record->where)};
  if (batching_.mode != BatchMode::kBucketByLength && batching_.mode != BatchMode::kStatic)
    return element;
  if (example_length(element.value) <= batching_.max_length) return element;
  if (training_) return std::nullopt;  // _filter_max_length
  // _maybe_truncate: keep max_length - 1 tokens and end with EOS.
  for (const auto& key : batching_.length_keys) {
    auto it = element.value.find(key);
    if (it == element.value.end() || it->second.dim() == 0 ||
        it->second.size(0) <= batching_.max_length)
      continue;
    const at::Tensor& t = it->second;
    it->second = torch::cat({t.narrow(0, 0, batching_.max_length - 1),
                             torch::full({1}, batching_.eos_id, t.options())});
  }
  return element;
}

std::optional<Batch> InputPipeline::Core::next_fixed_batch() {
  std::vector<Batch> examples;
  while (static_cast<int64_t>(examples.size()) < batch_size_) {
    Record record;
    if (!next_shuffled(record)) break;
    auto element = make_element(std::move(record));
    if (element) examples.push_back(std::move(element->value));
  }
  if (examples.empty()) return std::nullopt;
  if (drop_remainder_ && static_cast<int64_t>(examples.size()) < batch_size_) return std::nullopt;
  const bool pad = batching_.mode != BatchMode::kFixed;
  const int64_t pad_to = batching_.mode == BatchMode::kStatic ? batching_.max_length : 0;
  return collate(examples, pad, batching_.pad_values, pad_to);
}

// group_by_window: a bucket is emitted when it holds its batch size; at the
// end of the input the rest are emitted, shortest bucket first.
std::optional<Batch> InputPipeline::Core::next_bucket_batch() {
  const auto emit = [&](std::vector<Element>& bucket) {
    std::vector<Batch> examples;
    for (auto& element : bucket) examples.push_back(std::move(element.value));
    bucket.clear();
    return collate(examples, true, batching_.pad_values);
  };
  Record record;
  while (next_shuffled(record)) {
    auto element = make_element(std::move(record));
    if (!element) continue;
    const int64_t b = buckets_spec_.bucket_of(example_length(element->value));
    auto& bucket = buckets_[static_cast<std::size_t>(b)];
    bucket.push_back(std::move(*element));
    if (static_cast<int64_t>(bucket.size()) >=
        buckets_spec_.batch_size[static_cast<std::size_t>(b)])
      return emit(bucket);
  }
  for (auto& bucket : buckets_)
    if (!bucket.empty()) return emit(bucket);
  return std::nullopt;
}

std::optional<Batch> InputPipeline::Core::next_batch() {
  auto batch =
      batching_.mode == BatchMode::kBucketByLength ? next_bucket_batch() : next_fixed_batch();
  if (batch) ++batches_;
  return batch;
}

Snapshot InputPipeline::Core::snapshot() const {
  Snapshot s;
  nlohmann::json slots = nlohmann::json::array();
  for (const auto& slot : slots_) {
    if (slot.reader)
      slots.push_back({{"file", slot.file_seq}, {"reader", slot.reader->state()}});
    else
      slots.push_back(nullptr);
  }
  s.source = {{"next_file", next_file_seq_},
              {"input_done", input_done_},
              {"cycle_index", cycle_index_},
              {"block_index", block_index_},
              {"files_since_record", files_since_record_},
              {"records_seen", records_seen_},
              {"slots", slots},
              {"cache_count", cache_records_.size()},
              {"cache_filled", cache_filled_},
              {"cache_pos", cache_pos_},
              {"cache_epoch", cache_epoch_}};
  std::ostringstream engine;
  engine << rng_;
  s.rng = engine.str();
  s.shuffle_buffer = shuffle_buffer_;
  s.upstream_done = upstream_done_;
  for (const auto& bucket : buckets_) {
    s.buckets.emplace_back();
    for (const auto& element : bucket) s.buckets.back().push_back(element.record);
  }
  s.batches = batches_;
  return s;
}

void InputPipeline::Core::restore_source(const nlohmann::json& source) {
  for (auto& slot : slots_) slot = Slot{};
  next_file_seq_ = 0;
  input_done_ = false;
  cycle_index_ = block_index_ = files_since_record_ = records_seen_ = 0;
  cache_records_.clear();
  cache_filled_ = false;
  cache_pos_ = cache_epoch_ = 0;
  if (cache_) {
    // The cache is rebuilt by reading the first pass again (replay); the
    // readers then stand exactly where they stood.
    const int64_t count = source.at("cache_count");
    const bool filled = source.at("cache_filled");
    Record record;
    while (!cache_filled_ && static_cast<int64_t>(cache_records_.size()) < count)
      if (!next_source(record)) break;
    // A finished first pass also needs the end of input seen.
    if (filled && !cache_filled_) next_source(record);
    if (static_cast<int64_t>(cache_records_.size()) != count || cache_filled_ != filled)
      throw Error("the input files changed since the checkpoint (cached record count differs)");
    cache_filled_ = filled;
    cache_pos_ = source.at("cache_pos");
    cache_epoch_ = source.at("cache_epoch");
    return;
  }
  next_file_seq_ = source.at("next_file");
  input_done_ = source.at("input_done");
  cycle_index_ = source.at("cycle_index");
  block_index_ = source.at("block_index");
  files_since_record_ = source.at("files_since_record");
  records_seen_ = source.at("records_seen");
  const auto& slots = source.at("slots");
  if (slots.size() != slots_.size())
    throw Error("the checkpoint's cycle_length differs from this run's");
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots[i].is_null()) continue;
    slots_[i].file_seq = slots[i].at("file");
    const auto path = file_for_seq(slots_[i].file_seq);
    if (!path) throw Error("the checkpoint names an input file this run does not have");
    slots_[i].reader = open_record_reader(*path, file_type_, tfrecord_options_);
    slots_[i].path = *path;  // records read from here on name their file
    slots_[i].reader->restore(slots[i].at("reader"));
  }
}

void InputPipeline::Core::restore(const Snapshot& s) {
  restore_source(s.source);
  std::istringstream engine(s.rng);
  engine >> rng_;
  shuffle_buffer_ = s.shuffle_buffer;
  upstream_done_ = s.upstream_done;
  for (auto& bucket : buckets_) bucket.clear();
  if (!s.buckets.empty() && s.buckets.size() != buckets_.size())
    throw Error("the checkpoint's length buckets differ from this run's");
  // Buckets hold parsed examples; they are parsed again from their records.
  for (std::size_t b = 0; b < s.buckets.size(); ++b)
    for (const auto& record : s.buckets[b]) {
      auto element = make_element(record);
      if (element) buckets_[b].push_back(std::move(*element));
    }
  batches_ = s.batches;
}

void InputPipeline::Core::reset() {
  // A cached evaluation pass is served from memory again.
  auto cached = std::move(cache_records_);
  const bool filled = cache_filled_;
  restore(initial_);
  if (filled) {
    cache_records_ = std::move(cached);
    cache_filled_ = true;
  }
}

nlohmann::json InputPipeline::Core::to_json(const Snapshot& s) const {
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& bucket : s.buckets) buckets.push_back(records_to_json(bucket));
  return {{"files", files_},
          {"seed", seed_},
          {"input_pipeline_id", pipeline_id_},
          {"num_input_pipelines", num_pipelines_},
          {"source", s.source},
          {"rng", s.rng},
          {"shuffle_buffer", records_to_json(s.shuffle_buffer)},
          {"upstream_done", s.upstream_done},
          {"buckets", buckets},
          {"batches", s.batches}};
}

Snapshot InputPipeline::Core::from_json(const nlohmann::json& state) {
  if (state.at("files").get<std::vector<std::string>>() != files_)
    throw Error("the checkpoint's input files differ from those input_path matches now");
  if (state.at("input_pipeline_id") != pipeline_id_ ||
      state.at("num_input_pipelines") != num_pipelines_)
    throw Error("the checkpoint was written by a different input pipeline shard");
  const uint64_t seed = state.at("seed");
  if (seed_fixed_ && seed != seed_)
    throw Error("the checkpoint's data seed differs from this run's; set the same seed");
  // Without a configured seed the checkpoint's (random) seed is adopted.
  seed_ = seed;
  order_epoch_ = -1;
  Snapshot s;
  s.source = state.at("source");
  s.rng = state.at("rng");
  s.shuffle_buffer = records_from_json(state.at("shuffle_buffer"));
  s.upstream_done = state.at("upstream_done");
  for (const auto& bucket : state.at("buckets")) s.buckets.push_back(records_from_json(bucket));
  s.batches = state.at("batches");
  return s;
}

// ---- prefetch ----------------------------------------------------------------

// One worker thread runs the core ahead of the consumer into a bounded queue.
// Each batch travels with the snapshot taken right after it, so state() is
// the position of what the consumer has received.
class InputPipeline::Prefetcher {
 public:
  Prefetcher(Core& core, std::size_t capacity)
      : core_(core), capacity_(capacity), delivered_(core.snapshot()) {}
  ~Prefetcher() { stop(); }

  std::optional<Batch> next() {
    if (error_) std::rethrow_exception(error_);
    if (finished_) return std::nullopt;
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty(); });
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();
    if (item.error) {
      error_ = item.error;
      std::rethrow_exception(error_);
    }
    delivered_ = std::move(item.after);
    if (!item.batch) finished_ = true;
    return std::move(item.batch);
  }

  // Stops and joins the worker, drops what it produced ahead, and takes the
  // core's current position as delivered (call after restoring the core).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (worker_.joinable()) worker_.join();
    queue_.clear();
    stopping_ = false;
    finished_ = false;
    error_ = nullptr;
  }
  void sync() { delivered_ = core_.snapshot(); }

  const Snapshot& delivered() const { return delivered_; }

 private:
  struct Item {
    std::optional<Batch> batch;
    Snapshot after;
    std::exception_ptr error;
  };

  void run() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || queue_.size() < capacity_; });
        if (stopping_) return;
      }
      Item item;
      try {
        item.batch = core_.next_batch();
        item.after = core_.snapshot();
      } catch (...) {
        item.error = std::current_exception();
      }
      const bool last = item.error || !item.batch;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(item));
      }
      changed_.notify_all();
      if (last) return;
    }
  }

  Core& core_;
  const std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread worker_;
  // consumer side only
  Snapshot delivered_;
  bool finished_ = false;
  std::exception_ptr error_;
};

// ---- InputPipeline ----------------------------------------------------------------

InputPipeline::InputPipeline(const config::DataConfig& config, MapFn map_fn,
                             BatchingOptions batching, const InputContext& context)
    : InputPipeline(
          config,
          LocatedMapFn([fn = std::move(map_fn)](const std::string& record, const RecordLocation&) {
            return fn(record);
          }),
          std::move(batching), context) {}

InputPipeline::InputPipeline(const config::DataConfig& config, LocatedMapFn map_fn,
                             BatchingOptions batching, const InputContext& context)
    : core_(std::make_unique<Core>(config, std::move(map_fn), std::move(batching), context)) {
  // prefetch_buffer_size: unset or AUTOTUNE (-1) -> 2 batches; 0 -> no thread.
  const int64_t prefetch = core_->prefetch_.value_or(-1) < 0 ? 2 : *core_->prefetch_;
  if (prefetch > 0)
    prefetcher_ = std::make_unique<Prefetcher>(*core_, static_cast<std::size_t>(prefetch));
}

InputPipeline::~InputPipeline() = default;

std::optional<Batch> InputPipeline::next() {
  return prefetcher_ ? prefetcher_->next() : core_->next_batch();
}

void InputPipeline::reset() {
  if (prefetcher_) prefetcher_->stop();
  core_->reset();
  if (prefetcher_) prefetcher_->sync();
}

nlohmann::json InputPipeline::state() const {
  return core_->to_json(prefetcher_ ? prefetcher_->delivered() : core_->snapshot());
}

void InputPipeline::restore(const nlohmann::json& state) {
  if (prefetcher_) prefetcher_->stop();
  core_->restore(core_->from_json(state));
  if (prefetcher_) prefetcher_->sync();
}

const std::vector<std::string>& InputPipeline::files() const { return core_->files_; }
bool InputPipeline::shards_by_record() const { return core_->shard_by_record_; }

}  // namespace garden::data
