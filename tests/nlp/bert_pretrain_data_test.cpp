// BERT pretraining records written by hand (tests/reference_formats.h, not
// Garden's writer) read back through build_bert_pretrain_inputs: names,
// values, optional features, errors, dummy batches, passes and resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/config/yaml_io.h"
#include "garden/nlp/data/bert_pretrain_data.h"
#include "reference_formats.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using namespace garden_test::reference;
using garden::nlp::BertPretrainDataConfig;
using garden_test::error_of;

constexpr int64_t kSeq = 6;
constexpr int64_t kPredictions = 3;

// The values record r holds; every feature differs per record, so a batch row
// says which record it came from (input ids[0] / 1000).
std::vector<int64_t> word_ids(int64_t r) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < kSeq; ++k) v.push_back(1000 * r + k);
  return v;
}
std::vector<int64_t> type_ids(int64_t r) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < kSeq; ++k) v.push_back(k >= 2 + r % 3 ? 1 : 0);
  return v;
}
std::vector<int64_t> mask(int64_t r) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < kSeq; ++k) v.push_back(k < kSeq - r % 2 ? 1 : 0);
  return v;
}
std::vector<int64_t> lm_positions(int64_t r) { return {1 + r % 2, 3, 4}; }
std::vector<int64_t> lm_ids(int64_t r) { return {100 * r, 100 * r + 7, 0}; }
// Exactly representable floats, one of them not a whole number.
std::vector<float> lm_weights(int64_t r) { return {1.0f, 0.25f * static_cast<float>(r), 0.0f}; }
int64_t nsp_label(int64_t r) { return r % 2; }
std::vector<int64_t> position_ids(int64_t r) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < kSeq; ++k) v.push_back(k + 10 * r);
  return v;
}

struct RecordOptions {
  bool v2_names = false;
  bool next_sentence_label = true;
  bool position_id = false;
  std::string omit;           // a feature left out
  std::string short_feature;  // a feature with one value too few
  std::string bad_last;       // a feature whose last value is set to `bad_value`
  int64_t bad_value = 0;
};

std::string encode_record(int64_t r, const RecordOptions& o) {
  // Odd records unpacked, as some writers do.
  const bool packed = r % 2 == 0;
  std::vector<std::pair<std::string, std::string>> features;
  const auto add_ints = [&](const std::string& name, std::vector<int64_t> values) {
    if (name == o.omit) return;
    if (name == o.short_feature) values.pop_back();
    if (name == o.bad_last) values.back() = o.bad_value;
    features.emplace_back(name, ref_feature(kInt64ListField, ref_int64_list(values, packed)));
  };
  add_ints(o.v2_names ? "input_word_ids" : "input_ids", word_ids(r));
  add_ints(o.v2_names ? "input_type_ids" : "segment_ids", type_ids(r));
  add_ints("input_mask", mask(r));
  add_ints("masked_lm_positions", lm_positions(r));
  add_ints("masked_lm_ids", lm_ids(r));
  if (o.omit != "masked_lm_weights") {
    std::vector<float> weights = lm_weights(r);
    if (o.short_feature == "masked_lm_weights") weights.pop_back();
    features.emplace_back("masked_lm_weights",
                          ref_feature(kFloatListField, ref_float_list(weights, packed)));
  }
  if (o.next_sentence_label) add_ints("next_sentence_labels", {nsp_label(r)});
  if (o.position_id) add_ints("position_ids", position_ids(r));
  // A feature no spec names, as create_pretraining_data files may carry.
  features.emplace_back("unused", ref_feature(kBytesListField, ref_bytes_list({"x"})));
  return ref_encode_record(ref_example(features));
}

class BertPretrainDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_bert_pretrain_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Records [from, to) into dir_/name; returns the path.
  std::string write(const std::string& name, int64_t from, int64_t to,
                    const RecordOptions& options = {}) const {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    for (int64_t r = from; r < to; ++r) out << encode_record(r, options);
    return path.string();
  }

  static BertPretrainDataConfig config(const std::string& input_path, int64_t batch) {
    BertPretrainDataConfig c;
    c.input_path = input_path;
    c.global_batch_size = batch;
    c.seq_length = kSeq;
    c.max_predictions_per_seq = kPredictions;
    c.is_training = false;
    c.drop_remainder = false;
    return c;
  }

  fs::path dir_;
};

std::vector<garden::Batch> all_batches(garden::Dataset& data) {
  std::vector<garden::Batch> out;
  while (auto batch = data.next()) out.push_back(*batch);
  return out;
}

