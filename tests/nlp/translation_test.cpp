// The translation task: its data in three formats, length filtering, the
// tokenizer it trains, the teacher-forced inputs, validation's aggregation
// into BLEU, decoding, and a tiny model that overfits a handful of pairs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device_util.h"
#include "garden/base/error.h"
#include "garden/cli/builtins.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/core/trainer.h"
#include "garden/data/example.h"
#include "garden/data/sentencepiece.h"
#include "garden/data/tfrecord.h"
#include "garden/nlp/metrics/bleu.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/losses.h"
#include "garden/nlp/tasks/translation_task.h"

namespace {

namespace fs = std::filesystem;
using garden::Batch;
using garden::Logs;
using garden::nlp::TranslationConfig;
using garden::nlp::TranslationTask;

struct Pair {
  std::string source, target;
};

// The first `count` pairs of the bundled gettext sample.
std::vector<Pair> sample_pairs(std::size_t count) {
  std::ifstream in(std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv");
  std::vector<Pair> pairs;
  std::string line;
  while (pairs.size() < count && std::getline(in, line)) {
    const auto tab = line.find('\t');
    pairs.push_back({line.substr(0, tab), line.substr(tab + 1)});
  }
  return pairs;
}

void write_tsv(const std::string& path, const std::vector<Pair>& pairs) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& p : pairs) out << p.source << '\t' << p.target << '\n';
}

class TranslationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("garden_translation_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // One SentencePiece model (pad 0, eos 1) shared by the tests that do not
    // test training it.
    const auto pairs = sample_pairs(900);
    {
      std::ofstream text(dir_ / "spm.txt");
      for (const auto& p : pairs) text << p.source << '\n' << p.target << '\n';
    }
    garden::data::SentencePieceTrainOptions options;
    options.input = {(dir_ / "spm.txt").string()};
    options.model_prefix = (dir_ / "spm").string();
    options.vocab_size = 500;
    options.pad_id = 0;
    options.eos_id = 1;
    options.unk_id = 2;
    options.bos_id = -1;
    garden::data::train_sentencepiece(options);
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  static std::string spm_path() { return (dir_ / "spm.model").string(); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  // A small model in eval mode, its weights drawn from seed 11.
  static garden::ModelPtr seeded_model() {
    TranslationTask task(small_config(path("unused.tsv"), path("unused.tsv")));
    torch::manual_seed(11);
    auto model = task.build_model();
    model->eval();
    return model;
  }
  // Three sentences of different lengths, padded with 0, each ending in EOS (1).
  static at::Tensor three_sentences() {
    return torch::tensor({{5, 6, 7, 8, 1}, {9, 10, 1, 0, 0}, {11, 1, 0, 0, 0}});
  }

  // A small task config over `train` / `validation` TSV files.
  static std::shared_ptr<TranslationConfig> small_config(const std::string& train,
                                                         const std::string& validation) {
    auto config = std::make_shared<TranslationConfig>();
    config->sentencepiece_model_path = spm_path();
    config->model.embedding_width = 32;
    for (auto* stack : {&config->model.encoder, &config->model.decoder}) {
      stack->num_layers = 1;
      stack->num_attention_heads = 4;
      stack->intermediate_size = 64;
    }
    for (auto* data : {&config->train_data, &config->validation_data}) {
      data->file_type = "tsv";
      data->global_batch_size = 256;
      data->max_seq_length = 64;
      data->seed = 7;
    }
    config->train_data.input_path = train;
    config->train_data.is_training = true;
    config->validation_data.input_path = validation;
    config->validation_data.is_training = false;
    config->validation_data.drop_remainder = false;
    return config;
  }

  // Every example of an evaluation pass, by unique id: (inputs, targets).
  static std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> eval_examples(
      TranslationTask& task, const garden::config::DataConfig& data) {
    auto dataset = task.build_inputs(data, {});
    std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> examples;
    while (auto batch = dataset->next()) {
      const auto& inputs = batch->at("inputs");
      const auto& targets = batch->at("targets");
      const auto& ids = batch->at("unique_id");
      for (int64_t b = 0; b < inputs.size(0); ++b) {
        auto strip = [](const at::Tensor& row) {
          std::vector<int64_t> out;
          for (int64_t i = 0; i < row.size(0); ++i)
            if (row[i].item<int64_t>() != 0) out.push_back(row[i].item<int64_t>());
          return out;
        };
        const int64_t id = ids[b][0].item<int64_t>();
        EXPECT_EQ(examples.count(id), 0u) << "unique id " << id << " twice";
        examples[id] = {strip(inputs[b]), strip(targets[b])};
      }
    }
    return examples;
  }

  static fs::path dir_;
};

fs::path TranslationTest::dir_;

TEST_F(TranslationTest, TsvAlignedAndTfrecordGiveTheSameExamples) {
  const auto pairs = sample_pairs(40);
  write_tsv(path("pairs.tsv"), pairs);
  {
    std::ofstream en(path("pairs.en")), de(path("pairs.de"));
    for (const auto& p : pairs) en << p.source << '\n', de << p.target << '\n';
  }
  {
    garden::data::TFRecordWriter writer(path("pairs.tfrecord"));
    for (const auto& p : pairs)
      writer.write(garden::data::serialize_example(
          {{"en", garden::data::FeatureValue::of_bytes({p.source})},
           {"de", garden::data::FeatureValue::of_bytes({p.target})}}));
  }
  auto tsv = small_config(path("pairs.tsv"), path("pairs.tsv"));
  auto aligned = small_config(path("pairs.tsv"), path("pairs.en"));
  aligned->validation_data.file_type = "aligned";
  auto tfrecord = small_config(path("pairs.tsv"), path("pairs.tfrecord"));
  tfrecord->validation_data.file_type = "tfrecord";
  for (auto* config : {aligned.get(), tfrecord.get()}) {
    config->validation_data.src_lang = "en";
    config->validation_data.tgt_lang = "de";
  }
  TranslationTask tsv_task(tsv), aligned_task(aligned), tfrecord_task(tfrecord);
  const auto expected = eval_examples(tsv_task, tsv->validation_data);
  ASSERT_EQ(expected.size(), pairs.size());
  // Record i of the only file has unique id i, and its ids are the pair's
  // tokens plus EOS.
  const auto& tokenizer = tsv_task.tokenizer();
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    auto source = tokenizer.encode(pairs[i].source);
    auto target = tokenizer.encode(pairs[i].target);
    source.push_back(tokenizer.eos_id());
    target.push_back(tokenizer.eos_id());
    EXPECT_EQ(expected.at(static_cast<int64_t>(i)).first, source) << "pair " << i;
    EXPECT_EQ(expected.at(static_cast<int64_t>(i)).second, target) << "pair " << i;
  }
  EXPECT_EQ(eval_examples(aligned_task, aligned->validation_data), expected);
  EXPECT_EQ(eval_examples(tfrecord_task, tfrecord->validation_data), expected);
}

