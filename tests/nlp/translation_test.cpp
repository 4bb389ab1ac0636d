// The translation task: its data in three formats, length filtering, the
// tokenizer it trains, the teacher-forced inputs, validation's aggregation
// into BLEU, and decoding a batch as each sentence alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
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
#include "garden/kernels/dropout.h"
#include "garden/kernels/losses.h"
#include "garden/nlp/metrics/bleu.h"
#include "garden/nlp/tasks/translation_task.h"

#include "nlp/translation_fixture.h"

namespace {

using namespace translation_fixture;  // NOLINT
namespace fs = std::filesystem;
using garden::Batch;
using garden::Logs;
using garden::nlp::TranslationConfig;
using garden::nlp::TranslationTask;

// Greedy decoding of sentence b of a padded batch by full forward passes
// (no cache): at every step the argmax over the tokens that `refused` does
// not refuse as the next one (none refused when it is empty), until EOS or
// `steps` tokens.
std::vector<int64_t> greedy_by_forward(
    garden::nlp::Seq2SeqTransformerImpl& transformer, const at::Tensor& batch, int64_t b,
    int64_t eos, int steps, const std::function<bool(const std::vector<int64_t>&)>& refused = {}) {
  torch::NoGradGuard no_grad;
  const int64_t length = (batch[b] != 0).sum().item<int64_t>();
  const at::Tensor source = batch.slice(0, b, b + 1).slice(1, 0, length);
  std::vector<int64_t> decoded = {0};
  std::vector<int64_t> tokens;
  for (int step = 0; step < steps; ++step) {
    const at::Tensor row = transformer.forward(source, torch::tensor(decoded).unsqueeze(0))[0][-1];
    int64_t next = -1;
    for (int64_t t = 0; t < row.size(0); ++t) {
      std::vector<int64_t> extended = tokens;
      extended.push_back(t);
      if (refused && refused(extended)) continue;
      if (next < 0 || row[t].item<float>() > row[next].item<float>()) next = t;
    }
    if (next == eos) break;
    tokens.push_back(next);
    decoded.push_back(next);
  }
  return tokens;
}

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
  for (int64_t b = 0; b < batch.size(0); ++b)
    EXPECT_EQ(greedy[static_cast<std::size_t>(b)], greedy_by_forward(transformer, batch, b, eos, 8))
        << "sentence " << b;
}

// task.model.no_repeat_ngram_size reaches the decoder: greedy outputs are
// the argmax over the tokens that repeat no bigram, recomputed here by full
// forward passes, and no beam output repeats a bigram.
TEST_F(TranslationTest, NoRepeatNgramSizeKeepsEveryOutputFreeOfRepeats) {
  auto config = small_config(path("unused.tsv"), path("unused.tsv"));
  config->model.no_repeat_ngram_size = 2;
  config->model.decode_max_length = 12;
  auto experiment = std::make_shared<garden::config::ExperimentConfig>();
  experiment->task = config;
  garden::config::validate_config(*experiment);
  garden::nlp::DecodeOptions options = TranslationTask(config).decode_options();
  ASSERT_EQ(options.no_repeat_ngram_size, 2);
  auto model = seeded_model();
  auto& transformer = *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  const at::Tensor batch = three_sentences();
  const int64_t eos = 1;
  const auto repeats = [](const std::vector<int64_t>& tokens) {
    std::set<std::pair<int64_t, int64_t>> seen;
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i)
      if (!seen.insert({tokens[i], tokens[i + 1]}).second) return true;
    return false;
  };
  // Without the option the untrained model repeats itself.
  garden::nlp::DecodeOptions plain = options;
  plain.no_repeat_ngram_size = 0;
  plain.beam_size = 1;
  int repeating = 0;
  for (const auto& output : garden::nlp::translate_ids(transformer, batch, eos, plain))
    repeating += repeats(output) ? 1 : 0;
  EXPECT_GT(repeating, 0);

  options.beam_size = 1;
  const auto greedy = garden::nlp::translate_ids(transformer, batch, eos, options);
  options.beam_size = 3;
  const auto beam = garden::nlp::translate_ids(transformer, batch, eos, options);
  for (int64_t b = 0; b < batch.size(0); ++b) {
    EXPECT_EQ(greedy[static_cast<std::size_t>(b)],
              greedy_by_forward(transformer, batch, b, eos, 12, repeats))
        << "sentence " << b;
    EXPECT_FALSE(repeats(beam[static_cast<std::size_t>(b)])) << "sentence " << b;
  }

  config->model.no_repeat_ngram_size = -1;
  EXPECT_THROW(garden::config::validate_config(*experiment), garden::config::ConfigError);
}

// Device-parameterized, as CTranslate2's tests are: every case runs on the
// CPU, and on CUDA when a GPU is present (skipped with a message otherwise).
// On a device, the model's weights decode to the ids the CPU decodes them
// to, greedy and beam; the search's state lives on that device.
}  // namespace