at::Tensor longs(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); }

// The batch holds the documented tensors, of the documented shapes and types.
void expect_keys_and_shapes(const garden::Batch& batch, bool next_sentence, bool positions) {
  std::set<std::string> keys;
  for (const auto& [name, tensor] : batch) keys.insert(name);
  std::set<std::string> want = {"input_word_ids",      "input_mask",    "input_type_ids",
                                "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"};
  if (next_sentence) want.insert("next_sentence_labels");
  if (positions) want.insert("position_ids");
  ASSERT_EQ(keys, want);
  const at::Tensor words = batch.at("input_word_ids");
  const int64_t rows = words.size(0);
  for (const char* name : {"input_word_ids", "input_mask", "input_type_ids"}) {
    EXPECT_EQ(batch.at(name).sizes(), (at::IntArrayRef{rows, kSeq})) << name;
    EXPECT_EQ(batch.at(name).scalar_type(), torch::kLong) << name;
  }
  for (const char* name : {"masked_lm_positions", "masked_lm_ids", "masked_lm_weights"})
    EXPECT_EQ(batch.at(name).sizes(), (at::IntArrayRef{rows, kPredictions})) << name;
  EXPECT_EQ(batch.at("masked_lm_weights").scalar_type(), torch::kFloat);
  if (next_sentence) {
    EXPECT_EQ(batch.at("next_sentence_labels").sizes(), (at::IntArrayRef{rows}));
    EXPECT_EQ(batch.at("next_sentence_labels").scalar_type(), torch::kLong);
  }
  if (positions) {
    EXPECT_EQ(batch.at("position_ids").sizes(), (at::IntArrayRef{rows, kSeq}));
    EXPECT_EQ(batch.at("position_ids").scalar_type(), torch::kLong);
  }
}

// That, and every row of `batch` equals what its record was written with.
void expect_rows_as_written(const garden::Batch& batch, bool next_sentence, bool positions) {
  expect_keys_and_shapes(batch, next_sentence, positions);
  const at::Tensor words = batch.at("input_word_ids");
  for (int64_t row = 0; row < words.size(0); ++row) {
    const int64_t r = words[row][0].item<int64_t>() / 1000;
    EXPECT_TRUE(torch::equal(words[row], longs(word_ids(r)))) << "record " << r;
    EXPECT_TRUE(torch::equal(batch.at("input_type_ids")[row], longs(type_ids(r))));
    EXPECT_TRUE(torch::equal(batch.at("input_mask")[row], longs(mask(r))));
    EXPECT_TRUE(torch::equal(batch.at("masked_lm_positions")[row], longs(lm_positions(r))));
    EXPECT_TRUE(torch::equal(batch.at("masked_lm_ids")[row], longs(lm_ids(r))));
    EXPECT_TRUE(torch::equal(batch.at("masked_lm_weights")[row],
                             torch::tensor(lm_weights(r), torch::kFloat)));
    if (next_sentence) {
      EXPECT_EQ(batch.at("next_sentence_labels")[row].item<int64_t>(), nsp_label(r));
    }
    if (positions) {
      EXPECT_TRUE(torch::equal(batch.at("position_ids")[row], longs(position_ids(r))));
    }
  }
}

std::vector<int64_t> records_of(const std::vector<garden::Batch>& batches) {
  std::vector<int64_t> out;
  for (const auto& batch : batches) {
    const at::Tensor words = batch.at("input_word_ids");
    for (int64_t row = 0; row < words.size(0); ++row)
      out.push_back(words[row][0].item<int64_t>() / 1000);
  }
  return out;
}

bool same_batches(const std::vector<garden::Batch>& a, const std::vector<garden::Batch>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    for (const auto& [name, tensor] : a[i]) {
      const auto it = b[i].find(name);
      if (it == b[i].end() || !torch::equal(tensor, it->second)) return false;
    }
  }
  return true;
}

