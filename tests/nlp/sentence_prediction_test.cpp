// Sentence prediction end to end: GLUE layouts read, create_finetuning_data's
// records read back by the tests' own reader, the loader's batches, a tiny
// model that learns a separable set, its export served with raw text, an
// ELECTRA discriminator restored as its encoder, and the evaluation metrics.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/init_checkpoint_config.h"
#include "garden/core/runtime.h"
#include "garden/core/serving_module.h"
#include "garden/core/train_lib.h"
#include "garden/nlp/data/classifier_data.h"
#include "garden/nlp/data/sentence_prediction_data.h"
#include "garden/nlp/modeling/bert_classifier.h"
#include "garden/nlp/modeling/electra_pretrainer.h"
#include "garden/nlp/tasks/sentence_prediction_task.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "reference_formats.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
namespace ref = garden_test::reference;
using garden::nlp::ClassifierExample;
using garden::nlp::FinetuningTokenizer;
using json = nlohmann::json;

// `expr` throws a garden::Error whose message holds `text`.
#define EXPECT_THROW_MSG(expr, type, text)                                     \
  do {                                                                         \
    const std::string message_ = garden_test::error_of([&] { (void)(expr); }); \
    EXPECT_NE(message_.find(text), std::string::npos) << message_;             \
  } while (0)

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the words from 5.
const std::vector<std::string> kClassifierVocab = {
    "[PAD]",   "[UNK]", "[CLS]", "[SEP]", "[MASK]",  "the",   "a",
    "message", "about", "alpha", "bravo", "charlie", "delta", "echo",
    "foxtrot", "golf",  "hotel", "##s",   "today",   "is",    "."};
constexpr int64_t kThe = 5, kA = 6, kMessage = 7, kAbout = 8, kAlpha = 9, kBravo = 10, kEcho = 13,
                  kToday = 18, kS = 17;

// A separable set in SST-2's layout: class 1 sentences name a word of
// {alpha, bravo, charlie, delta}, class 0 one of {echo, foxtrot, golf,
// hotel}, among shared filler words.
std::string separable_tsv(int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::string> ones = {"alpha", "bravo", "charlie", "delta"};
  const std::vector<std::string> zeros = {"echo", "foxtrot", "golf", "hotel"};
  const std::vector<std::string> filler = {"the", "a", "message", "about", "today", "is"};
  std::string out = "sentence\tlabel\n";
  for (int i = 0; i < rows; ++i) {
    const int label = static_cast<int>(rng() % 2);
    std::string sentence;
    const int length = 3 + static_cast<int>(rng() % 4);
    const int keyword = static_cast<int>(rng() % length);
    for (int w = 0; w < length; ++w) {
      if (!sentence.empty()) sentence += ' ';
      sentence += w == keyword ? (label ? ones : zeros)[rng() % 4] : filler[rng() % filler.size()];
    }
    out += sentence + "\t" + std::to_string(label) + "\n";
  }
  return out;
}

class SentencePredictionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    garden::register_builtins();
    dir_ = fs::temp_directory_path() / ("sentence_prediction_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "glue");
    std::string vocab;
    for (const auto& token : kClassifierVocab) vocab += token + "\n";
    vocab_ = garden_test::write_text_file(dir_ / "vocab.txt", vocab);
    garden_test::write_text_file(dir_ / "glue" / "train.tsv", separable_tsv(384, 1));
    garden_test::write_text_file(dir_ / "glue" / "dev.tsv", separable_tsv(96, 2));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static garden::nlp::FinetuningDataOptions data_options() {
    garden::nlp::FinetuningDataOptions o;
    o.classification_task_name = "SST-2";
    o.input_data_dir = (dir_ / "glue").string();
    o.train_data_output_path = (dir_ / "train.tfrecord").string();
    o.eval_data_output_path = (dir_ / "eval.tfrecord").string();
    o.meta_data_file_path = (dir_ / "meta.json").string();
    o.vocab_file = vocab_;
    o.max_seq_length = 16;
    return o;
  }

  // bert/sentence_prediction_tiny shrunk to this vocabulary, on the records
  // create_finetuning_data wrote.
  static std::shared_ptr<garden::config::ExperimentConfig> tiny_experiment(int64_t steps) {
    garden::nlp::create_finetuning_data(data_options());
    auto experiment = garden::config::get_experiment_config("bert/sentence_prediction_tiny");
    garden::config::apply_override(
        *experiment,
        "task.model.encoder.bert.vocab_size=21,task.model.encoder.bert.hidden_size=32,"
        "task.model.encoder.bert.num_layers=2,task.model.encoder.bert.intermediate_size=64,"
        "task.model.encoder.bert.embedding_size=32,task.model.encoder.bert.max_position_embeddings="
        "16,"
        "task.train_data.seq_length=16,task.validation_data.seq_length=16,"
        "task.train_data.tokenization=WordPiece,task.train_data.lower_case=true,"
        "task.validation_data.tokenization=WordPiece,task.validation_data.lower_case=true,"
        "task.class_names=[zero,one],trainer.optimizer_config.learning_rate.polynomial."
        "initial_learning_rate=0.001,runtime.seed=7");
    auto& task = static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task);
    task.train_data.input_path = (dir_ / "train.tfrecord").string();
    task.validation_data.input_path = (dir_ / "eval.tfrecord").string();
    task.train_data.vocab_file = vocab_;
    auto& trainer = experiment->trainer;
    trainer.train_steps = steps;
    trainer.steps_per_loop = steps;
    trainer.summary_interval = steps;
    trainer.checkpoint_interval = steps;
    trainer.validation_interval = steps;
    trainer.optimizer_config.learning_rate.polynomial.decay_steps = steps;
    garden::config::validate_config(*experiment);
    garden::finalize_config(*experiment);
    return experiment;
  }

  static void learn_and_serve(const std::string& pooling);

  static std::shared_ptr<const FinetuningTokenizer> wordpiece() {
    return FinetuningTokenizer::open(FinetuningTokenizer::Kind::kWordPiece, vocab_, true, "vocab");
  }

  static fs::path dir_;
  static std::string vocab_;
};
fs::path SentencePredictionTest::dir_;
std::string SentencePredictionTest::vocab_;

