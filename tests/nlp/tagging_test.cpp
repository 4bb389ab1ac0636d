// Tagging end to end: seqeval's spans against hand-counted cases,
// word<TAB>label files, sub-word labels and sub-sentences,
// create_finetuning_data's records read back by the tests' own reader, a
// tiny model that learns to tag and its export served with raw text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/runtime.h"
#include "garden/core/task.h"
#include "garden/core/train_lib.h"
#include "garden/nlp/data/tagging_data.h"
#include "garden/nlp/metrics/seqeval.h"
#include "garden/nlp/tasks/tagging_config.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "reference_formats.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
namespace ref = garden_test::reference;
using garden::nlp::FinetuningTokenizer;
using json = nlohmann::json;
using Tags = std::vector<std::vector<std::string>>;

TEST(SeqevalTest, ScoresAsSeqevalsReadmeExample) {
  // seqeval's README: f1 0.50, accuracy 0.80.
  const Tags truth = {{"O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"}, {"B-PER", "I-PER", "O"}};
  const Tags found = {{"O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"},
                      {"B-PER", "I-PER", "O"}};
  const auto s = garden::nlp::seqeval_scores(truth, found);
  EXPECT_DOUBLE_EQ(s.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.f1, 0.5);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.8);
}

TEST(SeqevalTest, ChunksStartAtIAndEndWhereTheTypeChanges) {
  using garden::nlp::Chunk;
  // I- after O starts a chunk; a type change ends one; sequences are
  // joined with an O between them.
  EXPECT_EQ(garden::nlp::get_entities({{"I-PER", "I-PER", "O", "B-PER", "I-LOC"}, {"B-ORG"}}),
            (std::vector<Chunk>{{"PER", 0, 1}, {"PER", 3, 3}, {"LOC", 4, 4}, {"ORG", 6, 6}}));
  // 2 true spans, 3 found, 1 right: P 1/3, R 1/2, F1 2/5.
  const auto s = garden::nlp::seqeval_scores({{"B-PER", "I-PER", "O", "B-LOC"}},
                                             {{"B-PER", "I-PER", "B-ORG", "B-PER"}});
  EXPECT_DOUBLE_EQ(s.precision, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.f1, 0.4);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  // Nothing found: 0, not a division by zero.
  EXPECT_DOUBLE_EQ(garden::nlp::seqeval_scores({{"B-PER"}}, {{"O"}}).f1, 0.0);
}

// ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the words.
const std::vector<std::string> kTaggingVocab = {"[PAD]", "[UNK]",   "[CLS]", "[SEP]", "[MASK]",
                                                "the",   "message", "about", "alpha", "bravo",
                                                "echo",  "##s",     "today", "is",    "a"};

// Sentences of filler words holding "alpha bravo" (a person) or "echo" (a
// place), in word<TAB>label lines.
std::string tagged_sentences(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::string> filler = {"the", "message", "about", "today", "is", "a"};
  std::string out;
  for (int s = 0; s < count; ++s) {
    const int length = 3 + static_cast<int>(rng() % 4);
    for (int w = 0; w < length; ++w) {
      switch (rng() % 5) {
        case 0:
          out += "alpha\tB-PER\nbravo\tI-PER\n";
          break;
        case 1:
          out += "echo\tB-LOC\n";
          break;
        default:
          out += filler[rng() % filler.size()] + "\tO\n";
      }
    }
    out += "\n";
  }
  return out;
}

class TaggingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    garden::register_builtins();
    dir_ = fs::temp_directory_path() / ("tagging_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "panx");
    std::string vocab;
    for (const auto& token : kTaggingVocab) vocab += token + "\n";
    vocab_ = garden_test::write_text_file(dir_ / "vocab.txt", vocab);
    garden_test::write_text_file(dir_ / "panx" / "train-en.tsv", tagged_sentences(300, 1));
    garden_test::write_text_file(dir_ / "panx" / "dev-en.tsv", tagged_sentences(60, 2));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static garden::nlp::FinetuningDataOptions options() {
    garden::nlp::FinetuningDataOptions o;
    o.fine_tuning_task_type = "tagging";
    o.tagging_task_name = "panx";
    o.input_data_dir = (dir_ / "panx").string();
    o.train_data_output_path = (dir_ / "train.tfrecord").string();
    o.eval_data_output_path = (dir_ / "eval.tfrecord").string();
    o.meta_data_file_path = (dir_ / "meta.json").string();
    o.vocab_file = vocab_;
    o.max_seq_length = 16;
    return o;
  }
  static fs::path dir_;
  static std::string vocab_;
};
fs::path TaggingTest::dir_;
std::string TaggingTest::vocab_;