TEST_F(TranslationTest, TrainingDropsLongPairsEvaluationTruncatesAndKeepsEveryPair) {
  const auto pairs = sample_pairs(120);
  write_tsv(path("long.tsv"), pairs);
  auto config = small_config(path("long.tsv"), path("long.tsv"));
  const int64_t limit = 6;
  config->train_data.max_seq_length = limit;
  config->validation_data.max_seq_length = limit;
  TranslationTask task(config);
  const auto& tokenizer = task.tokenizer();
  std::set<std::vector<int64_t>> short_sources;
  int64_t long_pairs = 0;
  for (const auto& p : pairs) {
    auto source = tokenizer.encode(p.source);
    auto target = tokenizer.encode(p.target);
    source.push_back(tokenizer.eos_id());
    target.push_back(tokenizer.eos_id());
    if (static_cast<int64_t>(std::max(source.size(), target.size())) <= limit)
      short_sources.insert(source);
    else
      ++long_pairs;
  }
  ASSERT_GT(long_pairs, 10);
  ASSERT_GT(short_sources.size(), 10u);

  // Training: only pairs within the limit, every one of them eventually.
  auto train = task.build_inputs(config->train_data, {});
  std::set<std::vector<int64_t>> seen;
  for (int step = 0; step < 200 && seen.size() < short_sources.size(); ++step) {
    const Batch batch = *train->next();
    EXPECT_LE(batch.at("inputs").size(1), limit);
    EXPECT_LE(batch.at("targets").size(1), limit);
    const auto& inputs = batch.at("inputs");
    for (int64_t b = 0; b < inputs.size(0); ++b) {
      std::vector<int64_t> row;
      for (int64_t i = 0; i < inputs.size(1); ++i)
        if (inputs[b][i].item<int64_t>() != 0) row.push_back(inputs[b][i].item<int64_t>());
      EXPECT_TRUE(short_sources.count(row)) << "a training example longer than the limit";
      seen.insert(row);
    }
  }
  EXPECT_EQ(seen, short_sources);

  // Evaluation: every pair, cut to limit - 1 tokens plus EOS.
  const auto examples = eval_examples(task, config->validation_data);
  ASSERT_EQ(examples.size(), pairs.size());
  for (const auto& [id, example] : examples) {
    const auto& p = pairs[static_cast<std::size_t>(id)];
    auto source = tokenizer.encode(p.source);
    if (static_cast<int64_t>(source.size()) > limit - 1) source.resize(limit - 1);
    source.push_back(tokenizer.eos_id());
    EXPECT_EQ(example.first, source) << "pair " << id;
    EXPECT_LE(static_cast<int64_t>(example.second.size()), limit);
    EXPECT_EQ(example.second.back(), tokenizer.eos_id());
  }
}