TEST_F(SentencePredictionTest, GlueLayoutsAreReadAsModelGardenReadsThem) {
  using garden::nlp::classifier_processor;
  using garden::nlp::read_classifier_examples;
  // SST-2: a header, sentence then label.
  auto sst = read_classifier_examples(
      classifier_processor("sst-2"),
      garden_test::write_text_file(dir_ / "sst.tsv", "sentence\tlabel\nit is good\t1\nbad .\t0\n"));
  ASSERT_EQ(sst.size(), 2u);
  EXPECT_EQ(sst[0].text_a, "it is good");
  EXPECT_FALSE(sst[0].text_b);
  EXPECT_EQ(sst[1].label, "0");
  // CoLA: no header; the label in column 2, the sentence in column 4.
  auto cola = read_classifier_examples(
      classifier_processor("CoLA"),
      garden_test::write_text_file(dir_ / "cola.tsv", "gj04\t1\t\tOur friends won't.\n"));
  ASSERT_EQ(cola.size(), 1u);
  EXPECT_EQ(cola[0].text_a, "Our friends won't.");
  EXPECT_EQ(cola[0].label, "1");
  // MRPC: the label first, the pair in columns 4 and 5.
  auto mrpc = read_classifier_examples(
      classifier_processor("MRPC"),
      garden_test::write_text_file(
          dir_ / "mrpc.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tone\ttwo\n"));
  ASSERT_EQ(mrpc.size(), 1u);
  EXPECT_EQ(mrpc[0].text_a, "one");
  EXPECT_EQ(*mrpc[0].text_b, "two");
  EXPECT_EQ(mrpc[0].label, "1");
  // RTE: named labels, last.
  auto rte = read_classifier_examples(
      classifier_processor("RTE"),
      garden_test::write_text_file(dir_ / "rte.tsv",
                                   "index\ts1\ts2\tlabel\n0\tA man.\tA person.\tentailment\n"));
  EXPECT_EQ(rte.at(0).label, "entailment");
  // STS-B: a number, last; regression.
  EXPECT_TRUE(classifier_processor("STS-B").regression());
  auto sts = read_classifier_examples(
      classifier_processor("STS-B"),
      garden_test::write_text_file(
          dir_ / "sts.tsv", "h\th\th\th\th\th\th\th\th\th\n0\t1\t2\t3\t4\t5\t6\tx y\tz\t3.8\n"));
  EXPECT_EQ(sts.at(0).text_a, "x y");
  EXPECT_EQ(sts.at(0).label, "3.8");
  // QQP skips lines with too few columns, as Model Garden's processor does.
  auto qqp = read_classifier_examples(
      classifier_processor("QQP"),
      garden_test::write_text_file(dir_ / "qqp.tsv",
                                   "id\tq1\tq2\tquestion1\tquestion2\tis_duplicate\nbroken line\n"
                                   "1\t2\t3\tWhy?\tHow?\t0\n"));
  EXPECT_EQ(qqp.size(), 1u);
}

TEST_F(SentencePredictionTest, BadInputNamesTheFileLineAndColumn) {
  using garden::nlp::classifier_processor;
  using garden::nlp::read_classifier_examples;
  const auto sst = classifier_processor("SST-2");
  const std::string short_line =
      garden_test::write_text_file(dir_ / "short.tsv", "sentence\tlabel\nok\t1\nno label\n");
  EXPECT_THROW_MSG(read_classifier_examples(sst, short_line), garden::Error,
                   short_line + ":3: 1 tab-separated column(s); SST-2 needs at least 2");
  const std::string bad_label =
      garden_test::write_text_file(dir_ / "label.tsv", "sentence\tlabel\nok\tyes\n");
  EXPECT_THROW_MSG(read_classifier_examples(sst, bad_label), garden::Error,
                   bad_label + ":2, column 2: label 'yes' is not one of 0, 1");
  const std::string bad_number = garden_test::write_text_file(
      dir_ / "number.tsv", "h\th\th\th\th\th\th\th\th\th\n0\t1\t2\t3\t4\t5\t6\ta\tb\tfour\n");
  EXPECT_THROW_MSG(read_classifier_examples(classifier_processor("STS-B"), bad_number),
                   garden::Error, ":2, column 10: label 'four' is not a number");
  const std::string bad_utf8 =
      garden_test::write_text_file(dir_ / "utf8.tsv", "sentence\tlabel\nab\xff\t1\n");
  EXPECT_THROW_MSG(read_classifier_examples(sst, bad_utf8), garden::Error, bad_utf8 + ":2: ");
  EXPECT_THROW_MSG(classifier_processor("GLUEY"), garden::Error,
                   "--classification_task_name 'GLUEY' is not one of COLA, SST-2");
  EXPECT_THROW_MSG(read_classifier_examples(sst, (dir_ / "absent.tsv").string()), garden::Error,
                   "absent.tsv");
}

