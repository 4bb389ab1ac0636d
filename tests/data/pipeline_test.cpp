// Tests of the input pipeline: file matching, sharding, order, shuffling,
// interleave, batching, prefetch errors and exact resume. Expected orders are
// worked out by hand from tf.data's documented semantics.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/data/batching.h"
#include "garden/data/pipeline.h"
#include "garden/data/record_source.h"
#include "garden/data/tfrecord.h"

namespace {

namespace fs = std::filesystem;
using garden::Batch;
using garden::InputContext;
using garden::config::DataConfig;
using garden::data::BatchingOptions;
using garden::data::BatchMode;
using garden::data::InputPipeline;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("garden_pipeline_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Writes one TFRecord file per entry; records are decimal strings.
std::string write_files(const fs::path& dir, const std::vector<std::vector<int>>& files) {
  for (std::size_t f = 0; f < files.size(); ++f) {
    garden::data::TFRecordWriter writer(
        (dir / ("part-" + std::to_string(f) + ".tfrecord")).string());
    for (int value : files[f]) writer.write(std::to_string(value));
    writer.close();
  }
  return (dir / "part-*.tfrecord").string();
}

// Files f = 0..n-1 holding ids f*100 + r for r < sizes[f].
std::vector<std::vector<int>> numbered(const std::vector<int>& sizes) {
  std::vector<std::vector<int>> files;
  for (std::size_t f = 0; f < sizes.size(); ++f) {
    files.emplace_back();
    for (int r = 0; r < sizes[f]; ++r) files.back().push_back(static_cast<int>(f) * 100 + r);
  }
  return files;
}

Batch id_example(const std::string& record) {
  return {{"id", torch::tensor(static_cast<int64_t>(std::stoll(record)), torch::kLong)}};
}

DataConfig data_config(const std::string& path, bool training, int64_t batch = 1) {
  DataConfig config;
  config.input_path = path;
  config.is_training = training;
  config.global_batch_size = batch;
  config.seed = 7;
  config.prefetch_buffer_size = 0;
  return config;
}

std::vector<int64_t> take_ids(InputPipeline& pipeline, int64_t max_batches = 1 << 20) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < max_batches; ++i) {
    auto batch = pipeline.next();
    if (!batch) break;
    const at::Tensor id = batch->at("id").reshape({-1});
    for (int64_t j = 0; j < id.size(0); ++j) ids.push_back(id[j].item<int64_t>());
  }
  return ids;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(PipelineFiles, GlobIsSortedAndAMissingPatternIsNamed) {
  const auto dir = fresh_dir("glob");
  write_files(dir, numbered({1, 1, 1}));
  const auto files = garden::data::match_files((dir / "part-2.tfrecord").string() + ", " +
                                               (dir / "part-*.tfrecord").string());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_TRUE(std::is_sorted(files.begin(), files.end()));
  const std::string missing = (dir / "nothing-*.tfrecord").string();
  try {
    garden::data::match_files((dir / "part-*.tfrecord").string() + "," + missing);
    FAIL() << "no error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + missing + "'"), std::string::npos) << e.what();
  }
}

TEST(PipelineSharding, ByFileCoversEveryRecordOnce) {
  const auto dir = fresh_dir("shard_file");
  const auto files = numbered({3, 4, 2, 5, 1});
  const auto path = write_files(dir, files);
  std::vector<int64_t> all;
  for (int64_t id = 0; id < 2; ++id) {
    InputContext context{2, id, 1};
    InputPipeline pipeline(data_config(path, false), id_example, {}, context);
    EXPECT_FALSE(pipeline.shards_by_record());
    const auto ids = take_ids(pipeline);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  std::vector<int64_t> expected;
  for (const auto& f : files) expected.insert(expected.end(), f.begin(), f.end());
  EXPECT_EQ(sorted(all), sorted(expected));
}

TEST(PipelineSharding, ByRecordWhenFewerFilesThanPipelines) {
  const auto dir = fresh_dir("shard_record");
  const auto path = write_files(dir, numbered({5, 6}));
  std::vector<int64_t> all;
  for (int64_t id = 0; id < 3; ++id) {
    InputPipeline pipeline(data_config(path, false), id_example, {}, InputContext{3, id, 1});
    EXPECT_TRUE(pipeline.shards_by_record());
    const auto ids = take_ids(pipeline);
    // every third record of the files read in order
    const std::vector<int64_t> order = {0, 1, 2, 3, 4, 100, 101, 102, 103, 104, 105};
    for (std::size_t i = 0; i < ids.size(); ++i)
      EXPECT_EQ(ids[i], order[static_cast<std::size_t>(id) + 3 * i]);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(sorted(all), (std::vector<int64_t>{0, 1, 2, 3, 4, 100, 101, 102, 103, 104, 105}));
}

TEST(PipelineOrder, EvaluationIsOneOrderedPassAndResetRepeatsIt) {
  const auto dir = fresh_dir("eval");
  const auto path = write_files(dir, numbered({2, 3, 1}));
  auto config = data_config(path, false, 2);
  config.cycle_length = 1;
  config.drop_remainder = false;
  InputPipeline pipeline(config, id_example);
  const std::vector<int64_t> expected = {0, 1, 100, 101, 102, 200};
  EXPECT_EQ(take_ids(pipeline), expected);
  EXPECT_FALSE(pipeline.next().has_value());
  pipeline.reset();
  EXPECT_EQ(take_ids(pipeline), expected);
}

TEST(PipelineOrder, InterleaveMatchesHandComputedOrder) {
  // cycle 2, block 2 over a(4) b(2) c(3):
  // slot0 opens a: a0 a1 | slot1 opens b: b0 b1 | slot0: a2 a3 | slot1: b ends
  // | slot0: a ends | slot1 opens c: c0 c1 | slot0: no input left | slot1: c2
  const auto dir = fresh_dir("interleave");
  const auto path = write_files(dir, numbered({4, 2, 3}));
  auto config = data_config(path, false);
  config.cycle_length = 2;
  config.block_length = 2;
  InputPipeline pipeline(config, id_example);
  EXPECT_EQ(take_ids(pipeline), (std::vector<int64_t>{0, 1, 100, 101, 2, 3, 200, 201, 202}));
}

TEST(PipelineOrder, TrainingRepeatsWithANewFileOrderEachEpoch) {
  const auto dir = fresh_dir("epochs");
  const auto path = write_files(dir, numbered({2, 2, 2, 2}));
  auto config = data_config(path, true);
  config.cycle_length = 1;
  config.shuffle_buffer_size = 1;  // file order only
  InputPipeline pipeline(config, id_example);
  const auto ids = take_ids(pipeline, 8 * 6);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 6; ++e) {
    epochs.emplace_back(ids.begin() + e * 8, ids.begin() + (e + 1) * 8);
    EXPECT_EQ(sorted(epochs.back()), (std::vector<int64_t>{0, 1, 100, 101, 200, 201, 300, 301}));
  }
  EXPECT_NE(std::count(epochs.begin(), epochs.end(), epochs[0]), 6) << "never reshuffled";
}

std::string decode_base64(const std::string& in) {
  const std::string table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int bits = 0;
  uint32_t v = 0;
  for (char c : in) {
    if (c == '=') break;
    v = (v << 6) | static_cast<uint32_t>(table.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xFF);
    }
  }
  return out;
}

TEST(PipelineShuffle, BufferIsAPermutationAndSeedDetermined) {
  const auto dir = fresh_dir("shuffle");
  const auto path = write_files(dir, numbered({10}));
  auto config = data_config(path, true);
  config.shuffle_buffer_size = 4;
  InputPipeline pipeline(config, id_example);
  const auto ids = take_ids(pipeline, 30);
  // What left the buffer plus what is in it is exactly what entered it: three
  // epochs of 0..9 and, as the buffer is refilled before each pick and holds
  // 3 after it, the first three records of the fourth.
  std::vector<int64_t> seen = ids;
  const auto state = pipeline.state();
  for (const auto& record : state.at("shuffle_buffer"))
    seen.push_back(std::stoll(decode_base64(record.at("b").get<std::string>())));
  std::vector<int64_t> entered;
  for (int e = 0; e < 3; ++e)
    for (int r = 0; r < 10; ++r) entered.push_back(r);
  for (int r = 0; r < 3; ++r) entered.push_back(r);
  EXPECT_EQ(sorted(seen), sorted(entered));
  std::vector<int64_t> in_order;
  for (int e = 0; e < 3; ++e)
    for (int r = 0; r < 10; ++r) in_order.push_back(r);
  EXPECT_NE(ids, in_order);

  InputPipeline same(config, id_example);
  EXPECT_EQ(take_ids(same, 30), ids);
  config.seed = 8;
  InputPipeline other(config, id_example);
  EXPECT_NE(take_ids(other, 30), ids);
}

TEST(PipelineBatching, FixedBatchesHonourDropRemainder) {
  const auto dir = fresh_dir("fixed");
  const auto path = write_files(dir, numbered({10}));
  auto config = data_config(path, false, 4);
  InputPipeline dropping(config, id_example);
  EXPECT_EQ(take_ids(dropping), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  config.drop_remainder = false;
  InputPipeline keeping(config, id_example);
  std::vector<int64_t> sizes;
  while (auto batch = keeping.next()) sizes.push_back(batch->at("id").size(0));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  // The batch is per replica.
  InputPipeline replicas(data_config(path, false, 4), id_example, {}, InputContext{1, 0, 2});
  EXPECT_EQ(replicas.next()->at("id").size(0), 2);
}

// "inputs" of length id % 100 (filled with id), "targets" one shorter.
Batch sequence_example(const std::string& record) {
  const int64_t id = std::stoll(record);
  const int64_t length = id % 100;
  return {{"inputs", torch::full({length}, id, torch::kLong)},
          {"targets", torch::arange(std::max<int64_t>(length - 1, 0), torch::kLong)},
          {"id", torch::tensor(id, torch::kLong)}};
}

TEST(PipelineBatching, PaddedBatchesPadToTheLongest) {
  const auto dir = fresh_dir("padded");
  const auto path = write_files(dir, {{3, 1, 2, 5, 4}});
  auto config = data_config(path, false, 2);
  BatchingOptions batching;
  batching.mode = BatchMode::kPadded;
  batching.pad_values = {{"inputs", -1}};
  InputPipeline pipeline(config, sequence_example, batching);
  const auto first = *pipeline.next();
  EXPECT_TRUE(torch::equal(first.at("inputs"),
                           torch::tensor({3, 3, 3, 1, -1, -1}, torch::kLong).reshape({2, 3})));
  EXPECT_TRUE(
      torch::equal(first.at("targets"), torch::tensor({0, 1, 0, 0}, torch::kLong).reshape({2, 2})));
  EXPECT_EQ(pipeline.next()->at("inputs").sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_FALSE(pipeline.next().has_value());  // drop_remainder drops the 5th
}

TEST(PipelineBatching, BucketBoundariesAndBatchSizesMatchWmtDataloader) {
  // x = 8, then max(x + 1, int(x * 1.1)) while x < 64, worked out by hand.
  const std::vector<int64_t> boundaries = {8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                           22, 24, 26, 28, 30, 33, 36, 39, 42, 46, 50, 55, 60};
  const auto buckets = garden::data::make_length_buckets(4096, 64);
  std::vector<int64_t> expected_min = {0};
  expected_min.insert(expected_min.end(), boundaries.begin(), boundaries.end());
  std::vector<int64_t> expected_max = boundaries;
  expected_max.push_back(65);
  EXPECT_EQ(buckets.min, expected_min);
  EXPECT_EQ(buckets.max, expected_max);
  ASSERT_EQ(buckets.batch_size.size(), expected_max.size());
  for (std::size_t b = 0; b < expected_max.size(); ++b)
    EXPECT_EQ(buckets.batch_size[b], 4096 / expected_max[b]);
  EXPECT_EQ(buckets.batch_size.front(), 512);
  EXPECT_EQ(buckets.batch_size.back(), 63);
  EXPECT_EQ(buckets.bucket_of(7), 0);
  EXPECT_EQ(buckets.bucket_of(8), 1);
  EXPECT_EQ(buckets.bucket_of(64), static_cast<int64_t>(expected_max.size()) - 1);
  EXPECT_EQ(buckets.bucket_of(65), -1);
  EXPECT_THROW(garden::data::make_length_buckets(64, 64), garden::Error);
}

TEST(PipelineBatching, BucketingGroupsByLengthAndFlushesAtTheEnd) {
  // Budget 20, max_length 10: buckets [0,8) [8,9) [9,11) take 20/8 = 2,
  // 20/9 = 2 and 20/11 = 1 examples.
  const auto dir = fresh_dir("bucket");
  const auto path = write_files(dir, {{3, 9, 12, 5, 10, 4}});
  auto config = data_config(path, false, 20);
  BatchingOptions batching;
  batching.mode = BatchMode::kBucketByLength;
  batching.max_length = 10;
  InputPipeline pipeline(config, sequence_example, batching);
  std::vector<std::vector<int64_t>> batches;
  while (auto batch = pipeline.next()) {
    batches.emplace_back();
    for (int64_t j = 0; j < batch->at("id").size(0); ++j)
      batches.back().push_back(batch->at("id")[j].item<int64_t>());
  }
  // 9 fills [9,11) at once; 12 is truncated in evaluation to 9 tokens + EOS
  // (length 10, same bucket); 3 and 5 fill [0,8); 4 is flushed at the end.
  EXPECT_EQ(batches, (std::vector<std::vector<int64_t>>{{9}, {12}, {3, 5}, {10}, {4}}));
}

TEST(PipelineBatching, TrainingDropsOverlongExamplesAndStaticBatchesPadToMaxLength) {
  const auto dir = fresh_dir("static");
  const auto path = write_files(dir, {{3, 12, 5}});
  auto config = data_config(path, true, 20);
  config.shuffle_buffer_size = 1;
  config.cycle_length = 1;
  BatchingOptions batching;
  batching.mode = BatchMode::kStatic;
  batching.max_length = 10;
  InputPipeline pipeline(config, sequence_example, batching);  // 20 / 10 = 2 a batch
  const auto batch = *pipeline.next();
  EXPECT_TRUE(torch::equal(batch.at("id"), torch::tensor({3, 5}, torch::kLong)));
  EXPECT_EQ(batch.at("inputs").sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(PipelinePrefetch, AnErrorInTheWorkerReachesNextAsItWasThrown) {
  const auto dir = fresh_dir("error");
  const auto path = write_files(dir, numbered({20}));
  auto config = data_config(path, false, 2);
  config.prefetch_buffer_size = 2;
  InputPipeline pipeline(config, [](const std::string& record) -> Batch {
    if (record == "7") throw std::invalid_argument("bad record 7");
    return id_example(record);
  });
  int batches = 0;
  try {
    while (pipeline.next()) ++batches;
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "bad record 7");
  }
  EXPECT_EQ(batches, 3);  // records 0..5
  EXPECT_THROW(pipeline.next(), std::invalid_argument);
}

TEST(PipelinePrefetch, DestructionStopsAnInfiniteWorker) {
  const auto dir = fresh_dir("stop");
  const auto path = write_files(dir, numbered({5}));
  auto config = data_config(path, true, 2);
  config.prefetch_buffer_size = 3;
  auto pipeline = std::make_unique<InputPipeline>(config, id_example);
  ASSERT_TRUE(pipeline->next().has_value());
  pipeline.reset();  // joins; a hang would time the test out
}

bool same_batch(const Batch& a, const Batch& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, tensor] : a) {
    const auto it = b.find(name);
    if (it == b.end() || tensor.sizes() != it->second.sizes() ||
        tensor.dtype() != it->second.dtype() || !torch::equal(tensor, it->second))
      return false;
  }
  return true;
}

void expect_exact_resume(const DataConfig& config, const BatchingOptions& batching, int total,
                         const std::vector<int>& cuts) {
  InputPipeline reference(config, sequence_example, batching);
  std::vector<Batch> expected;
  for (int i = 0; i < total; ++i) {
    auto batch = reference.next();
    if (!batch) break;
    expected.push_back(*batch);
  }
  for (int cut : cuts) {
    InputPipeline first(config, sequence_example, batching);
    int reached = 0;
    while (reached < cut && first.next().has_value()) ++reached;
    EXPECT_EQ(reached, cut) << "the pipeline ended before cut " << cut;
    if (reached < cut) return;
    const std::string saved = first.state().dump();
    first.next();  // moving on afterwards must not matter
    InputPipeline resumed(config, sequence_example, batching);
    resumed.restore(nlohmann::json::parse(saved));
    for (std::size_t i = static_cast<std::size_t>(cut); i < expected.size(); ++i) {
      auto batch = resumed.next();
      const bool same = batch.has_value() && same_batch(*batch, expected[i]);
      EXPECT_TRUE(same) << "cut " << cut << " batch " << i << (batch ? " differs" : " is missing");
      if (!same) return;  // the batches after it would only repeat the failure
    }
    if (!config.is_training.value_or(false)) {
      EXPECT_FALSE(resumed.next().has_value());
    }
  }
}

TEST(PipelineState, RestoreYieldsExactlyTheFollowingBatches) {
  const auto dir = fresh_dir("resume");
  // ids f*100 + r: lengths r vary from 0 to 12
  const auto path = write_files(dir, numbered({13, 7, 11, 9}));
  auto config = data_config(path, true, 24);
  config.shuffle_buffer_size = 6;
  config.cycle_length = 2;
  config.block_length = 3;
  config.prefetch_buffer_size = 2;
  BatchingOptions bucketing;
  bucketing.mode = BatchMode::kBucketByLength;
  bucketing.max_length = 10;
  // about 10 epochs of 40 records in 60 batches
  expect_exact_resume(config, bucketing, 60, {0, 1, 7, 23, 41});

  BatchingOptions padded;
  padded.mode = BatchMode::kPadded;
  expect_exact_resume(config, padded, 40, {3, 19});

  config.cache = true;
  expect_exact_resume(config, padded, 40, {2, 25});

  auto eval = data_config(path, false, 3);
  eval.cycle_length = 3;
  eval.drop_remainder = false;
  expect_exact_resume(eval, padded, 100, {0, 4, 13});
}

TEST(PipelineState, RecordsReadAfterARestoreStillNameTheirFile) {
  const auto dir = fresh_dir("restore_where");
  const auto path = write_files(dir, numbered({20, 20}));
  auto config = data_config(path, false, 1);
  config.cycle_length = 2;
  // Each example carries the file its record came from (the error messages
  // of a map function name it) and its index in that file.
  garden::data::LocatedMapFn located = [](const std::string& record,
                                          const garden::data::RecordLocation& where) {
    const int64_t id = std::stoll(record);
    const bool file_ok =
        where.file == (fs::path(where.file).parent_path() /
                       ("part-" + std::to_string(id / 100) + ".tfrecord")).string();
    return Batch{{"id", torch::tensor(id, torch::kLong)},
                 {"ok", torch::tensor(int64_t(file_ok && where.index == id % 100), torch::kLong)}};
  };
  InputPipeline first(config, located);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(first.next());
  InputPipeline resumed(config, located);
  resumed.restore(first.state());
  int64_t seen = 0;
  while (auto batch = resumed.next()) {
    EXPECT_EQ(batch->at("ok").item<int64_t>(), 1) << "record " << batch->at("id").item<int64_t>();
    ++seen;
  }
  EXPECT_EQ(seen, 33);
}

TEST(PipelineState, RestoreRejectsOtherFilesAndSeeds) {
  const auto dir = fresh_dir("reject");
  const auto path = write_files(dir, numbered({3, 3}));
  auto config = data_config(path, true);
  InputPipeline pipeline(config, id_example);
  const auto state = pipeline.state();
  config.seed = 99;
  InputPipeline other_seed(config, id_example);
  EXPECT_THROW(other_seed.restore(state), garden::Error);
  auto one_file = data_config((dir / "part-0.tfrecord").string(), true);
  InputPipeline other_files(one_file, id_example);
  EXPECT_THROW(other_files.restore(state), garden::Error);
}

}  // namespace