TEST_F(BertPretrainDataTest, V1AndV2NamesGiveTheSameBatchesOfTheValuesWritten) {
  RecordOptions v2;
  v2.v2_names = true;
  write("v1/a.tfrecord", 0, 3);
  write("v1/b.tfrecord", 3, 5);
  write("v2/a.tfrecord", 0, 3, v2);
  write("v2/b.tfrecord", 3, 5, v2);
  BertPretrainDataConfig v1_config = config((dir_ / "v1" / "*").string(), 2);
  BertPretrainDataConfig v2_config = config((dir_ / "v2" / "*").string(), 2);
  v2_config.use_v2_feature_names = true;
  const auto v1_batches = all_batches(*garden::nlp::build_bert_pretrain_inputs(v1_config));
  const auto v2_batches = all_batches(*garden::nlp::build_bert_pretrain_inputs(v2_config));
  ASSERT_EQ(v1_batches.size(), 3u);  // 5 records in batches of 2, the remainder kept
  EXPECT_TRUE(same_batches(v1_batches, v2_batches));
  for (const auto& batch : v1_batches) expect_rows_as_written(batch, true, false);

  // Records with the other names are refused, naming the feature looked for.
  v2_config.input_path = v1_config.input_path;
  const std::string error =
      error_of([&] { all_batches(*garden::nlp::build_bert_pretrain_inputs(v2_config)); });
  EXPECT_NE(error.find("'input_type_ids'"), std::string::npos) << error;
}

TEST_F(BertPretrainDataTest, NextSentenceLabelsAndPositionIdsOnlyWhenAsked) {
  RecordOptions positions_only;
  positions_only.next_sentence_label = false;
  positions_only.position_id = true;
  const std::string path = write("a.tfrecord", 0, 4, positions_only);
  BertPretrainDataConfig c = config(path, 4);
  c.use_next_sentence_label = false;
  c.use_position_id = true;
  auto batches = all_batches(*garden::nlp::build_bert_pretrain_inputs(c));
  ASSERT_EQ(batches.size(), 1u);
  expect_rows_as_written(batches[0], false, true);

  // The same records with neither asked for: position_ids is left out.
  c.use_position_id = false;
  batches = all_batches(*garden::nlp::build_bert_pretrain_inputs(c));
  ASSERT_EQ(batches.size(), 1u);
  expect_rows_as_written(batches[0], false, false);

  // Asked for but not written: an error naming it.
  c.use_next_sentence_label = true;
  const std::string error =
      error_of([&] { all_batches(*garden::nlp::build_bert_pretrain_inputs(c)); });
  EXPECT_NE(error.find("'next_sentence_labels'"), std::string::npos) << error;
}