TEST_F(SentencePredictionTest, InputsAreEncodedAsModelGardenEncodesThem) {
  const auto tokenizer = wordpiece();
  // One sentence: [CLS] tokens [SEP], types 0, padded; lower-cased.
  auto single = garden::nlp::encode_classifier_input(*tokenizer, "The Messages", std::nullopt, 8);
  EXPECT_EQ(single.input_ids, (std::vector<int64_t>{2, kThe, kMessage, kS, 3, 0, 0, 0}));
  EXPECT_EQ(single.input_mask, (std::vector<int64_t>{1, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(single.segment_ids, std::vector<int64_t>(8, 0));
  // A pair of 5 + 2 tokens in 8: room for 5, so the longer side loses two
  // from its end: [CLS] the message about [SEP] alpha bravo [SEP].
  auto pair = garden::nlp::encode_classifier_input(*tokenizer, "the message about a today",
                                                   std::string("alpha bravo"), 8);
  EXPECT_EQ(pair.input_ids,
            (std::vector<int64_t>{2, kThe, kMessage, kAbout, 3, kAlpha, kBravo, 3}));
  EXPECT_EQ(pair.segment_ids, (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(pair.input_mask, std::vector<int64_t>(8, 1));
  // Equal lengths lose from the second side first (Model Garden pops b
  // when a is not longer).
  auto even =
      garden::nlp::encode_classifier_input(*tokenizer, "alpha bravo", std::string("echo a"), 6);
  EXPECT_EQ(even.input_ids, (std::vector<int64_t>{2, kAlpha, kBravo, 3, kEcho, 3}));
  // A single text is cut to max_seq_length - 2.
  auto cut =
      garden::nlp::encode_classifier_input(*tokenizer, "the a message about", std::nullopt, 4);
  EXPECT_EQ(cut.input_ids, (std::vector<int64_t>{2, kThe, kA, 3}));
  // A tokenizer without [SEP] is refused naming the file.
  const std::string no_sep =
      garden_test::write_text_file(dir_ / "no_sep.txt", "[PAD]\n[UNK]\n[CLS]\nthe\n");
  EXPECT_THROW_MSG(FinetuningTokenizer::open(FinetuningTokenizer::Kind::kWordPiece, no_sep, true,
                                             "--vocab_file"),
                   garden::Error, "--vocab_file '" + no_sep + "' has no piece [SEP]");
}

TEST_F(SentencePredictionTest, RecordsReadBackByAnIndependentReaderHoldTheTokenizedRows) {
  const auto options = data_options();
  const auto report = garden::nlp::create_finetuning_data(options);
  EXPECT_EQ(report.train_examples, 384);
  EXPECT_EQ(report.eval_examples, 96);
  const json meta = json::parse(read_file(options.meta_data_file_path));
  EXPECT_EQ(meta.at("task_type"), "bert_classification");
  EXPECT_EQ(meta.at("processor_type"), "SST-2");
  EXPECT_EQ(meta.at("num_labels"), 2);
  EXPECT_EQ(meta.at("train_data_size"), 384);
  EXPECT_EQ(meta.at("eval_data_size"), 96);
  EXPECT_EQ(meta.at("max_seq_length"), 16);

  const auto examples = garden::nlp::read_classifier_examples(
      garden::nlp::classifier_processor("SST-2"), options.input_data_dir + "/train.tsv");
  const auto records = ref::read_records(options.train_data_output_path);
  ASSERT_EQ(records.size(), examples.size());
  const auto tokenizer = wordpiece();
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto features = ref::ref_parse_example(records[i]);
    ASSERT_EQ(features.size(), 5u);
    for (const char* name :
         {"input_ids", "input_mask", "segment_ids", "label_ids", "is_real_example"})
      ASSERT_EQ(features[name].kind, ref::kInt64ListField) << name;
    const auto expected =
        garden::nlp::encode_classifier_input(*tokenizer, examples[i].text_a, std::nullopt, 16);
    EXPECT_EQ(features["input_ids"].ints, expected.input_ids) << i;
    EXPECT_EQ(features["input_mask"].ints, expected.input_mask) << i;
    EXPECT_EQ(features["segment_ids"].ints, std::vector<int64_t>(16, 0)) << i;
    EXPECT_EQ(features["label_ids"].ints, std::vector<int64_t>{std::stoll(examples[i].label)});
    EXPECT_EQ(features["is_real_example"].ints, std::vector<int64_t>{1});
  }
  // The first record by hand: its text, word by word, from the vocabulary.
  std::vector<int64_t> first{2};
  std::istringstream words(examples[0].text_a);
  for (std::string word; words >> word;)
    first.push_back(std::find(kClassifierVocab.begin(), kClassifierVocab.end(), word) -
                    kClassifierVocab.begin());
  first.push_back(3);
  first.resize(16, 0);
  EXPECT_EQ(ref::ref_parse_example(records[0])["input_ids"].ints, first);

  // Regression data carries float labels.
  garden_test::write_text_file(dir_ / "glue" / "sts_train.tsv", "");
  fs::create_directories(dir_ / "sts");
  garden_test::write_text_file(
      dir_ / "sts" / "train.tsv",
      "h\th\th\th\th\th\th\th\th\th\n0\t1\t2\t3\t4\t5\t6\talpha\tbravo\t3.5\n");
  auto sts = options;
  sts.fine_tuning_task_type = "regression";
  sts.classification_task_name = "STS-B";
  sts.input_data_dir = (dir_ / "sts").string();
  sts.eval_data_output_path.clear();
  sts.train_data_output_path = (dir_ / "sts.tfrecord").string();
  sts.meta_data_file_path = (dir_ / "sts_meta.json").string();
  garden::nlp::create_finetuning_data(sts);
  auto sts_record = ref::ref_parse_example(ref::read_records(sts.train_data_output_path).at(0));
  EXPECT_EQ(sts_record["label_ids"].kind, ref::kFloatListField);
  EXPECT_EQ(sts_record["label_ids"].floats, std::vector<float>{3.5f});
  EXPECT_EQ(sts_record["segment_ids"].ints[3], 1);  // [CLS] alpha [SEP] bravo
  EXPECT_EQ(json::parse(read_file(sts.meta_data_file_path)).at("label_type"), "float");
}

TEST_F(SentencePredictionTest, BadFlagsAndBadRowsLeaveNoOutput) {
  auto options = data_options();
  options.train_data_output_path = (dir_ / "refused.tfrecord").string();
  options.meta_data_file_path = (dir_ / "refused.json").string();
  auto refused = [&](garden::nlp::FinetuningDataOptions o, const std::string& message) {
    EXPECT_THROW_MSG(garden::nlp::create_finetuning_data(o), garden::Error, message);
    EXPECT_FALSE(fs::exists(o.train_data_output_path));
    EXPECT_FALSE(fs::exists(o.meta_data_file_path));
  };
  auto o = options;
  o.fine_tuning_task_type = "retrieval";
  refused(o, "--fine_tuning_task_type=retrieval is not implemented yet");
  o = options;
  o.classification_task_name = "STS-B";
  refused(o, "--classification_task_name=STS-B is a regression task");
  o = options;
  o.sp_model_file = "x.model";
  refused(o, "give only one of --vocab_file and --sp_model_file");
  o = options;
  o.vocab_file = (dir_ / "absent.txt").string();
  refused(o, "--vocab_file");
  // A bad row in dev.tsv: nothing is written, not even the training file.
  fs::create_directories(dir_ / "bad_dev");
  garden_test::write_text_file(dir_ / "bad_dev" / "train.tsv", "sentence\tlabel\nthe\t1\n");
  garden_test::write_text_file(dir_ / "bad_dev" / "dev.tsv", "sentence\tlabel\nthe\t2\n");
  o = options;
  o.input_data_dir = (dir_ / "bad_dev").string();
  refused(o, "dev.tsv:2, column 2: label '2' is not one of 0, 1");
}

TEST_F(SentencePredictionTest, TheLoaderGivesModelGardensFeatureNames) {
  garden::nlp::create_finetuning_data(data_options());
  garden::nlp::SentencePredictionDataConfig params;
  params.input_path = (dir_ / "eval.tfrecord").string();
  params.seq_length = 16;
  params.global_batch_size = 8;
  params.is_training = false;
  auto dataset = garden::nlp::build_sentence_prediction_inputs(params, {}, 21);
  const auto batch = dataset->next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("input_word_ids").sizes(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(batch->at("input_type_ids").sizes(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(batch->at("input_mask").sizes(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(batch->at("label_ids").sizes(), (std::vector<int64_t>{8}));
  const auto first = ref::ref_parse_example(ref::read_records(params.input_path).at(0));
  for (int64_t t = 0; t < 16; ++t)
    EXPECT_EQ(batch->at("input_word_ids")[0][t].item<int64_t>(), first.at("input_ids").ints[t]);
  // A model with a smaller vocabulary refuses the records, naming them.
  auto small = garden::nlp::build_sentence_prediction_inputs(params, {}, 6);
  EXPECT_THROW_MSG(small->next(), garden::Error,
                   "eval.tfrecord', record 0: feature 'input_ids' holds");
}

// With the [CLS] output classified (Model Garden's head) and with the mean of
// the tokens' outputs (task.model.pooling=mean), each export serving what the
// task computes.
// A vocabulary with more pieces than the encoder embeds used to train and
// export, then fail in serving ("index out of range in self"); it is
// refused when the model is built.
TEST_F(SentencePredictionTest, AVocabularyLargerThanTheEncoderIsRefusedBeforeTraining) {
  garden::nlp::TaskTextTokenizer small(vocab_, "WordPiece", true, "task.train_data.vocab_file", 20);
  EXPECT_THROW_MSG(small.check(), garden::Error,
                   "task.train_data.vocab_file '" + vocab_ +
                       "' has 21 pieces, more than the encoder's vocab_size 20: ids from 20 on "
                       "would have no embedding; use the vocabulary the encoder was trained with");
  garden::nlp::TaskTextTokenizer fits(vocab_, "WordPiece", true, "task.train_data.vocab_file", 21);
  EXPECT_NO_THROW(fits.check());
  auto experiment = garden::config::get_experiment_config("bert/sentence_prediction_tiny");
  garden::config::apply_override(
      *experiment, "task.model.encoder.bert.vocab_size=20,task.train_data.tokenization=WordPiece");
  static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task).train_data.vocab_file =
      vocab_;
  auto task = garden::get_task(experiment->task);
  EXPECT_THROW_MSG(task->build_model(), garden::Error, "more than the encoder's vocab_size 20");
}

TEST_F(SentencePredictionTest, ATinyModelLearnsASeparableSetAndItsExportServesRawText) {
  for (const std::string pooling : {"cls", "mean"}) {
    SCOPED_TRACE("task.model.pooling=" + pooling);
    learn_and_serve(pooling);
  }
}

void SentencePredictionTest::learn_and_serve(const std::string& pooling) {
  garden::set_quiet(true);
  auto experiment = tiny_experiment(120);
  static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task).model.pooling = pooling;
  garden::RunOptions options;
  options.model_dir = (dir_ / ("run_" + pooling)).string();
  options.mode = "train_and_eval";
  const garden::Logs logs = garden::run_experiment(experiment, options);
  EXPECT_GE(garden::to_double(logs.at("cls_accuracy")), 0.95);
  EXPECT_TRUE(logs.count("f1"));

  garden::serving::ExportOptions export_options;
  export_options.experiment = "bert/sentence_prediction_tiny";
  export_options.model_dir = options.model_dir;
  export_options.export_dir = (dir_ / ("export_" + pooling)).string();
  const auto exported = garden::serving::export_model(export_options);
  EXPECT_TRUE(fs::exists(fs::path(exported.directory) / "assets" / "vocab.txt"));
  garden::serving::Predictor predictor(exported.directory);
  const std::vector<json> instances = {{{"sentence", "the message about alpha today"}},
                                       {{"sentence", "Echo is a message"}}};
  const auto rows = predictor.predict(instances);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("label"), "one");
  EXPECT_EQ(rows[1].at("label"), "zero");

  // The same through the task itself, with the checkpoint's weights.
  auto task = garden::get_task(experiment->task, options.model_dir);
  auto model = task->build_model();
  garden::load_model_state(*model, garden::read_checkpoint_file(exported.checkpoint).tensors,
                           "model/", true);
  const auto outputs =
      task->inference_step(garden::get_serving_module(*task)->inputs(instances), *model);
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 2; ++c)
      EXPECT_NEAR(rows[b].at("probabilities")[c].get<double>(),
                  outputs.at("probabilities")[b][c].item<double>(), 1e-6);
  EXPECT_THROW_MSG(predictor.predict(std::vector<json>{json{{"text", "x"}}}), garden::Error,
                   "instance 0 has an unknown input 'text'");
  EXPECT_THROW_MSG(predictor.predict(std::vector<json>{json::object()}), garden::Error,
                   "instance 0 has no input 'sentence'");
  garden::set_quiet(false);
}

// task.model.pooling=mean: the head (dense, tanh, output layer) reads the
// mean of the encoder's outputs over the tokens the mask keeps, computed here
// by hand in double; padding, whatever its ids and however long, changes
// nothing.
TEST(MeanPooling, TheHeadClassifiesTheMeanOfTheKeptTokensOutputs) {
  garden::nlp::BertClassifierOptions o;
  o.encoder.vocab_size = 30;
  o.encoder.hidden_size = 16;
  o.encoder.num_layers = 2;
  o.encoder.num_attention_heads = 2;
  o.encoder.intermediate_size = 32;
  o.encoder.max_position_embeddings = 16;
  o.num_classes = 3;
  o.pooling = "mean";
  torch::manual_seed(3);
  garden::nlp::BertClassifier model(o);
  model->eval();
  torch::NoGradGuard no_grad;
  at::Tensor ids = torch::randint(3, 30, {2, 8}, torch::kLong);
  at::Tensor mask = torch::ones({2, 8}, torch::kLong);
  mask.index_put_({1, torch::indexing::Slice(5)}, 0);  // row 1: 5 tokens, then padding
  const at::Tensor types = torch::zeros({2, 8}, torch::kLong);
  const at::Tensor logits = model->forward(ids, mask, types);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 3}));

  const at::Tensor sequence = model->encoder->forward(ids, mask, types).to(torch::kDouble);
  const auto& head = model->classifier;
  const at::Tensor w1 = head->dense->weight.to(torch::kDouble);
  const at::Tensor b1 = head->dense->bias.to(torch::kDouble);
  const at::Tensor w2 = head->out_proj->weight.to(torch::kDouble);
  const at::Tensor b2 = head->out_proj->bias.to(torch::kDouble);
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t tokens = b == 0 ? 8 : 5;
    std::vector<double> mean(16, 0.0);
    for (int64_t s = 0; s < tokens; ++s)
      for (int64_t w = 0; w < 16; ++w) mean[w] += sequence[b][s][w].item<double>() / tokens;
    std::vector<double> inner(16);
    for (int64_t i = 0; i < 16; ++i) {
      double z = b1[i].item<double>();
      for (int64_t w = 0; w < 16; ++w) z += w1[i][w].item<double>() * mean[w];
      inner[i] = std::tanh(z);
    }
    for (int64_t c = 0; c < 3; ++c) {
      double z = b2[c].item<double>();
      for (int64_t i = 0; i < 16; ++i) z += w2[c][i].item<double>() * inner[i];
      EXPECT_NEAR(logits[b][c].item<double>(), z, 1e-5) << "row " << b << ", class " << c;
    }
  }
  // Other padding ids, and four more padding positions: the same logits.
  at::Tensor other = ids.clone();
  other.index_put_({1, torch::indexing::Slice(5)}, 7);
  EXPECT_LT((model->forward(other, mask, types) - logits).abs().max().item<double>(), 1e-6);
  const at::Tensor longer_ids = torch::cat({ids, torch::full({2, 4}, 9, torch::kLong)}, 1);
  const at::Tensor longer_mask = torch::cat({mask, torch::zeros({2, 4}, torch::kLong)}, 1);
  const at::Tensor longer =
      model->forward(longer_ids, longer_mask, torch::zeros({2, 12}, torch::kLong));
  EXPECT_LT((longer - logits).abs().max().item<double>(), 1e-5);
  // Without a mask every position counts; a mask of the wrong shape is one line.
  const at::Tensor all = model->encoder->forward(ids, at::Tensor(), types);
  EXPECT_TRUE(torch::allclose(garden::nlp::mean_pool(all, at::Tensor()), all.mean(1)));
  EXPECT_THROW_MSG(garden::nlp::mean_pool(all, mask.slice(1, 1)), garden::Error,
                   "mean pooling: expects a sequence [batch, length, width] and a mask");
  // The [CLS] head on the same weights classifies something else.
  o.pooling = "cls";
  garden::nlp::BertClassifier cls(o);
  cls->eval();
  auto targets = cls->named_parameters();
  for (const auto& item : model->named_parameters()) targets[item.key()].copy_(item.value());
  EXPECT_GT((cls->forward(ids, mask, types) - logits).abs().max().item<double>(), 1e-3);
  o.pooling = "max";
  EXPECT_THROW_MSG(garden::nlp::BertClassifier{o}, garden::Error,
                   "pooling 'max' is not one of cls, mean");
}

TEST_F(SentencePredictionTest, TheEncoderStartsFromAnElectraDiscriminator) {
  garden::set_quiet(true);
  auto electra = garden::config::get_experiment_config("electra/tiny");
  garden::config::apply_override(
      *electra,
      "task.model.sequence_length=16,task.model.num_masked_tokens=2,"
      "task.model.discriminator_encoder.bert.vocab_size=21,"
      "task.model.discriminator_encoder.bert.hidden_size=32,"
      "task.model.discriminator_encoder.bert.num_layers=2,"
      "task.model.discriminator_encoder.bert.intermediate_size=64,"
      "task.model.discriminator_encoder.bert.embedding_size=32,"
      "task.model.discriminator_encoder.bert.max_position_embeddings=16,"
      "task.model.generator_encoder.bert.vocab_size=21,"
      "task.model.generator_encoder.bert.hidden_size=16,"
      "task.model.generator_encoder.bert.num_layers=1,"
      "task.model.generator_encoder.bert.intermediate_size=32,"
      "task.model.generator_encoder.bert.embedding_size=32,"
      "task.model.generator_encoder.bert.max_position_embeddings=16,"
      "task.train_data.input_path=dummy,task.train_data.seq_length=16,"
      "task.train_data.max_predictions_per_seq=2,task.train_data.global_batch_size=4,"
      "task.validation_data.seq_length=16,task.validation_data.max_predictions_per_seq=2,"
      "trainer.train_steps=2,trainer.steps_per_loop=2,trainer.checkpoint_interval=2,"
      "trainer.summary_interval=2,runtime.seed=3");
  garden::finalize_config(*electra);
  garden::RunOptions options;
  options.model_dir = (dir_ / "electra").string();
  options.mode = "train";
  garden::run_experiment(electra, options);
  const auto checkpoint = garden::read_checkpoint_file((dir_ / "electra" / "ckpt-2").string());

  auto experiment = tiny_experiment(10);
  auto& config = static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task);
  config.init_checkpoint = options.model_dir;
  auto task = garden::get_task(experiment->task, "");
  auto model = task->build_model();
  const auto before = garden::model_state(*model);
  task->initialize(*model);
  int64_t compared = 0;
  for (const auto& [name, tensor] : garden::model_state(*model)) {
    if (name.rfind("encoder.", 0) == 0) {
      const std::string source = "model/discriminator." + name.substr(8);
      ASSERT_TRUE(checkpoint.tensors.count(source)) << source;
      EXPECT_TRUE(torch::equal(tensor, checkpoint.tensors.at(source))) << name;
      ++compared;
    } else {
      EXPECT_TRUE(torch::equal(tensor, before.at(name))) << name << " is not the encoder's";
    }
  }
  EXPECT_GT(compared, 20);
  // init_cls_pooler needs the pretrainer's next_sentence head, which this
  // one does not have.
  config.init_cls_pooler = true;
  auto pooled = garden::get_task(experiment->task, "");
  EXPECT_THROW_MSG(pooled->initialize(*pooled->build_model()), garden::Error,
                   "names 'classifier.dense', but init_checkpoint");
  garden::set_quiet(false);
}