TEST_F(TranslationTest, BadDataIsOneErrorNamingFileAndLine) {
  garden::register_builtins();
  {
    std::ofstream out(path("notab.tsv"));
    out << "Open\tÖffnen\nno tab here\n";
  }
  auto config = small_config(path("notab.tsv"), path("notab.tsv"));
  TranslationTask task(config);
  try {
    auto dataset = task.build_inputs(config->validation_data, {});
    while (dataset->next()) {
    }
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("notab.tsv' line 2: no tab"), std::string::npos)
        << e.what();
  }

  {
    std::ofstream en(path("uneven.en")), de(path("uneven.de"));
    en << "a\nb\nc\n";
    de << "x\ny\n";
  }
  auto aligned = small_config(path("notab.tsv"), path("uneven.en"));
  aligned->validation_data.file_type = "aligned";
  aligned->validation_data.src_lang = "en";
  aligned->validation_data.tgt_lang = "de";
  TranslationTask aligned_task(aligned);
  try {
    auto dataset = aligned_task.build_inputs(aligned->validation_data, {});
    while (dataset->next()) {
    }
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("uneven.en"), std::string::npos) << what;
    EXPECT_NE(what.find("uneven.de' ends after line 2"), std::string::npos) << what;
  }

  // A tf.Example without the target feature.
  {
    garden::data::TFRecordWriter writer(path("missing.tfrecord"));
    writer.write(
        garden::data::serialize_example({{"en", garden::data::FeatureValue::of_bytes({"Open"})}}));
  }
  auto examples = small_config(path("notab.tsv"), path("missing.tfrecord"));
  examples->validation_data.file_type = "tfrecord";
  examples->validation_data.src_lang = "en";
  examples->validation_data.tgt_lang = "de";
  TranslationTask example_task(examples);
  try {
    auto dataset = example_task.build_inputs(examples->validation_data, {});
    while (dataset->next()) {
    }
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing.tfrecord"), std::string::npos) << what;
    EXPECT_NE(what.find("'de'"), std::string::npos) << what;
  }

  // Config errors: aligned without languages, an unknown file type.
  auto experiment = std::make_shared<garden::config::ExperimentConfig>();
  experiment->task = small_config(path("notab.tsv"), path("notab.tsv"));
  EXPECT_THROW(garden::config::apply_override(*experiment, "task.train_data.file_type=aligned");
               garden::config::validate_config(*experiment), garden::config::ConfigError);
  experiment->task = small_config(path("notab.tsv"), path("notab.tsv"));
  EXPECT_THROW(garden::config::apply_override(*experiment, "task.train_data.file_type=csv");
               garden::config::validate_config(*experiment), garden::config::ConfigError);
}

TEST_F(TranslationTest, TokenizerIsTrainedIntoModelDirOnceAndItsPadMustBeZero) {
  write_tsv(path("spm_pairs.tsv"), sample_pairs(300));
  auto config = small_config(path("spm_pairs.tsv"), path("spm_pairs.tsv"));
  config->sentencepiece_model_path = "";
  config->sentencepiece_vocab_size = 300;
  const std::string model_dir = path("spm_model_dir");
  TranslationTask task(config, model_dir);
  const auto& tokenizer = task.tokenizer();
  const fs::path model = fs::path(model_dir) / TranslationTask::kSentencePieceFile;
  ASSERT_TRUE(fs::exists(model));
  EXPECT_EQ(tokenizer.vocab_size(), 300);
  EXPECT_EQ(tokenizer.pad_id(), 0);
  EXPECT_EQ(tokenizer.eos_id(), 1);
  // Nothing temporary is left behind.
  for (const auto& entry : fs::directory_iterator(model_dir))
    EXPECT_EQ(entry.path().filename().string().find("tmp"), std::string::npos) << entry.path();
  // The model's vocabulary is the tokenizer's.
  auto model_ptr = task.build_model();
  EXPECT_EQ(model_ptr->as<garden::nlp::Seq2SeqTransformerImpl>()->options().vocab_size, 300);

  // A second task over the same model_dir reuses the file.
  const auto written = fs::last_write_time(model);
  TranslationTask again(config, model_dir);
  again.tokenizer();
  EXPECT_EQ(fs::last_write_time(model), written);

  // A vocabulary the data cannot fill is one error naming the key, and the
  // model_dir it would have made is not left behind.
  auto too_big = small_config(path("spm_pairs.tsv"), path("spm_pairs.tsv"));
  too_big->sentencepiece_model_path = "";
  too_big->sentencepiece_vocab_size = 900000;
  TranslationTask failing(too_big, path("failed_model_dir"));
  try {
    failing.tokenizer();
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("task.sentencepiece_vocab_size 900000"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path("failed_model_dir")));

  // Translation without a trained tokenizer is an error, not a new one.
  TranslationTask no_training(config, path("empty_model_dir"));
  no_training.set_tokenizer_training(false);
  EXPECT_THROW(no_training.tokenizer(), garden::Error);

  // SentencePiece's own default ids put <unk> at 0: refused.
  garden::data::SentencePieceTrainOptions defaults;
  defaults.input = {(dir_ / "spm.txt").string()};
  defaults.model_prefix = path("pad3");
  defaults.vocab_size = 300;
  garden::data::train_sentencepiece(defaults);
  auto pad3 = small_config(path("spm_pairs.tsv"), path("spm_pairs.tsv"));
  pad3->sentencepiece_model_path = path("pad3.model");
  TranslationTask pad3_task(pad3);
  try {
    pad3_task.tokenizer();
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pads with id 0"), std::string::npos) << e.what();
  }
}