TEST_F(BertPretrainDataTest, AMissingFeatureNamesTheFileTheRecordAndTheFeature) {
  const std::string path = write("good.tfrecord", 0, 2);
  RecordOptions bad;
  bad.omit = "masked_lm_weights";
  std::ofstream(path, std::ios::binary | std::ios::app) << encode_record(2, bad);
  const std::string error =
      error_of([&] { all_batches(*garden::nlp::build_bert_pretrain_inputs(config(path, 1))); });
  EXPECT_NE(error.find("'" + path + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("record 2"), std::string::npos) << error;
  EXPECT_NE(error.find("'masked_lm_weights'"), std::string::npos) << error;
  EXPECT_NE(error.find("missing"), std::string::npos) << error;
}

TEST_F(BertPretrainDataTest, AFeatureOfTheWrongLengthNamesTheFileTheRecordAndTheFeature) {
  RecordOptions bad;
  bad.short_feature = "input_mask";
  const std::string path = dir_ / "bad.tfrecord";
  {
    std::ofstream out(path, std::ios::binary);
    out << encode_record(0, {}) << encode_record(1, bad) << encode_record(2, {});
  }
  const std::string error =
      error_of([&] { all_batches(*garden::nlp::build_bert_pretrain_inputs(config(path, 3))); });
  EXPECT_NE(error.find("'" + path + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("record 1"), std::string::npos) << error;
  EXPECT_NE(error.find("'input_mask'"), std::string::npos) << error;
  EXPECT_NE(error.find("has 5 values"), std::string::npos) << error;

  // A record that is not a tf.Example at all is placed too.
  {
    std::ofstream out(path, std::ios::binary);
    out << encode_record(0, {}) << ref_encode_record("\xff\xff\xff");
  }
  const std::string garbage =
      error_of([&] { all_batches(*garden::nlp::build_bert_pretrain_inputs(config(path, 3))); });
  EXPECT_NE(garbage.find("'" + path + "', record 1"), std::string::npos) << garbage;
}

TEST_F(BertPretrainDataTest, IdsOutsideTheModelsVocabulariesOrTheSequenceNameWhereTheyAre) {
  // Records 0..3 hold word ids up to 3005, masked_lm_ids up to 307 and type
  // ids 0 and 1 (see word_ids, lm_ids, type_ids).
  const std::string path = write("a.tfrecord", 0, 4);
  const BertPretrainDataConfig c = config(path, 4);
  const auto read = [&](garden::nlp::PretrainIdBounds bounds) {
    return error_of([&] {
      all_batches(*garden::nlp::build_bert_pretrain_inputs(c, garden::InputContext{}, bounds));
    });
  };
  EXPECT_EQ(read({3006, 2}), "(no error)");
  EXPECT_EQ(read({}), "(no error)");  // unchecked

  // 3000, the first word id of record 3, is one past a vocabulary of 3000.
  std::string error = read({3000, 2});
  EXPECT_NE(error.find("'" + path + "', record 3: feature 'input_ids' holds 3000 at index 0"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("vocabulary (vocab_size) of 3000"), std::string::npos) << error;

  // One type: record 0's first type id 1 is at index 2.
  error = read({3006, 1});
  EXPECT_NE(error.find("record 0: feature 'segment_ids' holds 1 at index 2"), std::string::npos)
      << error;
  EXPECT_NE(error.find("type_vocab_size"), std::string::npos) << error;

  // A masked_lm_id past the vocabulary, a negative one, and a position past
  // the sequence (checked with or without bounds).
  RecordOptions big_id;
  big_id.bad_last = "masked_lm_ids";
  big_id.bad_value = 5000;
  RecordOptions negative_id = big_id;
  negative_id.bad_value = -1;
  RecordOptions far_position;
  far_position.bad_last = "masked_lm_positions";
  far_position.bad_value = kSeq;
  {
    std::ofstream out(path, std::ios::binary);
    out << encode_record(0, {}) << encode_record(1, big_id);
  }
  error = read({3006, 2});
  EXPECT_NE(error.find("record 1: feature 'masked_lm_ids' holds 5000 at index 2"),
            std::string::npos)
      << error;
  {
    std::ofstream out(path, std::ios::binary);
    out << encode_record(0, negative_id);
  }
  error = read({3006, 2});
  EXPECT_NE(error.find("record 0: feature 'masked_lm_ids' holds -1"), std::string::npos) << error;
  {
    std::ofstream out(path, std::ios::binary);
    out << encode_record(0, {}) << encode_record(1, {}) << encode_record(2, far_position);
  }
  error = read({});
  EXPECT_NE(error.find("record 2: feature 'masked_lm_positions' holds 6 at index 2, outside the "
                       "sequence length (seq_length) of 6"),
            std::string::npos)
      << error;
}

TEST_F(BertPretrainDataTest, DummyBatchesAreZerosOfTheDocumentedShapesForEver) {
  BertPretrainDataConfig c = config("dummy", 8);
  c.use_position_id = true;
  garden::InputContext two_replicas;
  two_replicas.num_replicas_in_sync = 2;
  auto data = garden::nlp::build_bert_pretrain_inputs(c, two_replicas);
  for (int step = 0; step < 3; ++step) {
    auto batch = data->next();
    ASSERT_TRUE(batch.has_value());
    // Rows per replica: 8 / 2.
    expect_keys_and_shapes(*batch, true, true);
    for (const auto& [name, tensor] : *batch) {
      EXPECT_EQ(tensor.size(0), 4) << name;
      EXPECT_EQ(tensor.count_nonzero().item<int64_t>(), 0) << name;
    }
    // Edited in place by a consumer, the next batch stays zeros.
    batch->at("input_word_ids").fill_(7);
  }
  const nlohmann::json state = data->state();
  auto again = garden::nlp::build_bert_pretrain_inputs(c, two_replicas);
  again->restore(state);
  EXPECT_EQ(again->state(), state);
  EXPECT_NE(state, garden::nlp::build_bert_pretrain_inputs(c, two_replicas)->state());
  EXPECT_NE(error_of([&] { again->restore(nlohmann::json::array()); }), "(no error)");

  c.use_next_sentence_label = false;
  c.use_position_id = false;
  auto batch = garden::nlp::build_bert_pretrain_inputs(c)->next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->count("next_sentence_labels"), 0u);
  EXPECT_EQ(batch->count("position_ids"), 0u);
  EXPECT_EQ(batch->at("input_mask").size(0), 8);
}

TEST_F(BertPretrainDataTest, AnEvaluationPassEndsAndCoversEveryRecordOnce) {
  write("part-0.tfrecord", 0, 4);
  write("part-1.tfrecord", 4, 7);
  write("part-2.tfrecord", 7, 11);
  auto data = garden::nlp::build_bert_pretrain_inputs(config((dir_ / "part-*").string(), 3));
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> seen = records_of(all_batches(*data));
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> every(11);
    for (int64_t r = 0; r < 11; ++r) every[static_cast<std::size_t>(r)] = r;
    EXPECT_EQ(seen, every) << "pass " << pass;
    data->reset();
  }
}

TEST_F(BertPretrainDataTest, TrainingRepeatsShufflesAndResumesExactly) {
  write("part-0.tfrecord", 0, 5);
  write("part-1.tfrecord", 5, 10);
  BertPretrainDataConfig c = config((dir_ / "part-*").string(), 4);
  c.is_training = true;
  c.drop_remainder = true;
  c.seed = 17;
  auto data = garden::nlp::build_bert_pretrain_inputs(c);
  std::vector<garden::Batch> first;
  for (int i = 0; i < 3; ++i) first.push_back(*data->next());
  const nlohmann::json state = data->state();
  std::vector<garden::Batch> rest;
  for (int i = 0; i < 4; ++i) rest.push_back(*data->next());
  // Training never ends: 20 batches of 4 read the 10 records 8 times over,
  // every one of them (the shuffle buffer mixes the passes, so not exactly 8
  // times each).
  std::vector<garden::Batch> twenty = first;
  twenty.insert(twenty.end(), rest.begin(), rest.end());
  for (int i = 7; i < 20; ++i) twenty.push_back(*data->next());
  std::vector<int64_t> seen = records_of(twenty);
  EXPECT_EQ(seen.size(), 80u);
  // Shuffled: not the order of the files interleaved.
  EXPECT_NE(std::vector<int64_t>(seen.begin(), seen.begin() + 10),
            (std::vector<int64_t>{0, 5, 1, 6, 2, 7, 3, 8, 4, 9}));
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  for (const auto& batch : twenty) expect_rows_as_written(batch, true, false);

  auto resumed = garden::nlp::build_bert_pretrain_inputs(c);
  resumed->restore(state);
  std::vector<garden::Batch> resumed_rest;
  for (int i = 0; i < 4; ++i) resumed_rest.push_back(*resumed->next());
  EXPECT_TRUE(same_batches(rest, resumed_rest));
}

TEST_F(BertPretrainDataTest, ValidateRefusesBadValuesNamingTheKey) {
  const auto refusal = [](const std::string& override_text) {
    BertPretrainDataConfig c;
    c.input_path = "dummy";
    garden::config::apply_override(c, override_text);
    return error_of([&] { garden::config::validate_config(c); });
  };
  EXPECT_EQ(refusal("seq_length=128,max_predictions_per_seq=20"), "(no error)");
  EXPECT_EQ(refusal("file_type=tfrecord_compressed"), "(no error)");
  EXPECT_NE(refusal("seq_length=1").find("seq_length"), std::string::npos);
  EXPECT_NE(refusal("file_type=csv").find("file_type: 'csv'"), std::string::npos)
      << refusal("file_type=csv");
  EXPECT_NE(refusal("max_predictions_per_seq=0").find("max_predictions_per_seq"),
            std::string::npos);
  EXPECT_NE(refusal("seq_length=8,max_predictions_per_seq=9").find("max_predictions_per_seq"),
            std::string::npos);
  EXPECT_NE(refusal("global_batch_size=0").find("global_batch_size"), std::string::npos);
  // The generic keys come through the base's visit(); the new keys read from YAML.
  BertPretrainDataConfig c;
  garden::config::apply_override(
      c,
      "use_v2_feature_names=true,use_position_id=true,use_next_sentence_label=false,"
      "drop_remainder=false,seq_length=64");
  EXPECT_TRUE(c.use_v2_feature_names);
  EXPECT_TRUE(c.use_position_id);
  EXPECT_FALSE(c.use_next_sentence_label);
  EXPECT_FALSE(c.drop_remainder);
  EXPECT_EQ(c.seq_length, 64);
  EXPECT_EQ(BertPretrainDataConfig().global_batch_size, 512);
  EXPECT_EQ(BertPretrainDataConfig().max_predictions_per_seq, 76);

  // No input_path at all is refused when the inputs are built.
  const std::string error =
      error_of([] { garden::nlp::build_bert_pretrain_inputs(BertPretrainDataConfig()); });
  EXPECT_NE(error.find("input_path"), std::string::npos) << error;
}

}  // namespace