// The hand-over with the shipped recipes (issue 78): electra/tiny trained a
// few steps, then bert/sentence_prediction_tiny started from it. The
// fine-tuning model's encoder computes on a batch bitwise what the
// pretrainer's discriminator (not its generator) computed, padding and
// segment ids included: every tensor taken, the same sizes, activation,
// layer-norm epsilon and embedding projection on both sides.
namespace {

// electra/tiny for 2 steps into `model_dir`; `extra`: more overrides.
void pretrain_tiny_electra(const std::string& model_dir, const std::string& extra = "") {
  auto electra = garden::config::get_experiment_config("electra/tiny");
  garden::config::apply_override(
      *electra,
      "task.train_data.input_path=dummy,task.train_data.global_batch_size=4,"
      "trainer.train_steps=2,trainer.steps_per_loop=2,trainer.checkpoint_interval=2,"
      "trainer.summary_interval=2,trainer.validation_interval=1000,runtime.seed=5" +
          (extra.empty() ? "" : "," + extra));
  garden::finalize_config(*electra);
  garden::RunOptions options;
  options.model_dir = model_dir;
  options.mode = "train";
  garden::run_experiment(electra, options);
}

struct EncoderOutputs {
  at::Tensor discriminator, generator, restored;
};

// On one batch of pairs with padding: what the pretrainer in `model_dir`
// (its ckpt-2, electra/tiny with `extra`) computes with its discriminator
// and generator, and what `experiment`'s encoder restored from it does.
EncoderOutputs encoder_outputs(const std::string& model_dir, const std::string& extra,
                               garden::config::ExperimentConfig& experiment) {
  auto electra = garden::config::get_experiment_config("electra/tiny");
  if (!extra.empty()) garden::config::apply_override(*electra, extra);
  auto electra_task = garden::get_task(electra->task, "");
  auto pretrainer_model = electra_task->build_model();
  garden::load_model_state(
      *pretrainer_model,
      garden::read_checkpoint_file((fs::path(model_dir) / "ckpt-2").string()).tensors, "model/",
      /*strict=*/true);
  pretrainer_model->eval();
  auto& pretrainer = dynamic_cast<garden::nlp::ElectraPretrainerImpl&>(*pretrainer_model);

  auto task = garden::get_task(experiment.task, "");
  auto model = task->build_model();
  task->initialize(*model);
  model->eval();
  auto& classifier = dynamic_cast<garden::nlp::BertClassifierImpl&>(*model);

  torch::manual_seed(11);
  const int64_t vocab = pretrainer.discriminator->options().vocab_size;
  const at::Tensor word_ids = torch::randint(5, vocab, {3, 24}, torch::kLong);
  at::Tensor mask = torch::ones({3, 24}, torch::kLong);
  mask.index_put_({1, torch::indexing::Slice(17)}, 0);  // padding
  at::Tensor type_ids = torch::zeros({3, 24}, torch::kLong);
  type_ids.index_put_({torch::indexing::Slice(), torch::indexing::Slice(10)}, 1);  // a pair
  torch::NoGradGuard no_grad;
  return {pretrainer.discriminator->forward(word_ids, mask, type_ids),
          pretrainer.generator->forward(word_ids, mask, type_ids),
          classifier.encoder->forward(word_ids, mask, type_ids)};
}

}  // namespace