TEST_F(TranslationTest, DecoderInputIsTheTargetShiftedRightAndTheLossIgnoresPadding) {
  auto config = small_config(path("unused.tsv"), path("unused.tsv"));
  config->model.label_smoothing = 0.1;
  TranslationTask task(config);
  torch::manual_seed(3);
  auto model = task.build_model();
  model->eval();
  auto& transformer = *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  const at::Tensor inputs = torch::tensor({{5, 6, 7, 1}, {8, 9, 1, 0}}, torch::kLong);
  const at::Tensor targets = torch::tensor({{11, 12, 1}, {13, 1, 0}}, torch::kLong);
  const at::Tensor decoder_in = torch::tensor({{0, 11, 12}, {0, 13, 1}}, torch::kLong);
  torch::NoGradGuard no_grad;
  const Batch outputs = task.call_model(*model, {{"inputs", inputs}, {"targets", targets}}, false);
  EXPECT_TRUE(torch::equal(outputs.at("logits"), transformer.forward(inputs, decoder_in)));
  const garden::Losses losses = task.build_losses({{"targets", targets}}, outputs);
  const auto xent = garden::kernels::padded_cross_entropy_loss(outputs.at("logits"), targets, 0.1);
  EXPECT_EQ(xent.weight_sum.item<double>(), 5.0);
  ASSERT_EQ(losses.parts().size(), 1u);
  EXPECT_NEAR(losses.total().item<double>(), (xent.loss_sum / 5.0).item<double>(), 1e-6);
  EXPECT_EQ(losses.parts()[0].count.item<double>(), 5.0) << "the loss counts its non-pad tokens";
}

TEST_F(TranslationTest, EncoderAndDecoderDepthsMayDiffer) {
  auto config = small_config(path("unused.tsv"), path("unused.tsv"));
  config->model.encoder.num_layers = 3;
  config->model.decoder.num_layers = 1;
  auto experiment = std::make_shared<garden::config::ExperimentConfig>();
  experiment->task = config;
  garden::config::validate_config(*experiment);
  TranslationTask task(config);
  auto model = task.build_model();
  auto& transformer = *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  EXPECT_EQ(transformer.encoder_layers.size(), 3u);
  EXPECT_EQ(transformer.decoder_layers.size(), 1u);
  model->eval();
  const auto outputs = garden::nlp::translate_ids(
      transformer, torch::tensor({{5, 6, 1}}, torch::kLong), 1, task.decode_options());
  EXPECT_EQ(outputs.size(), 1u);
  // The other block settings must agree.
  config->model.decoder.intermediate_size = 32;
  EXPECT_THROW(garden::config::validate_config(*experiment), garden::config::ConfigError);
}

TEST_F(TranslationTest, StaticBatchesArePaddedToMaxSeqLengthAndEvaluationKeepsEveryPair) {
  write_tsv(path("static.tsv"), sample_pairs(50));
  auto config = small_config(path("static.tsv"), path("static.tsv"));
  for (auto* data : {&config->train_data, &config->validation_data}) {
    data->static_batch = true;
    data->max_seq_length = 16;
  }
  config->train_data.global_batch_size = 16 * 8;  // 8 pairs a batch
  config->validation_data.global_batch_size = 8;  // evaluation counts pairs
  TranslationTask task(config);
  auto train = task.build_inputs(config->train_data, {});
  for (int i = 0; i < 5; ++i) {
    const Batch batch = *train->next();
    EXPECT_EQ(batch.at("inputs").sizes(), (std::vector<int64_t>{8, 16}));
    EXPECT_EQ(batch.at("targets").sizes(), (std::vector<int64_t>{8, 16}));
  }
  const auto examples = eval_examples(task, config->validation_data);
  EXPECT_EQ(examples.size(), 50u);
}