TEST_F(TaggingTest, FilesAreReadAsWordAndLabelLinesAndBadLinesNamed) {
  const auto panx = garden::nlp::tagging_labels("panx");
  const std::string file = garden_test::write_text_file(
      dir_ / "two.tsv", "alpha\tB-PER\nbravo\tI-PER\n\n\nthe\tO\r\necho\tB-LOC\n");
  const auto examples = garden::nlp::read_tagging_examples(file, panx);
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[0].words, (std::vector<std::string>{"alpha", "bravo"}));
  EXPECT_EQ(examples[0].label_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(examples[1].sentence_id, 1);
  EXPECT_EQ(examples[1].label_ids, (std::vector<int64_t>{0, 3}));
  const std::string bad_label =
      garden_test::write_text_file(dir_ / "bad.tsv", "alpha\tB-PER\nbravo\tB-FOO\n");
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_tagging_examples(bad_label, panx);
            }).find(bad_label + ":2, column 2: label 'B-FOO' is not one of O, B-PER"),
            std::string::npos);
  const std::string no_tab = garden_test::write_text_file(dir_ / "tab.tsv", "alpha B-PER\n");
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_tagging_examples(no_tab, panx);
            }).find(no_tab + ":1: expected word<TAB>label"),
            std::string::npos);
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::tagging_labels("conll2002");
            }).find("panx, udpos, conll2003, conll"),
            std::string::npos);
  // conll takes any tag set: its labels come from the data.
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::tagging_labels("conll");
            }).find("no fixed label list"),
            std::string::npos);
}

TEST_F(TaggingTest, TheFirstPieceOfAWordCarriesItsLabelAndLongSentencesSplit) {
  const auto tokenizer =
      FinetuningTokenizer::open(FinetuningTokenizer::Kind::kWordPiece, vocab_, true, "vocab");
  garden::nlp::TaggingExample example;
  example.words = {"messages", "about", "Alpha", "zulu"};
  example.label_ids = {0, 0, 1, 0};
  example.sentence_id = 7;
  // [CLS] message ##s about alpha [UNK] [SEP]: 7 of 8.
  auto one = garden::nlp::encode_tagging_example(*tokenizer, example, 8);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].input_ids, (std::vector<int64_t>{2, 6, 11, 7, 8, 1, 3, 0}));
  EXPECT_EQ(one[0].label_ids, (std::vector<int64_t>{-1, 0, -1, 0, 1, 0, -1, -1}));
  EXPECT_EQ(one[0].input_mask, (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(one[0].sentence_id, 7);
  // Room for 3 pieces: "messages" (2) + "about" would be 3... then "alpha"
  // starts a second sub-sentence.
  auto split = garden::nlp::encode_tagging_example(*tokenizer, example, 5);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0].input_ids, (std::vector<int64_t>{2, 6, 11, 7, 3}));
  EXPECT_EQ(split[1].input_ids, (std::vector<int64_t>{2, 8, 1, 3, 0}));
  EXPECT_EQ(split[1].label_ids, (std::vector<int64_t>{-1, 1, 0, -1, -1}));
  EXPECT_EQ(split[1].sub_sentence_id, 1);
}

TEST_F(TaggingTest, RecordsReadBackByAnIndependentReader) {
  const auto report = garden::nlp::create_finetuning_data(options());
  EXPECT_EQ(report.train_examples, 300);
  const auto meta = json::parse(std::ifstream(dir_ / "meta.json"));
  EXPECT_EQ(meta.at("task_type"), "bert_tagging");
  EXPECT_EQ(meta.at("label_list"), json(garden::nlp::tagging_labels("panx")));
  const auto examples = garden::nlp::read_tagging_examples(
      (dir_ / "panx" / "train-en.tsv").string(), garden::nlp::tagging_labels("panx"));
  const auto records = ref::read_records(options().train_data_output_path);
  ASSERT_EQ(records.size(), 300u);
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto f = ref::ref_parse_example(records[i]);
    ASSERT_EQ(f.size(), 6u);
    // Every word is in the vocabulary and one piece: its label sits at its
    // position after [CLS].
    const auto& labels = f["label_ids"].ints;
    ASSERT_EQ(labels.size(), 16u);
    EXPECT_EQ(labels[0], -1);
    for (std::size_t w = 0; w < examples[i].words.size(); ++w) {
      EXPECT_EQ(labels[w + 1], examples[i].label_ids[w]);
      EXPECT_EQ(f["input_ids"].ints[w + 1],
                std::find(kTaggingVocab.begin(), kTaggingVocab.end(), examples[i].words[w]) -
                    kTaggingVocab.begin());
    }
    EXPECT_EQ(f["input_ids"].ints[examples[i].words.size() + 1], 3);
    EXPECT_EQ(f["sentence_id"].ints, std::vector<int64_t>{static_cast<int64_t>(i)});
    EXPECT_EQ(f["sub_sentence_id"].ints, std::vector<int64_t>{0});
  }
}