TEST_F(SentencePredictionTest, TheRestoredEncoderComputesWhatTheDiscriminatorComputed) {
  garden::set_quiet(true);
  const std::string model_dir = (dir_ / "electra_shipped").string();
  pretrain_tiny_electra(model_dir);
  auto experiment = garden::config::get_experiment_config("bert/sentence_prediction_tiny");
  experiment->task->init_checkpoint = model_dir;
  const auto outputs = encoder_outputs(model_dir, "", *experiment);
  EXPECT_TRUE(torch::equal(outputs.restored, outputs.discriminator));
  // ... and not what the generator computes.
  EXPECT_FALSE(outputs.generator.sizes() == outputs.restored.sizes() &&
               torch::equal(outputs.generator, outputs.restored));
  garden::set_quiet(false);
}

// A pretraining with attention biases of its own slope (alibi_slope, which
// no tensor holds; 0.5, not the experiments' 1.0): the fine-tuning's config
// takes them from the checkpoint's params, so the restored encoder computes
// what the discriminator did; without that it computes something else.
// The user may still set the biases (kept, with a line), but not a size
// the weights contradict.
TEST_F(SentencePredictionTest, AFineTuningTakesThePretrainedEncodersSettingsFromItsCheckpoint) {
  garden::set_quiet(true);
  const std::string model_dir = (dir_ / "electra_alibi").string();
  const std::string biases =
      "task.model.generator_encoder.bert.alibi_slope=0.5,"
      "task.model.discriminator_encoder.bert.alibi_slope=0.5,"
      "task.model.discriminator_encoder.bert.dropout_rate=0.05";
  pretrain_tiny_electra(model_dir, biases);
  const auto fine_tuning = [&] {
    auto experiment = garden::config::get_experiment_config("bert/sentence_prediction_tiny");
    experiment->task->init_checkpoint = model_dir;
    return experiment;
  };
  const auto bert = [](garden::config::ExperimentConfig & experiment) -> auto& {
    return static_cast<garden::nlp::SentencePredictionConfig&>(*experiment.task).model.encoder.bert;
  };

  // The defect: the experiment as it stands has its own slope.
  auto unadopted = fine_tuning();
  ASSERT_EQ(bert(*unadopted).alibi_slope, 1.0);
  const auto without = encoder_outputs(model_dir, biases, *unadopted);
  EXPECT_FALSE(torch::equal(without.restored, without.discriminator));

  auto adopted = fine_tuning();
  const auto lines = garden::adopt_from_init_checkpoint(*adopted, {});
  garden::config::validate_config(*adopted);
  EXPECT_EQ(bert(*adopted).alibi_slope, 0.5);
  EXPECT_EQ(bert(*adopted).dropout_rate, 0.05);
  const std::string checkpoint = (fs::path(model_dir) / "ckpt-2").string();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "from " + checkpoint +
                          ": task.model.encoder.bert.dropout_rate 0.05, "
                          "task.model.encoder.bert.alibi_slope 0.5");
  const auto with = encoder_outputs(model_dir, biases, *adopted);
  EXPECT_TRUE(torch::equal(with.restored, with.discriminator));

  // The user's own biases are kept, and said so.
  auto own = fine_tuning();
  garden::config::SetKeys set;
  garden::config::apply_override(*own, "task.model.encoder.bert.alibi_slope=0.25", &set);
  const auto own_lines = garden::adopt_from_init_checkpoint(*own, set);
  EXPECT_EQ(bert(*own).alibi_slope, 0.25);
  ASSERT_EQ(own_lines.size(), 2u);
  EXPECT_EQ(own_lines[1],
            "keeps task.model.encoder.bert.alibi_slope 0.25 (set by "
            "--params_override) instead of " +
                checkpoint + " task.model.discriminator_encoder.bert.alibi_slope 0.5");

  // A size the weights contradict is refused, naming both.
  auto wrong = fine_tuning();
  garden::config::SetKeys wrong_set;
  garden::config::apply_override(*wrong, "task.model.encoder.bert.num_layers=3", &wrong_set);
  try {
    garden::adopt_from_init_checkpoint(*wrong, wrong_set);
    ADD_FAILURE() << "a num_layers the checkpoint contradicts was taken";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "task.model.encoder.bert.num_layers 3 (set by --params_override) differs from " +
                  checkpoint + " task.model.discriminator_encoder.bert.num_layers 4");
  }

  // Params this version does not read (another version's key): nothing is
  // taken, and a line says why.
  garden::CheckpointData other;
  other.tensors["model/encoder.x"] = torch::zeros({1});
  other.meta = {{"checkpoint_items", {{"encoder", "encoder"}}},
                {"params", "task:\n  model:\n    encoder:\n      bert:\n        no_such_key: 1\n"}};
  const std::string other_file = (dir_ / "other" / "ckpt-1").string();
  fs::create_directories(dir_ / "other");
  garden::write_checkpoint_file(other_file, other);
  auto unread = fine_tuning();
  unread->task->init_checkpoint = other_file;
  const auto unread_lines = garden::adopt_from_init_checkpoint(*unread, {});
  ASSERT_EQ(unread_lines.size(), 1u);
  EXPECT_EQ(unread_lines[0].rfind("took nothing from " + other_file + "'s params: ", 0), 0u)
      << unread_lines[0];
  EXPECT_NE(unread_lines[0].find("no_such_key"), std::string::npos) << unread_lines[0];
  EXPECT_EQ(bert(*unread).alibi_slope, 1.0);

  // Renamed tensors come from elsewhere: nothing is taken.
  auto renamed = fine_tuning();
  renamed->task->init_checkpoint_rename = {{"discriminator.", "encoder."}};
  EXPECT_TRUE(garden::adopt_from_init_checkpoint(*renamed, {}).empty());
  EXPECT_EQ(bert(*renamed).alibi_slope, 1.0);
  garden::set_quiet(false);
}