TEST_F(TranslationTest, ValidationLogsReduceToBleuInUniqueIdOrder) {
  const auto pairs = sample_pairs(30);
  write_tsv(path("reduce.tsv"), pairs);
  auto config = small_config(path("reduce.tsv"), path("reduce.tsv"));
  TranslationTask task(config);
  const auto& tokenizer = task.tokenizer();
  // Outputs that decode to the reference, except pair 4 (a wrong sentence),
  // delivered in three batches in a scrambled order.
  std::vector<int64_t> order(pairs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  std::vector<std::string> hypotheses(pairs.size()), references;
  for (const auto& p : pairs) references.push_back(p.target);
  Logs state;
  for (std::size_t start = 0; start < order.size(); start += 10) {
    std::vector<int64_t> ids(order.begin() + static_cast<std::ptrdiff_t>(start),
                             order.begin() + static_cast<std::ptrdiff_t>(start + 10));
    std::vector<std::vector<int64_t>> outputs;
    for (int64_t id : ids) {
      const std::string text =
          id == 4 ? "Das ist falsch" : pairs[static_cast<std::size_t>(id)].target;
      hypotheses[static_cast<std::size_t>(id)] = tokenizer.decode(tokenizer.encode(text));
      outputs.push_back(tokenizer.encode(text));
    }
    task.aggregate_logs(state, {{"loss", 1.0},
                                {"translations", outputs},
                                {"unique_ids", std::vector<std::vector<int64_t>>{ids}}});
  }
  const Logs logs = task.reduce_aggregated_logs(state, 10);
  const double sacre = garden::nlp::corpus_bleu(hypotheses, {references}).score;
  const double mg = garden::nlp::model_garden_bleu(references, hypotheses);
  EXPECT_LT(sacre, 100.0);
  EXPECT_GT(sacre, 50.0);
  EXPECT_NEAR(garden::to_double(logs.at("sacrebleu_score")), sacre, 1e-9);
  EXPECT_NEAR(garden::to_double(logs.at("bleu_score")), mg, 1e-4);
  const auto& examples = std::get<std::vector<std::string>>(logs.at("translations"));
  ASSERT_EQ(examples.size(), 5u);
  EXPECT_NE(examples[0].find("input: " + pairs[0].source), std::string::npos);
}

TEST_F(TranslationTest, BeamOneIsGreedyAndABatchDecodesAsEachSentenceAlone) {
  auto model = seeded_model();
  auto& transformer = *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  const at::Tensor batch = three_sentences();
  garden::nlp::DecodeOptions options;
  options.beam_size = 3;
  options.decode_max_length = 8;
  const int64_t eos = 1;
  const auto together = garden::nlp::translate_ids(transformer, batch, eos, options);
  for (int64_t b = 0; b < batch.size(0); ++b) {
    const int64_t length = (batch[b] != 0).sum().item<int64_t>();
    const auto alone = garden::nlp::translate_ids(
        transformer, batch.slice(0, b, b + 1).slice(1, 0, length), eos, options);
    EXPECT_EQ(alone[0], together[static_cast<std::size_t>(b)]) << "sentence " << b;
  }
  // Beam 1: the argmax at every step, computed here by full recomputation.
  options.beam_size = 1;
  const auto greedy = garden::nlp::translate_ids(transformer, batch, eos, options);
  torch::NoGradGuard no_grad;
  for (int64_t b = 0; b < batch.size(0); ++b) {
    const int64_t length = (batch[b] != 0).sum().item<int64_t>();
    const at::Tensor source = batch.slice(0, b, b + 1).slice(1, 0, length);
    std::vector<int64_t> decoded = {0};
    std::vector<int64_t> expected;
    for (int step = 0; step < 8; ++step) {
      const at::Tensor logits = transformer.forward(source, torch::tensor(decoded).unsqueeze(0));
      const int64_t next = logits[0][-1].argmax().item<int64_t>();
      if (next == eos) break;
      expected.push_back(next);
      decoded.push_back(next);
    }
    EXPECT_EQ(greedy[static_cast<std::size_t>(b)], expected) << "sentence " << b;
  }
}

// Device-parameterized, as CTranslate2's tests are: every case runs on the
// CPU, and on CUDA when a GPU is present (skipped with a message otherwise).
// On a device, the model's weights decode to the ids the CPU decodes them
// to, greedy and beam; the search's state lives on that device.
class TranslationDeviceTest : public TranslationTest,
                              public ::testing::WithParamInterface<std::string> {};

TEST_P(TranslationDeviceTest, DecodesTheIdsTheCpuDecodes) {
  const c10::Device device(GetParam());
  if (const auto why = garden_test::unavailable(device); !why.empty()) GTEST_SKIP() << why;
  auto model = seeded_model();
  auto& transformer = *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  const at::Tensor batch = three_sentences();
  garden::nlp::DecodeOptions options;
  options.decode_max_length = 8;
  std::map<int64_t, std::vector<std::vector<int64_t>>> on_cpu;
  for (const int64_t beam : {1, 3}) {
    options.beam_size = beam;
    on_cpu[beam] = garden::nlp::translate_ids(transformer, batch, 1, options);
  }
  model->to(device);
  for (const int64_t beam : {1, 3}) {
    options.beam_size = beam;
    EXPECT_EQ(garden::nlp::translate_ids(transformer, batch.to(device), 1, options), on_cpu[beam])
        << "beam " << beam << " on " << device;
  }
}

// Four training steps of the small model (SGD with momentum, global-norm
// clipping at 1 as wmt_transformer's, no dropout) wait for nothing after
// the first on the device and end with the CPU's loss and weights.
TEST_P(TranslationDeviceTest, TrainsWithoutWaitingAndEndsWhereTheCpuEnds) {
  const c10::Device device(GetParam());
  if (const auto why = garden_test::unavailable(device); !why.empty()) GTEST_SKIP() << why;
  write_tsv(path("device_train.tsv"), sample_pairs(300));
  using Run = garden_test::DeviceRun;
  const auto train_on = [&](const c10::Device& where) {
    auto params = std::make_shared<garden::config::ExperimentConfig>();
    auto config = small_config(path("device_train.tsv"), path("device_train.tsv"));
    config->train_data.global_batch_size = 512;
    config->model.dropout_rate = 0.0;
    for (auto* stack : {&config->model.encoder, &config->model.decoder})
      stack->dropout_rate = stack->attention_dropout_rate = stack->intermediate_dropout = 0.0;
    params->task = config;
    auto& optimizer_config = params->trainer.optimizer_config;
    optimizer_config.optimizer.type = "sgd";
    optimizer_config.optimizer.sgd.momentum = 0.9;
    optimizer_config.optimizer.sgd.global_clipnorm = 1.0;
    optimizer_config.learning_rate.constant.learning_rate = 0.5;
    params->runtime.device = where.str();
    garden::config::validate_config(*params);
    garden::finalize_config(*params);
    return garden_test::train_loop_on(where, params, std::make_shared<TranslationTask>(config), 4,
                                      5);
  };
  const Run here = train_on(device), cpu = train_on(c10::Device("cpu"));
  const double loss = garden::to_double(cpu.logs.at("training_loss"));
  EXPECT_NEAR(garden::to_double(here.logs.at("training_loss")), loss, 1e-4 * loss);
  ASSERT_EQ(here.weights.size(), cpu.weights.size());
  for (const auto& [name, tensor] : cpu.weights)
    EXPECT_TRUE(torch::allclose(here.weights.at(name), tensor, 1e-4, 1e-5))
        << name << " on " << device << " differs by "
        << (here.weights.at(name) - tensor).abs().max().item<double>();
}

INSTANTIATE_TEST_SUITE_P(Devices, TranslationDeviceTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Dropout, a shuffle buffer and length buckets: a run stopped at 20 steps and
// resumed to 40 ends bitwise equal to one that ran 40 steps straight.
TEST_F(TranslationTest, AResumedRunEndsBitwiseEqualToAnUninterruptedOne) {
  garden::register_builtins();
  write_tsv(path("resume.tsv"), sample_pairs(200));
  auto run = [&](const std::string& model_dir, int64_t steps) {
    auto params = std::make_shared<garden::config::ExperimentConfig>();
    auto task = small_config(path("resume.tsv"), path("resume.tsv"));
    task->model.dropout_rate = 0.1;
    task->train_data.shuffle_buffer_size = 50;
    params->task = task;
    params->trainer.train_steps = steps;
    params->trainer.steps_per_loop = 10;
    params->trainer.summary_interval = 10;
    params->trainer.checkpoint_interval = 20;
    params->trainer.optimizer_config.optimizer.type = "adam";
    params->trainer.optimizer_config.learning_rate.constant.learning_rate = 0.001;
    params->runtime.seed = 5;
    params->runtime.intra_op_parallelism_threads = 1;
    garden::config::validate_config(*params);
    garden::finalize_config(*params);
    garden::RunOptions options;
    options.mode = "train";
    options.model_dir = path(model_dir);
    garden::run_experiment(params, options);
  };
  run("straight", 40);
  run("resumed", 20);
  ASSERT_FALSE(fs::exists(path("resumed/ckpt-40")));
  run("resumed", 40);
  const auto a = garden::read_checkpoint_file(path("straight/ckpt-40"));
  const auto b = garden::read_checkpoint_file(path("resumed/ckpt-40"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, tensor] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, b.tensors.at(name))) << name << " differs";
  }
  EXPECT_EQ(a.meta.at("train_data"), b.meta.at("train_data"));
}

