// Training the translation task: on every device as on the CPU, resumed
// bitwise, overfitting a handful of pairs, the errors of text that is not
// UTF-8 or an empty evaluation set, batching limits and dropout's places.
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