// task.layerwise_lr_decay as ELECTRA defines it: with 2 layers and decay
// 0.5, the embeddings learn at 0.5^4 of the rate, layer_0 at 0.5^3, layer_1
// at 0.5^2 and the head at the rate itself. A one-step linear warmup from 0
// gives the first step rate 0, so ckpt-1 holds the initial weights and both
// runs take their second step (rate 5e-4) from the same weights and
// gradients: each
// parameter's change is the full-rate run's times its factor (AdamW's
// weight decay included, which Keras scales by the rate).
TEST_F(SentencePredictionTest, LayerwiseLrDecayScalesEachLayersUpdateAsElectraDoes) {
  garden::set_quiet(true);
  std::map<std::string, std::map<std::string, at::Tensor>> weights;  // run -> name -> tensor
  for (const double decay : {1.0, 0.5}) {
    auto experiment = tiny_experiment(2);
    auto& config = static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task);
    config.layerwise_lr_decay = decay;
    auto& warmup = experiment->trainer.optimizer_config.warmup;
    warmup.type = "linear";
    warmup.linear.warmup_steps = 1;
    experiment->trainer.checkpoint_interval = 1;
    experiment->trainer.steps_per_loop = 1;
    garden::RunOptions options;
    const std::string run = decay == 1.0 ? "full" : "decayed";
    options.model_dir = (dir_ / ("layerwise_" + run)).string();
    options.mode = "train";
    garden::run_experiment(experiment, options);
    for (const int step : {1, 2}) {
      const auto file = fs::path(options.model_dir) / ("ckpt-" + std::to_string(step));
      for (const auto& [name, tensor] : garden::read_checkpoint_file(file.string()).tensors)
        if (name.rfind("model/", 0) == 0)
          weights[run + std::to_string(step)][name.substr(6)] = tensor;
    }
  }
  ASSERT_FALSE(weights["full1"].empty());
  const std::map<std::string, double> expected = {{"encoder.word_embeddings", 1.0 / 16},
                                                  {"encoder.position_embeddings", 1.0 / 16},
                                                  {"encoder.type_embeddings", 1.0 / 16},
                                                  {"encoder.embedding_layer_norm", 1.0 / 16},
                                                  {"encoder.layer_0", 1.0 / 8},
                                                  {"encoder.layer_1", 1.0 / 4},
                                                  {"classifier", 1.0}};
  std::set<std::string> seen;
  for (const auto& [name, initial] : weights["full1"]) {
    SCOPED_TRACE(name);
    // Both runs start from the same weights.
    ASSERT_TRUE(torch::equal(initial, weights["decayed1"].at(name)));
    const auto module = std::find_if(expected.begin(), expected.end(), [&](const auto& entry) {
      return name.rfind(entry.first + ".", 0) == 0;
    });
    ASSERT_NE(module, expected.end()) << "a parameter of no expected module";
    seen.insert(module->first);
    const at::Tensor full = (weights["full2"].at(name) - initial).to(torch::kDouble);
    const at::Tensor decayed = (weights["decayed2"].at(name) - initial).to(torch::kDouble);
    const double moved = full.abs().sum().item<double>();
    ASSERT_GT(moved, 0.0);
    EXPECT_NEAR(decayed.abs().sum().item<double>() / moved, module->second, module->second * 2e-3);
  }
  EXPECT_EQ(seen.size(), expected.size());
  garden::set_quiet(false);

  // A factor outside (0, 1] is one line naming the key.
  auto experiment = tiny_experiment(2);
  static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task).layerwise_lr_decay = 0.0;
  EXPECT_NE(garden_test::error_of([&] {
              garden::config::validate_config(*experiment);
            }).find("task.layerwise_lr_decay"),
            std::string::npos);
}