// Issue 5: a tiny model overfits a handful of bundled pairs to BLEU > 90
// within seconds, through the whole run (tokenizer training, pipeline,
// trainer, validation with beam search).
TEST_F(TranslationTest, TinyModelOverfitsAHandfulOfPairs) {
  garden::register_builtins();
  write_tsv(path("handful.tsv"), sample_pairs(16));
  auto params = std::make_shared<garden::config::ExperimentConfig>();
  auto task = small_config(path("handful.tsv"), path("handful.tsv"));
  task->sentencepiece_model_path = "";
  task->sentencepiece_vocab_size = 100;
  task->model.embedding_width = 64;
  task->model.dropout_rate = 0.0;
  task->model.label_smoothing = 0.0;
  // German runs longer than English: room beyond the input's length.
  task->model.extra_decode_length = 10;
  for (auto* stack : {&task->model.encoder, &task->model.decoder}) {
    stack->intermediate_size = 128;
    stack->dropout_rate = stack->attention_dropout_rate = stack->intermediate_dropout = 0.0;
  }
  task->train_data.global_batch_size = 512;
  task->train_data.shuffle_buffer_size = 16;
  task->validation_data.global_batch_size = 512;
  params->task = task;
  auto& trainer = params->trainer;
  trainer.train_steps = 400;
  trainer.steps_per_loop = 100;
  trainer.summary_interval = 100;
  trainer.checkpoint_interval = 400;
  trainer.validation_interval = 400;
  auto& opt = trainer.optimizer_config;
  opt.optimizer.type = "adam";
  opt.learning_rate.type = "polynomial";
  opt.learning_rate.polynomial.initial_learning_rate = 0.005;
  opt.learning_rate.polynomial.decay_steps = 400;
  opt.learning_rate.polynomial.end_learning_rate = 0.0001;
  params->runtime.seed = 1;
  params->runtime.intra_op_parallelism_threads = 1;
  garden::config::validate_config(*params);
  garden::finalize_config(*params);
  garden::RunOptions options;
  options.model_dir = path("overfit");
  const Logs logs = garden::run_experiment(params, options);
  EXPECT_GT(garden::to_double(logs.at("sacrebleu_score")), 90.0);
  EXPECT_GT(garden::to_double(logs.at("bleu_score")), 90.0);
  EXPECT_TRUE(fs::exists(path("overfit/sentencepiece.model")));
}