// Records written with a longer label list than the model's classes: named
// with their record, not LibTorch's "Target 4 is out of bounds".
TEST_F(TaggingTest, ALabelIdOutsideTheModelsClassesNamesItsRecord) {
  garden::nlp::create_finetuning_data(options());
  garden::nlp::TaggingDataConfig data;
  data.input_path = (dir_ / "train.tfrecord").string();
  data.seq_length = 16;
  data.global_batch_size = 300;
  data.is_training = false;
  data.drop_remainder = false;
  auto dataset = garden::nlp::build_tagging_inputs(data, {}, 15, {"O", "B-PER"});
  const std::string message = garden_test::error_of([&] { dataset->next(); });
  EXPECT_NE(message.find("TFRecord file '" + data.input_path + "', record "), std::string::npos)
      << message;
  EXPECT_NE(message.find(": feature 'label_ids' holds "), std::string::npos) << message;
  EXPECT_NE(message.find(", but the model has 2 classes (task.class_names [O, B-PER]); the "
                         "records were written with another label list"),
            std::string::npos)
      << message;
  // The model's own classes read every record.
  auto all = garden::nlp::build_tagging_inputs(data, {}, 15, garden::nlp::tagging_labels("panx"));
  EXPECT_EQ(all->next()->at("label_ids").size(0), 300);
}

TEST_F(TaggingTest, ATinyModelLearnsToTagAndItsExportServesRawText) {
  garden::set_quiet(true);
  garden::nlp::create_finetuning_data(options());
  auto experiment = garden::config::get_experiment_config("bert/tagging");
  garden::config::apply_override(
      *experiment,
      "task.model.encoder.bert.vocab_size=15,task.model.encoder.bert.hidden_size=32,"
      "task.model.encoder.bert.num_layers=2,task.model.encoder.bert.num_attention_heads=2,"
      "task.model.encoder.bert.intermediate_size=64,task.model.encoder.bert.max_position_"
      "embeddings=16,"
      "task.train_data.seq_length=16,task.validation_data.seq_length=16,"
      "task.train_data.global_batch_size=16,task.validation_data.global_batch_size=16,"
      "task.class_names=[O,B-PER,I-PER,B-LOC,I-LOC,B-ORG,I-ORG],"
      "trainer.train_steps=150,trainer.steps_per_loop=150,trainer.summary_interval=150,"
      "trainer.checkpoint_interval=150,trainer.validation_interval=150,trainer.validation_steps=-1,"
      "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=0.002,"
      "trainer.optimizer_config.learning_rate.polynomial.decay_steps=150,"
      "trainer.optimizer_config.warmup.polynomial.warmup_steps=10,"
      "runtime.distribution_strategy=one_device,runtime.seed=5");
  auto& task = static_cast<garden::nlp::TaggingConfig&>(*experiment->task);
  task.train_data.input_path = (dir_ / "train.tfrecord").string();
  task.validation_data.input_path = (dir_ / "eval.tfrecord").string();
  task.train_data.vocab_file = vocab_;
  garden::config::validate_config(*experiment);
  garden::finalize_config(*experiment);
  garden::RunOptions run;
  run.model_dir = (dir_ / "run").string();
  run.mode = "train_and_eval";
  const auto logs = garden::run_experiment(experiment, run);
  EXPECT_GE(garden::to_double(logs.at("f1")), 0.95);
  EXPECT_GE(garden::to_double(logs.at("accuracy")), 0.95);
  EXPECT_TRUE(logs.count("precision") && logs.count("recall"));
  // bert/tagging's default has no class names: the model asks for them.
  auto unset = garden::config::get_experiment_config("bert/tagging");
  garden::config::validate_config(*unset);
  EXPECT_NE(garden_test::error_of([&] {
              garden::get_task(unset->task, "")->build_model();
            }).find("task.class_names is empty"),
            std::string::npos);

  garden::serving::ExportOptions export_options;
  export_options.experiment = "bert/tagging";
  export_options.model_dir = run.model_dir;
  export_options.export_dir = (dir_ / "export").string();
  garden::serving::Predictor predictor(garden::serving::export_model(export_options).directory);
  const auto rows = predictor.predict(
      std::vector<json>{json{{"sentence", "the alpha bravo message about echo"}}});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("labels"), json({"O", "B-PER", "I-PER", "O", "O", "B-LOC"}));
  garden::set_quiet(false);
}

}  // namespace