// The tagging and question-answering tasks take task.layerwise_lr_decay
// too, over the same encoder names (here with an embedding projection):
// decay 0.5 over 3 layers gives the embeddings 0.5^5, layer_i 0.5^(4-i),
// the heads 1; decay 1 gives no factors.
TEST_F(SentencePredictionTest, EveryFineTuningTaskScalesItsEncodersLayers) {
  for (const std::string name : {"bert/tagging", "bert/squad", "bert/sentence_prediction"}) {
    SCOPED_TRACE(name);
    auto experiment = garden::config::get_experiment_config(name);
    const std::string decay = "task.layerwise_lr_decay=";
    const std::string sizes =
        "task.model.encoder.bert.vocab_size=30,task.model.encoder.bert.hidden_size=32,"
        "task.model.encoder.bert.embedding_size=16,task.model.encoder.bert.num_layers=3,"
        "task.model.encoder.bert.num_attention_heads=2,task.model.encoder.bert.intermediate_size="
        "64" +
        std::string(name == "bert/tagging" ? ",task.class_names=[O,B-X,I-X]" : "") +
        std::string(name == "bert/sentence_prediction" ? ",task.model.num_classes=2" : "");
    garden::config::apply_override(*experiment, sizes + "," + decay + "0.5");
    garden::config::validate_config(*experiment);
    auto task = garden::get_task(experiment->task, "");
    auto model = task->build_model();
    std::vector<garden::optim::NamedParameter> parameters;
    for (const auto& item : model->named_parameters(true))
      parameters.push_back({item.key(), item.value()});
    const auto scales = task->learning_rate_scales(parameters);
    ASSERT_EQ(scales.size(), parameters.size());
    int64_t heads = 0;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const std::string& parameter = parameters[i].name;
      SCOPED_TRACE(parameter);
      double expected = 1.0;
      if (parameter.rfind("encoder.layer_", 0) == 0)
        expected = std::pow(0.5, 4 - std::stoi(parameter.substr(14)));
      else if (parameter.rfind("encoder.", 0) == 0)
        expected = std::pow(0.5, 5);  // the tables, their layer norm and projection
      else
        ++heads;
      EXPECT_EQ(scales[i], expected);
    }
    EXPECT_GT(heads, 0);
    auto plain = garden::config::get_experiment_config(name);
    garden::config::apply_override(*plain, sizes);
    auto plain_task = garden::get_task(plain->task, "");
    EXPECT_TRUE(plain_task->learning_rate_scales(parameters).empty());
  }
}