// Evaluation references reach BLEU and the summaries (JSON, UTF-8 only): a
// pair that is not UTF-8 fails when the task builds its inputs, before the
// first step, naming the file, the line and the side, in every format.
TEST_F(TranslationTest, EvaluationTextThatIsNotUtf8FailsAtStartNamingFileAndLine) {
  // Line 2's target is Latin-1 ("Öffnen" with 0xD6).
  std::ofstream(path("latin1.tsv"), std::ios::binary)
      << "Open\tÖffnen\nOpen\t" << '\xD6' << "ffnen\n";
  auto tsv = small_config(path("latin1.tsv"), path("latin1.tsv"));
  TranslationTask tsv_task(tsv);
  try {
    tsv_task.build_inputs(tsv->validation_data, {});
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "TSV file '" + path("latin1.tsv") +
                                         "' line 2, column 2 (target): invalid UTF-8 byte 0xD6 "
                                         "at offset 0");
  }

  {
    std::ofstream en(path("latin1.en"), std::ios::binary), de(path("latin1.de"), std::ios::binary);
    en << "Open\nOpen\nClose\n";
    de << "Öffnen\nÖffnen\nSchlie" << '\xDF' << "en\n";
  }
  auto aligned = small_config(path("latin1.tsv"), path("latin1.en"));
  aligned->validation_data.file_type = "aligned";
  {
    garden::data::TFRecordWriter writer(path("latin1.tfrecord"));
    writer.write(garden::data::serialize_example(
        {{"en", garden::data::FeatureValue::of_bytes({"Clos\xE9"})},
         {"de", garden::data::FeatureValue::of_bytes({"Schließen"})}}));
  }
  auto tfrecord = small_config(path("latin1.tsv"), path("latin1.tfrecord"));
  tfrecord->validation_data.file_type = "tfrecord";
  for (auto* config : {aligned.get(), tfrecord.get()}) {
    config->validation_data.src_lang = "en";
    config->validation_data.tgt_lang = "de";
  }
  TranslationTask aligned_task(aligned), tfrecord_task(tfrecord);
  try {
    aligned_task.build_inputs(aligned->validation_data, {});
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "file '" + path("latin1.de") + "' line 3: invalid UTF-8 byte 0xDF at offset 6");
  }
  try {
    tfrecord_task.build_inputs(tfrecord->validation_data, {});
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "TFRecord file '" + path("latin1.tfrecord") +
                                         "', record 0, feature 'en': invalid UTF-8 byte 0xE9 at "
                                         "offset 4");
  }
}

// The whole run: train_and_eval with a Latin-1 reference stops before the
// first step (it used to train to the first evaluation, then fail in the JSON
// library without naming a file), and training text that is not UTF-8 stops
// the SentencePiece training that reads it, naming the line.
TEST_F(TranslationTest, ARunWithTextThatIsNotUtf8FailsBeforeTheFirstStep) {
  garden::register_builtins();
  auto pairs = sample_pairs(30);
  write_tsv(path("run_train.tsv"), pairs);
  pairs[4].target = std::string("Schlie") + '\xDF' + "en";
  write_tsv(path("run_valid.tsv"), pairs);
  auto run = [&](const std::string& train, const std::string& model_dir) {
    auto params = std::make_shared<garden::config::ExperimentConfig>();
    auto task = small_config(path(train), path("run_valid.tsv"));
    task->sentencepiece_model_path = "";
    task->sentencepiece_vocab_size = 100;
    params->task = task;
    params->trainer.train_steps = 4;
    params->trainer.steps_per_loop = 2;
    params->trainer.checkpoint_interval = 2;
    params->trainer.validation_interval = 2;
    params->trainer.optimizer_config.optimizer.type = "adam";
    params->trainer.optimizer_config.learning_rate.constant.learning_rate = 0.001;
    params->runtime.seed = 1;
    garden::config::validate_config(*params);
    garden::finalize_config(*params);
    garden::RunOptions options;
    options.mode = "train_and_eval";
    options.model_dir = path(model_dir);
    garden::run_experiment(params, options);
  };
  try {
    run("run_train.tsv", "latin1_reference");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "TSV file '" + path("run_valid.tsv") +
                                         "' line 5, column 2 (target): invalid UTF-8 byte 0xDF "
                                         "at offset 6");
  }
  EXPECT_FALSE(fs::exists(path("latin1_reference/ckpt-2"))) << "it trained first";

  try {
    run("run_valid.tsv", "latin1_training");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TSV file '" + path("run_valid.tsv") +
                                         "' line 5, column 2 (target): invalid UTF-8 byte 0xDF"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path("latin1_training/sentencepiece.model")));
}

