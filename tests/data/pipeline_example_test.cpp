// Files written by a writer that is not Garden's (tf.Example records encoded
// by hand, framed by hand, GZIP-compressed by zlib itself) read back through
// the whole input pipeline: files, shards, parse spec, batches.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "garden/config/definitions.h"
#include "garden/data/example.h"
#include "garden/data/parse_spec.h"
#include "garden/data/pipeline.h"
#include "reference_formats.h"

namespace fs = std::filesystem;

namespace {

using namespace garden_test::reference;

class PipelineExampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_pipeline_example_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Record i: ids = [i, i+1, ..., 2i] (i+1 values, unpacked on odd i, as
  // other writers do), label = i as a float, name = "r<i>".
  static std::string record(int64_t i) {
    std::vector<int64_t> ids;
    for (int64_t v = i; v <= 2 * i; ++v) ids.push_back(v);
    return ref_encode_record(ref_example({
        {"ids", ref_feature(kInt64ListField, ref_int64_list(ids, /*packed=*/i % 2 == 0))},
        {"label", ref_feature(kFloatListField, ref_float_list({static_cast<float>(i)}, true))},
        {"name", ref_feature(kBytesListField, ref_bytes_list({"r" + std::to_string(i)}))},
    }));
  }

  void write_plain(const fs::path& path, int64_t from, int64_t to) const {
    std::ofstream out(path, std::ios::binary);
    for (int64_t i = from; i < to; ++i) out << record(i);
  }

  void write_gzip(const fs::path& path, int64_t from, int64_t to) const {
    // A fatal ASSERT here would only leave this helper: throw, which fails the
    // test that needs the file.
    gzFile file = gzopen(path.c_str(), "wb");
    if (file == nullptr) throw std::runtime_error("cannot write " + path.string());
    for (int64_t i = from; i < to; ++i) {
      const std::string bytes = record(i);
      gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
    }
    gzclose(file);
  }

  // The map function a task would write: parse with a spec, keep tensors.
  static garden::Batch parse(const std::string& serialized,
                             const garden::data::RecordLocation& where) {
    static const garden::data::ParseSpec spec = {
        {"ids", garden::data::VarLenFeature{garden::data::DType::kInt64}},
        {"label", garden::data::FixedLenFeature{{1}, garden::data::DType::kFloat, std::nullopt}},
    };
    const auto parsed =
        garden::data::parse(garden::data::parse_example(serialized), spec, where);
    return {{"ids", parsed.tensors.at("ids")}, {"label", parsed.tensors.at("label")}};
  }

  fs::path dir_;
};

std::vector<int64_t> labels_of(garden::data::InputPipeline& pipeline) {
  std::vector<int64_t> labels;
  while (auto batch = pipeline.next()) {
    const auto label = batch->at("label").reshape({-1});
    const auto ids = batch->at("ids");
    for (int64_t row = 0; row < label.size(0); ++row) {
      const auto i = static_cast<int64_t>(label[row].item<float>());
      labels.push_back(i);
      // Padded batches: the row's ids are i..2i, then zeros.
      for (int64_t k = 0; k <= i; ++k) EXPECT_EQ(ids[row][k].item<int64_t>(), i + k);
      for (int64_t k = i + 1; k < ids.size(1); ++k) EXPECT_EQ(ids[row][k].item<int64_t>(), 0);
    }
  }
  return labels;
}

TEST_F(PipelineExampleTest, HandWrittenFilesReadThroughThePipelineInOrder) {
  write_plain(dir_ / "a.tfrecord", 0, 5);
  write_plain(dir_ / "b.tfrecord", 5, 9);
  garden::config::DataConfig config;
  config.input_path = (dir_ / "*.tfrecord").string();
  config.global_batch_size = 4;
  config.is_training = false;
  config.drop_remainder = false;
  garden::data::BatchingOptions batching;
  batching.mode = garden::data::BatchMode::kPadded;
  garden::data::InputPipeline pipeline(config, parse, batching);
  // cycle_length defaults to min(files, 8) = 2 with block_length 1: the two
  // files alternate until b (4 records) ends, then a's last record follows.
  EXPECT_EQ(labels_of(pipeline), (std::vector<int64_t>{0, 5, 1, 6, 2, 7, 3, 8, 4}));
}

TEST_F(PipelineExampleTest, GzipFilesFromZlibAndShardsCoverEveryRecordOnce) {
  for (int f = 0; f < 4; ++f)
    write_gzip(dir_ / ("part-" + std::to_string(f) + ".tfrecord.gz"), 5 * f, 5 * f + 5);
  std::vector<int64_t> seen;
  for (int64_t shard = 0; shard < 2; ++shard) {
    garden::config::DataConfig config;
    config.input_path = (dir_ / "part-*").string();
    config.file_type = "tfrecord_compressed";
    config.global_batch_size = 3;
    config.is_training = false;
    config.drop_remainder = false;
    garden::data::BatchingOptions batching;
    batching.mode = garden::data::BatchMode::kPadded;
    garden::InputContext context;
    context.num_input_pipelines = 2;
    context.input_pipeline_id = shard;
    garden::data::InputPipeline pipeline(config, parse, batching, context);
    EXPECT_FALSE(pipeline.shards_by_record()) << "4 files for 2 pipelines: shard by file";
    for (int64_t label : labels_of(pipeline)) seen.push_back(label);
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(20);
  for (int64_t i = 0; i < 20; ++i) all[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(seen, all);
}

TEST_F(PipelineExampleTest, CorruptRecordsFailOrAreSkippedAsConfigured) {
  write_plain(dir_ / "c.tfrecord", 0, 4);
  // Break record 1's data CRC (its last byte).
  std::string bytes;
  {
    std::ifstream in(dir_ / "c.tfrecord", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::size_t second_end = record(0).size() + record(1).size();
  bytes[second_end - 1] ^= 0x40;
  std::ofstream(dir_ / "c.tfrecord", std::ios::binary | std::ios::trunc) << bytes;

  garden::config::DataConfig config;
  config.input_path = (dir_ / "c.tfrecord").string();
  config.global_batch_size = 1;
  config.is_training = false;
  config.drop_remainder = false;
  {
    garden::data::InputPipeline pipeline(config, parse, {});
    try {
      while (pipeline.next()) {
      }
      FAIL() << "expected a CRC error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("c.tfrecord"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad data CRC"), std::string::npos) << e.what();
    }
  }
  config.skip_corrupt_records = true;
  garden::data::InputPipeline pipeline(config, parse, {});
  EXPECT_EQ(labels_of(pipeline), (std::vector<int64_t>{0, 2, 3}));
}

TEST_F(PipelineExampleTest, AParseErrorNamesTheFileTheRecordAndTheFeature) {
  write_plain(dir_ / "good.tfrecord", 0, 3);
  {
    // Record 1 of bad.tfrecord has no "label".
    std::ofstream out(dir_ / "bad.tfrecord", std::ios::binary);
    out << record(0)
        << ref_encode_record(ref_example(
               {{"ids", ref_feature(kInt64ListField, ref_int64_list({7}, true))}}));
  }
  garden::config::DataConfig config;
  config.input_path = (dir_ / "good.tfrecord").string() + "," + (dir_ / "bad.tfrecord").string();
  config.global_batch_size = 2;
  config.is_training = false;
  config.drop_remainder = false;
  garden::data::BatchingOptions batching;
  batching.mode = garden::data::BatchMode::kPadded;
  garden::data::InputPipeline pipeline(config, parse, batching);
  try {
    while (pipeline.next()) {
    }
    FAIL() << "expected a parse error";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find((dir_ / "bad.tfrecord").string() + "', record 1, feature 'label'"),
              std::string::npos)
        << message;
  }
}

}  // namespace