TEST_F(SentencePredictionTest, EvaluationsReportModelGardensMetrics) {
  auto experiment = tiny_experiment(10);
  auto& config = static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task);
  config.metric_type = "matthews_corrcoef";
  auto task = garden::get_task(experiment->task, "");
  EXPECT_EQ(task->aggregated_log_names(), (std::vector<std::string>{"matthews_corrcoef", "f1"}));
  // Labels 1 1 0 0 0 1 against predictions 1 0 0 1 0 1: TP 2, TN 2, FP 1,
  // FN 1: MCC (4 - 1) / sqrt(3 * 3 * 3 * 3) = 1/3, F1 2 * 2 / (4 + 2) = 2/3.
  garden::Logs state;
  task->aggregate_logs(state, {{"sentence_prediction_rows",
                                std::vector<std::vector<int64_t>>{{1, 1}, {1, 0}, {0, 0}}}});
  task->aggregate_logs(state, {{"sentence_prediction_rows",
                                std::vector<std::vector<int64_t>>{{0, 1}, {0, 0}, {1, 1}}}});
  const auto logs = task->reduce_aggregated_logs(state, 0);
  EXPECT_NEAR(garden::to_double(logs.at("matthews_corrcoef")), 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(garden::to_double(logs.at("f1")), 2.0 / 3.0, 1e-12);
}

TEST_F(SentencePredictionTest, ARegressionsEvaluationIsTheMeanOfPearsonAndSpearman) {
  auto experiment = tiny_experiment(10);
  auto& config = static_cast<garden::nlp::SentencePredictionConfig&>(*experiment->task);
  config.model.num_classes = 1;
  config.metric_type = "pearson_spearman_corr";
  auto task = garden::get_task(experiment->task, "");
  // Labels 1 2 3 4 against predictions 1.5 1 3.5 4: Pearson 5 / sqrt(5 * 6.5)
  // (deviations -1.5 -.5 .5 1.5 and -1 -1.5 1 1.5); Spearman's ranks 2 1 3 4
  // against 1 2 3 4: 1 - 6 * 2 / (4 * 15) = 0.8.
  garden::Logs state;
  task->aggregate_logs(state, {{"sentence_prediction_rows", garden::ValueRows{{1, 1.5}, {2, 1}}}});
  task->aggregate_logs(state, {{"sentence_prediction_rows", garden::ValueRows{{3, 3.5}, {4, 4}}}});
  const auto logs = task->reduce_aggregated_logs(state, 0);
  EXPECT_NEAR(garden::to_double(logs.at("pearson_spearman_corr")),
              (5.0 / std::sqrt(5.0 * 6.5) + 0.8) / 2.0, 1e-12);
}

TEST_F(SentencePredictionTest, ConfigsModelGardenRejectsOrGardenLacksAreRefused) {
  auto refused = [](const std::string& override_text, const std::string& message) {
    auto experiment = garden::config::get_experiment_config("bert/sentence_prediction_tiny");
    garden::config::apply_override(*experiment, override_text);
    EXPECT_THROW_MSG(garden::config::validate_config(*experiment), garden::Error, message);
  };
  refused("task.model.use_encoder_pooler=true", "task.model.use_encoder_pooler");
  refused("task.model.pooling=max", "task.model.pooling: 'max' is not one of cls, mean");
  refused("task.metric_type=auc", "task.metric_type");
  refused("task.model.num_classes=1", "task.train_data.label_type");
  refused("task.class_names=[a,b,c]", "task.class_names");
  refused("task.hub_module_url=https://tfhub.dev/x", "task.hub_module_url");
  refused("task.train_data.tokenization=BPE", "task.train_data.tokenization");
  refused("task.train_data.seq_length=1024", "task.train_data.seq_length");
  refused("task.validation_data.lower_case=true", "task.validation_data.lower_case");
  refused("task.train_data.include_example_id=true", "task.train_data.include_example_id");
  // Model Garden's bert/sentence_prediction leaves num_classes 0: garden
  // config shows it, building the model asks for it.
  auto unset = garden::config::get_experiment_config("bert/sentence_prediction");
  garden::config::validate_config(*unset);
  EXPECT_THROW_MSG(garden::get_task(unset->task, "")->build_model(), garden::Error,
                   "task.model.num_classes is 0");
}

}  // namespace