// An evaluation set without a single pair used to evaluate to a loss of 0;
// it is an error naming the data when the task builds its inputs.
TEST_F(TranslationTest, AnEmptyEvaluationSetIsAnErrorNamingIt) {
  std::ofstream(path("empty.tsv"));
  std::ofstream(path("empty.en")), std::ofstream(path("empty.de"));
  { garden::data::TFRecordWriter writer(path("empty.tfrecord")); }
  auto tsv = small_config(path("empty.tsv"), path("empty.tsv"));
  auto aligned = small_config(path("empty.tsv"), path("empty.en"));
  aligned->validation_data.file_type = "aligned";
  auto tfrecord = small_config(path("empty.tsv"), path("empty.tfrecord"));
  tfrecord->validation_data.file_type = "tfrecord";
  for (auto* config : {aligned.get(), tfrecord.get()}) {
    config->validation_data.src_lang = "en";
    config->validation_data.tgt_lang = "de";
  }
  for (const auto& config : {tsv, aligned, tfrecord}) {
    TranslationTask task(config);
    const std::string file = config->validation_data.input_path;
    try {
      task.build_inputs(config->validation_data, {});
      FAIL() << "expected an error for " << file;
    } catch (const garden::Error& e) {
      EXPECT_EQ(std::string(e.what()), "the evaluation data '" + file +
                                           "' holds no sentence pair: there is nothing to "
                                           "evaluate on");
    }
  }
}

// Issue: `garden translate --batch_size` changed translations, because the
// decode limit was the batch's padded length plus extra_decode_length. Each
// sentence's limit is now its own length plus extra_decode_length.
TEST_F(TranslationTest, ASentenceTranslatesTheSameInAnyBatchWithinItsOwnLimit) {
  auto config = small_config(path("unused.tsv"), path("unused.tsv"));
  TranslationTask task(config);
  torch::manual_seed(3);
  auto model = task.build_model();
  model->eval();
  auto& transformer = *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  const int64_t eos = 1;
  // Lengths 9, 2, 5 and 1 (EOS included), padded with 0.
  const at::Tensor batch = torch::tensor({{5, 6, 7, 8, 9, 10, 11, 12, 1},
                                          {13, 1, 0, 0, 0, 0, 0, 0, 0},
                                          {14, 15, 16, 17, 1, 0, 0, 0, 0},
                                          {1, 0, 0, 0, 0, 0, 0, 0, 0}});
  garden::nlp::DecodeOptions options;
  options.extra_decode_length = 3;
  for (const int64_t beam : {1, 4}) {
    options.beam_size = beam;
    const auto together = garden::nlp::translate_ids(transformer, batch, eos, options);
    ASSERT_EQ(together.size(), 4u);
    int64_t at_limit = 0;
    for (int64_t b = 0; b < batch.size(0); ++b) {
      const int64_t length = (batch[b] != 0).sum().item<int64_t>();
      const auto& row = together[static_cast<std::size_t>(b)];
      // At most its own limit (EOS, when there is one, is not returned).
      EXPECT_LE(static_cast<int64_t>(row.size()), length + options.extra_decode_length)
          << "beam " << beam << " sentence " << b;
      at_limit += static_cast<int64_t>(row.size()) == length + options.extra_decode_length;
      const auto alone = garden::nlp::translate_ids(
          transformer, batch.slice(0, b, b + 1).slice(1, 0, length), eos, options);
      EXPECT_EQ(alone[0], row) << "beam " << beam << " sentence " << b;
    }
    // The untrained model rarely ends a sentence: most stop at their limit.
    EXPECT_GE(at_limit, 2) << "beam " << beam;
  }
}

// Model Garden's keys: model.dropout_rate is the embeddings' dropout,
// model.encoder/decoder.dropout_rate the blocks'.
TEST_F(TranslationTest, ModelDropoutIsTheEmbeddingsAndEncoderDropoutTheBlocks) {
  auto config = small_config(path("unused.tsv"), path("unused.tsv"));
  config->model.dropout_rate = 0.0;
  for (auto* stack : {&config->model.encoder, &config->model.decoder}) {
    stack->dropout_rate = 0.3;
    stack->attention_dropout_rate = stack->intermediate_dropout = 0.0;
  }
  TranslationTask task(config);
  auto model = task.build_model();
  auto& transformer = *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  EXPECT_EQ(transformer.options().dropout_rate, 0.3);
  EXPECT_EQ(transformer.options().embedding_dropout_rate, 0.0);
  // The blocks drop (training differs from evaluation) though model.dropout_rate is 0.
  const at::Tensor source = torch::tensor({{5, 6, 7, 1}});
  torch::NoGradGuard no_grad;
  model->eval();
  const at::Tensor evaluated = transformer.encode(source).outputs;
  model->train();
  EXPECT_FALSE(torch::allclose(transformer.encode(source).outputs, evaluated));
  // And the embeddings alone drop at model.dropout_rate: with no block, the
  // encoder output is the (normalized) embeddings.
  config->model.dropout_rate = 0.3;
  config->model.encoder.num_layers = 0;
  for (auto* stack : {&config->model.encoder, &config->model.decoder}) stack->dropout_rate = 0.0;
  auto embeddings_only = task.build_model();
  auto& shallow = *embeddings_only->as<garden::nlp::Seq2SeqTransformerImpl>();
  EXPECT_EQ(shallow.options().dropout_rate, 0.0);
  EXPECT_EQ(shallow.options().embedding_dropout_rate, 0.3);
  embeddings_only->eval();
  const at::Tensor plain = shallow.encode(source).outputs;
  embeddings_only->train();
  EXPECT_FALSE(torch::allclose(shallow.encode(source).outputs, plain));
}

}  // namespace
