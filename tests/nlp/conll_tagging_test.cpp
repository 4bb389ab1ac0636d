// Tagging on any tag set: CoNLL-2003's files as distributed (IOB1, and the
// IOB2 of the redistributions) and other tag sets in CoNLL's column layout,
// their records read back by the tests' own reader, the label list in the
// meta data and taken from there by the task, seqeval's default and strict
// F1 on hand-scored cases, a tiny run, and every refusal in one line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/core/runtime.h"
#include "garden/core/task.h"
#include "garden/core/train_lib.h"
#include "garden/nlp/data/conll_data.h"
#include "garden/nlp/data/tagging_data.h"
#include "garden/nlp/metrics/seqeval.h"
#include "garden/nlp/tasks/tagging_config.h"
#include "reference_formats.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
namespace ref = garden_test::reference;
using garden::nlp::SeqevalMode;
using garden_test::error_of;
using garden_test::write_text_file;
using json = nlohmann::json;
using Tags = std::vector<std::vector<std::string>>;
using Names = std::vector<std::string>;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One hand-scored case for both modes. Truth (IOB2): PER 0-1, LOC 3-4 in
// the first sentence, MISC 0 in the second: 3 entities in either mode.
// Predicted, default mode: I-PER after the start opens PER 0-1 (right),
// B-LOC then I-ORG gives LOC 3-3 and ORG 4-4 (both wrong), B-MISC B-MISC
// gives MISC 0 (right) and MISC 1: 5 found, 2 right: P 2/5, R 2/3,
// F1 = 2 (2/5)(2/3) / (2/5 + 2/3) = (8/15) / (16/15) = 1/2.
// Strict mode: I-PER I-PER starts nothing (no B-), LOC 3-3, MISC 0 and
// MISC 1: 3 found, 1 right (MISC 0): P 1/3, R 1/3, F1 1/3.
// Accuracy, 4 of 7 tags equal: I-PER, O, B-LOC, B-MISC.
const Tags kTruth = {{"B-PER", "I-PER", "O", "B-LOC", "I-LOC"}, {"B-MISC", "O"}};
const Tags kFound = {{"I-PER", "I-PER", "O", "B-LOC", "I-ORG"}, {"B-MISC", "B-MISC"}};

TEST(SeqevalModeTest, DefaultAndStrictF1OnAHandScoredCase) {
  const auto lenient = garden::nlp::seqeval_scores(kTruth, kFound);
  EXPECT_DOUBLE_EQ(lenient.precision, 2.0 / 5.0);
  EXPECT_DOUBLE_EQ(lenient.recall, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(lenient.f1, 0.5);
  EXPECT_DOUBLE_EQ(lenient.accuracy, 4.0 / 7.0);
  const auto strict = garden::nlp::seqeval_scores(kTruth, kFound, SeqevalMode::kStrict);
  EXPECT_DOUBLE_EQ(strict.precision, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(strict.recall, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(strict.f1, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(strict.accuracy, 4.0 / 7.0);
}

TEST(SeqevalModeTest, StrictEntitiesStartAtBAndIob1TruthNeedsConverting) {
  using garden::nlp::Chunk;
  // B-PER I-PER is PER 0-1; I-LOC after I-PER neither continues nor starts
  // one; the second sentence starts at 4 (3 tags and the O between): ORG 5.
  EXPECT_EQ(garden::nlp::get_strict_iob2_entities({{"B-PER", "I-PER", "I-LOC"}, {"O", "B-ORG"}}),
            (std::vector<Chunk>{{"PER", 0, 1}, {"ORG", 5, 5}}));
  // IOB1 as CoNLL-2003 ships it: strict mode finds no entity in it (F1 0,
  // no division by zero), default mode finds both; once converted to IOB2
  // strict mode agrees.
  const Tags iob1 = {{"I-PER", "I-PER", "O", "I-LOC"}};
  EXPECT_DOUBLE_EQ(garden::nlp::seqeval_scores(iob1, iob1, SeqevalMode::kStrict).f1, 0.0);
  EXPECT_DOUBLE_EQ(garden::nlp::seqeval_scores(iob1, iob1).f1, 1.0);
  const Tags iob2 = {garden::nlp::iob1_to_iob2(iob1[0])};
  EXPECT_DOUBLE_EQ(garden::nlp::seqeval_scores(iob2, iob2, SeqevalMode::kStrict).f1, 1.0);
  // seqeval's IOB2 scheme has no E- or S- tags.
  EXPECT_THROW(garden::nlp::seqeval_scores({{"S-PER"}}, {{"O"}}, SeqevalMode::kStrict),
               std::invalid_argument);
}

TEST(ConllDataTest, Iob1BecomesIob2AndIob2StaysAsItIs) {
  using garden::nlp::iob1_to_iob2;
  // CoNLL-2003's first training sentence: "EU rejects German call ...".
  EXPECT_EQ(iob1_to_iob2({"I-ORG", "O", "I-MISC", "O", "O", "O", "I-MISC", "O", "O"}),
            (Names{"B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"}));
  // B- only between two adjacent entities of one type; a type change starts
  // a new entity.
  EXPECT_EQ(iob1_to_iob2({"I-PER", "I-PER", "B-PER", "I-PER", "I-LOC", "I-ORG"}),
            (Names{"B-PER", "I-PER", "B-PER", "I-PER", "B-LOC", "B-ORG"}));
  const Names iob2 = {"B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-MISC"};
  EXPECT_EQ(iob1_to_iob2(iob2), iob2);
}

// ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the words.
const Names kVocab = {"[PAD]",    "[UNK]",  "[CLS]", "[SEP]", "[MASK]", "eu",
                      "rejects",  "german", "call",  ".",     "peter",  "blackburn",
                      "brussels", "alpha",  "bravo", "echo",  "acme",   "the",
                      "message",  "about",  "today", "is",    "a",      "runs"};

// The same three sentences as CoNLL-2003 ships them (IOB1, eng.train) and as
// its redistributions do (IOB2, train.txt); -DOCSTART- ends a sentence.
const char* kIob1 =
    "-DOCSTART- -X- -X- O\n\n"
    "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\ncall NN I-NP O\n. . O O\n\n"
    "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n"
    "-DOCSTART- -X- -X- O\n"
    "BRUSSELS NNP I-NP I-LOC\nAlpha NNP I-NP I-PER\nBravo NNP I-NP B-PER\n\n";
const char* kIob2 =
    "-DOCSTART- -X- -X- O\n\n"
    "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\ncall NN I-NP O\n. . O O\n\n"
    "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\r\n"
    "-DOCSTART- -X- -X- O\n"
    "BRUSSELS NNP B-NP B-LOC\nAlpha NNP B-NP B-PER\nBravo\tNNP I-NP  B-PER\n";

// Sentences of filler words holding people, places, organisations and
// MISC words, IOB1 (I- except between two entities of one type) or IOB2.
std::string conll_sentences(int count, uint32_t seed, bool iob1) {
  std::mt19937 rng(seed);
  const Names filler = {"the", "message", "about", "today", "is", "a", "runs"};
  std::string out = "-DOCSTART- -X- -X- O\n\n";
  for (int s = 0; s < count; ++s) {
    std::vector<std::pair<std::string, std::string>> words;  // word, IOB2 tag
    const int length = 3 + static_cast<int>(rng() % 5);
    for (int w = 0; w < length; ++w) {
      switch (rng() % 8) {
        case 0:
          words.insert(words.end(), {{"alpha", "B-PER"}, {"bravo", "I-PER"}});
          break;
        case 1:
          words.push_back({"echo", "B-LOC"});
          break;
        case 2:
          words.push_back({"acme", "B-ORG"});
          break;
        case 3:
          words.push_back({"german", "B-MISC"});
          break;
        default:
          words.push_back({filler[rng() % filler.size()], "O"});
      }
    }
    std::string previous_type;
    for (const auto& [word, tag] : words) {
      const std::string type = tag == "O" ? "" : tag.substr(2);
      std::string written = tag;
      if (iob1 && tag[0] == 'B' && type != previous_type) written = "I-" + type;
      out += word + " NN I-NP " + written + "\n";
      previous_type = type;
    }
    out += s % 25 == 24 ? "-DOCSTART- -X- -X- O\n" : "\n";
  }
  return out;
}

class ConllTaggingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    garden::register_builtins();
    dir_ = fs::temp_directory_path() / ("conll_tagging_" + std::to_string(::getpid()));
    for (const char* sub : {"iob1", "iob2", "run", "pos", "bad"})
      fs::create_directories(dir_ / sub);
    std::string vocab;
    for (const auto& token : kVocab) vocab += token + "\n";
    vocab_ = write_text_file(dir_ / "vocab.txt", vocab);
    write_text_file(dir_ / "iob1" / "eng.train", kIob1);
    write_text_file(dir_ / "iob1" / "eng.testa", kIob1);
    write_text_file(dir_ / "iob1" / "eng.testb", kIob1);
    write_text_file(dir_ / "iob2" / "train.txt", kIob2);
    write_text_file(dir_ / "iob2" / "valid.txt", kIob2);
    write_text_file(dir_ / "iob2" / "test.txt", kIob2);
    write_text_file(dir_ / "run" / "eng.train", conll_sentences(300, 1, true));
    write_text_file(dir_ / "run" / "eng.testa", conll_sentences(60, 2, false));
    // Another tag set, three columns, tabs and spaces.
    write_text_file(dir_ / "pos" / "train.txt",
                    "the\tx\tDET\nmessage x NOUN\nruns x VERB\n\nalpha x NOUN\nis x VERB\n"
                    "today x O\n");
    write_text_file(dir_ / "pos" / "valid.txt", "a x DET\nmessage x NOUN\nis x ADV\n");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static garden::nlp::FinetuningDataOptions options(const std::string& task,
                                                    const std::string& input) {
    // Each input's outputs in a folder of their own, as the task looks for
    // the meta data beside the records.
    const fs::path out = dir_ / (input + "_out");
    fs::create_directories(out);
    garden::nlp::FinetuningDataOptions o;
    o.fine_tuning_task_type = "tagging";
    o.tagging_task_name = task;
    o.input_data_dir = (dir_ / input).string();
    o.train_data_output_path = (out / "train.tfrecord").string();
    o.eval_data_output_path = (out / "eval.tfrecord").string();
    o.test_data_output_path = (out / "test.tfrecord").string();
    o.meta_data_file_path = (out / "meta.json").string();
    o.vocab_file = vocab_;
    o.max_seq_length = 8;
    return o;
  }
  static json meta_of(const garden::nlp::FinetuningDataOptions& o) {
    return json::parse(std::ifstream(o.meta_data_file_path));
  }
  static fs::path dir_;
  static std::string vocab_;
};
fs::path ConllTaggingTest::dir_;
std::string ConllTaggingTest::vocab_;

int64_t vocab_id(const std::string& word) {
  return std::find(kVocab.begin(), kVocab.end(), word) - kVocab.begin();
}

TEST_F(ConllTaggingTest, Conll2003FilesInIob1AndIob2GiveTheSameIob2Records) {
  // HF's conll2003 order: O 0, B-PER 1, I-PER 2, B-ORG 3, I-ORG 4, B-LOC 5,
  // I-LOC 6, B-MISC 7, I-MISC 8. By hand from the files: EU B-ORG, German
  // B-MISC; Peter B-PER, Blackburn I-PER; BRUSSELS B-LOC, Alpha B-PER,
  // Bravo B-PER (a second person right after the first).
  const std::vector<Names> words = {{"eu", "rejects", "german", "call", "."},
                                    {"peter", "blackburn"},
                                    {"brussels", "alpha", "bravo"}};
  const std::vector<std::vector<int64_t>> labels = {{3, 0, 7, 0, 0}, {1, 2}, {5, 1, 1}};
  for (const char* input : {"iob1", "iob2"}) {
    SCOPED_TRACE(input);
    const auto o = options("conll2003", input);
    const auto report = garden::nlp::create_finetuning_data(o);
    EXPECT_EQ(report.train_examples, 3);
    EXPECT_EQ(report.eval_examples, 3);
    EXPECT_EQ(report.test_examples, 3);
    const json meta = meta_of(o);
    EXPECT_EQ(meta.at("task_type"), "bert_tagging");
    EXPECT_EQ(meta.at("label_list"), json(Names{"O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC",
                                                "I-LOC", "B-MISC", "I-MISC"}));
    EXPECT_EQ(meta.at("test_data_size"), 3);
    for (const auto& file :
         {o.train_data_output_path, o.eval_data_output_path, o.test_data_output_path}) {
      const auto records = ref::read_records(file);
      ASSERT_EQ(records.size(), 3u);
      for (std::size_t s = 0; s < records.size(); ++s) {
        auto f = ref::ref_parse_example(records[s]);
        std::vector<int64_t> ids = {2}, label_ids = {-1};
        for (const auto& w : words[s]) ids.push_back(vocab_id(w));
        label_ids.insert(label_ids.end(), labels[s].begin(), labels[s].end());
        ids.push_back(3);
        label_ids.push_back(-1);
        ids.resize(8, 0);
        label_ids.resize(8, -1);
        EXPECT_EQ(f["input_ids"].ints, ids) << s;
        EXPECT_EQ(f["label_ids"].ints, label_ids) << s;
        EXPECT_EQ(f["sentence_id"].ints, std::vector<int64_t>{static_cast<int64_t>(s)});
      }
    }
  }
}

// A file saved with a byte order mark before -DOCSTART- reads as the same
// sentences, not one more holding the mark.
TEST_F(ConllTaggingTest, AByteOrderMarkBeforeTheFirstLineIsNotAWord) {
  const std::string text =
      "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n";
  const fs::path plain = dir_ / "plain.txt", marked = dir_ / "marked.txt";
  std::ofstream(plain, std::ios::binary) << text;
  std::ofstream(marked, std::ios::binary) << "\xEF\xBB\xBF" << text;
  const auto a = garden::nlp::read_column_sentences(plain.string(), 0);
  const auto b = garden::nlp::read_column_sentences(marked.string(), 0);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].words, b[i].words) << i;
}

TEST_F(ConllTaggingTest, AnyTagSetTakesItsLabelsFromTheTrainingFileOrLabelList) {
  auto o = options("conll", "pos");
  o.test_data_output_path.clear();
  // valid.txt has ADV, which the training file lacks.
  EXPECT_EQ(error_of([&] { garden::nlp::create_finetuning_data(o); }),
            (dir_ / "pos" / "valid.txt").string() +
                ":3, column 3: label 'ADV' is not in the label list (the labels of '" +
                (dir_ / "pos" / "train.txt").string() + "': O, DET, NOUN, VERB)");
  EXPECT_FALSE(fs::exists(o.train_data_output_path));
  o.eval_data_output_path.clear();
  garden::nlp::create_finetuning_data(o);
  // Sorted, O first.
  EXPECT_EQ(meta_of(o).at("label_list"), json(Names{"O", "DET", "NOUN", "VERB"}));
  const auto records = ref::read_records(o.train_data_output_path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(ref::ref_parse_example(records[1])["label_ids"].ints,
            (std::vector<int64_t>{-1, 2, 3, 0, -1, -1, -1, -1}));

  o = options("conll", "pos");
  o.test_data_output_path.clear();
  o.label_list = "O, NOUN,VERB,DET,ADV";
  garden::nlp::create_finetuning_data(o);
  EXPECT_EQ(meta_of(o).at("label_list"), json(Names{"O", "NOUN", "VERB", "DET", "ADV"}));
  EXPECT_EQ(ref::ref_parse_example(ref::read_records(o.eval_data_output_path)[0])["label_ids"].ints,
            (std::vector<int64_t>{-1, 3, 1, 4, -1, -1, -1, -1}));
  o.label_list = "NOUN,VERB,DET,ADV";
  EXPECT_EQ(error_of([&] { garden::nlp::create_finetuning_data(o); }),
            (dir_ / "pos" / "train.txt").string() +
                ":7, column 3: label 'O' is not in the label list (--label_list: NOUN, VERB, DET, "
                "ADV)");
  o.label_list = "O,NOUN,,VERB";
  EXPECT_EQ(error_of([&] { garden::nlp::create_finetuning_data(o); }),
            "--label_list, label 3 is empty ('O,NOUN,,VERB')");
  o.label_list = "O,NOUN,O";
  EXPECT_EQ(error_of([&] { garden::nlp::create_finetuning_data(o); }),
            "--label_list, label 3: 'O' is listed twice");
}

TEST_F(ConllTaggingTest, EachRefusalIsOneLineNamingTheFileAndLine) {
  const fs::path bad = dir_ / "bad";
  auto refusal = [&](const std::string& task, const std::string& train) {
    fs::remove_all(bad);
    fs::create_directories(bad);
    write_text_file(bad / "train.txt", train);
    auto o = options(task, "bad");
    o.eval_data_output_path.clear();
    o.test_data_output_path.clear();
    const std::string message = error_of([&] { garden::nlp::create_finetuning_data(o); });
    EXPECT_FALSE(fs::exists(o.train_data_output_path)) << message;
    EXPECT_FALSE(fs::exists(o.meta_data_file_path)) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  };
  const std::string train = (bad / "train.txt").string();
  EXPECT_EQ(refusal("conll2002", "EU NNP I-NP I-ORG\n"),
            "--tagging_task_name 'conll2002' is not one of panx, udpos, conll2003, conll (any tag "
            "set)");
  EXPECT_EQ(refusal("conll2003", "EU NNP I-NP I-ORG\nrejects VBZ O\n"),
            train + ":2: expected 4 columns (word POS chunk NER), got 3");
  EXPECT_EQ(refusal("conll", "EU NNP I-ORG\n\nrejects O\n"),
            train + ":3: expected 3 columns (as line 1), got 2");
  EXPECT_EQ(refusal("conll", "EU\n"),
            train +
                ":1: expected a word and a tag (columns separated by spaces or tabs, the tag "
                "last), got 1 column");
  EXPECT_EQ(refusal("conll2003", "EU NNP I-NP I-ORG\nrejects VBZ I-VP E-ORG\n"),
            train +
                ":2, column 4: tag 'E-ORG' is not an IOB tag: O, or B- or I- before the "
                "entity type");
  EXPECT_EQ(refusal("conll2003", "EU NNP I-NP I-ORG\nrejects VBZ I-VP IORG\n"),
            train +
                ":2, column 4: tag 'IORG' is not an IOB tag: O, or B- or I- before the "
                "entity type");
  EXPECT_EQ(refusal("conll2003", "EU NNP I-NP I-FOO\n"),
            train +
                ":1, column 4: tag 'I-FOO' has the entity type 'FOO', not one of PER, ORG, "
                "LOC, MISC");
  EXPECT_TRUE(contains(refusal("conll2003", "EU NNP I-NP \xff\n"), train + ":1: "));
  write_text_file(bad / "eng.train", "EU NNP I-NP I-ORG\n");
  auto o = options("conll2003", "bad");
  EXPECT_EQ(error_of([&] { garden::nlp::create_finetuning_data(o); }),
            "--input_data_dir '" + bad.string() +
                "' has two training files, train.txt and eng.train: keep one");
  fs::remove(bad / "train.txt");
  EXPECT_EQ(error_of([&] { garden::nlp::create_finetuning_data(o); }),
            "--input_data_dir '" + bad.string() +
                "' has no dev file: looked for valid.txt, dev.txt, eng.testa, dev-en.tsv");
  o.label_list = "O,B-PER";
  EXPECT_TRUE(contains(error_of([&] { garden::nlp::create_finetuning_data(o); }),
                       "--label_list is for --tagging_task_name=conll (any tag set)"));
}

// bert/tagging at a tiny size reading the records `train` and `eval` name.
std::shared_ptr<garden::config::ExperimentConfig> tiny_tagging(const std::string& train,
                                                               const std::string& eval,
                                                               const std::string& more = "") {
  auto experiment = garden::config::get_experiment_config("bert/tagging");
  garden::config::apply_override(
      *experiment,
      "task.model.encoder.bert.vocab_size=24,task.model.encoder.bert.hidden_size=32,"
      "task.model.encoder.bert.num_layers=2,task.model.encoder.bert.num_attention_heads=2,"
      "task.model.encoder.bert.intermediate_size=64,"
      "task.model.encoder.bert.max_position_embeddings=16,"
      "task.train_data.seq_length=16,task.validation_data.seq_length=16,"
      "task.train_data.global_batch_size=16,task.validation_data.global_batch_size=16,"
      "trainer.train_steps=150,trainer.steps_per_loop=150,trainer.summary_interval=150,"
      "trainer.checkpoint_interval=150,trainer.validation_interval=150,"
      "trainer.validation_steps=-1,"
      "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=0.002,"
      "trainer.optimizer_config.learning_rate.polynomial.decay_steps=150,"
      "trainer.optimizer_config.warmup.polynomial.warmup_steps=10,"
      "runtime.distribution_strategy=one_device,runtime.seed=5" +
          more);
  auto& task = static_cast<garden::nlp::TaggingConfig&>(*experiment->task);
  task.train_data.input_path = train;
  task.validation_data.input_path = eval;
  return experiment;
}

TEST_F(ConllTaggingTest, ClassNamesComeFromTheMetaDataBesideTheRecords) {
  garden::set_quiet(true);
  const auto o = options("conll2003", "iob2");
  garden::nlp::create_finetuning_data(o);
  auto experiment = tiny_tagging(o.train_data_output_path, o.eval_data_output_path);
  garden::finalize_config(*experiment);
  const auto& task = static_cast<const garden::nlp::TaggingConfig&>(*experiment->task);
  EXPECT_EQ(static_cast<const Names&>(task.class_names), garden::nlp::conll2003_labels());

  // Given and equal: kept; given and different: one line naming both.
  auto same = tiny_tagging(o.train_data_output_path, o.eval_data_output_path,
                           ",task.class_names=[O,B-PER,I-PER,B-ORG,I-ORG,B-LOC,I-LOC,B-MISC,"
                           "I-MISC]");
  EXPECT_EQ(error_of([&] { garden::finalize_config(*same); }), "(no error)");
  auto other = tiny_tagging(o.train_data_output_path, o.eval_data_output_path,
                            ",task.class_names=[O,B-PER,I-PER,B-LOC,I-LOC,B-ORG,I-ORG]");
  EXPECT_EQ(error_of([&] { garden::finalize_config(*other); }),
            "task.class_names [O, B-PER, I-PER, B-LOC, I-LOC, B-ORG, I-ORG] differ from the "
            "label_list [O, B-PER, I-PER, B-ORG, I-ORG, B-LOC, I-LOC, B-MISC, I-MISC] of the "
            "meta data '" +
                o.meta_data_file_path +
                "' beside task.train_data.input_path; leave task.class_names unset to take the "
                "meta data's");

  // No meta data beside the records: unset is an error, given is kept.
  fs::create_directories(dir_ / "alone");
  fs::copy_file(o.train_data_output_path, dir_ / "alone" / "train.tfrecord",
                fs::copy_options::overwrite_existing);
  const std::string alone = (dir_ / "alone" / "train.tfrecord").string();
  auto unset = tiny_tagging(alone, "");
  EXPECT_EQ(error_of([&] { garden::finalize_config(*unset); }),
            "task.class_names is empty and no tagging meta data (a JSON file with task_type "
            "bert_tagging, as create_finetuning_data writes) is in the folder of "
            "task.train_data.input_path '" +
                alone + "': list the label of each id in task.class_names");
  auto given = tiny_tagging(alone, "", ",task.class_names=[O,B-X,I-X]");
  garden::finalize_config(*given);
  EXPECT_EQ(static_cast<const garden::nlp::TaggingConfig&>(*given->task).class_names,
            (garden::config::NameList{"O", "B-X", "I-X"}));

  // Two tagging meta data with different lists in one folder: unset names
  // both.
  write_text_file(dir_ / "alone" / "a_meta.json",
                  R"({"task_type": "bert_tagging", "label_list": ["O", "B-X", "I-X"]})");
  write_text_file(dir_ / "alone" / "b_meta.json",
                  R"({"task_type": "bert_tagging", "label_list": ["O", "B-Y"]})");
  unset = tiny_tagging(alone, "");
  EXPECT_EQ(error_of([&] { garden::finalize_config(*unset); }),
            "task.class_names is empty and the folder of task.train_data.input_path holds "
            "tagging meta data with different label lists: '" +
                (dir_ / "alone" / "a_meta.json").string() + "' [O, B-X, I-X] and '" +
                (dir_ / "alone" / "b_meta.json").string() + "' [O, B-Y]: set task.class_names");
  given = tiny_tagging(alone, "", ",task.class_names=[O,B-Y]");
  EXPECT_EQ(error_of([&] { garden::finalize_config(*given); }), "(no error)");
  garden::set_quiet(false);
}

TEST_F(ConllTaggingTest, TheTaskReportsSeqevalF1InTheModeItsConfigNames) {
  // The hand-scored case above as label ids in HF's conll2003 order.
  const garden::IdRows truth = {{1, 2, 0, 5, 6}, {7, 0}};
  const garden::IdRows found = {{2, 2, 0, 5, 4}, {7, 7}};
  for (const auto& [mode, f1] :
       std::vector<std::pair<std::string, double>>{{"default", 0.5}, {"strict", 1.0 / 3.0}}) {
    auto experiment = tiny_tagging("", "",
                                   ",task.class_names=[O,B-PER,I-PER,B-ORG,I-ORG,B-LOC,I-LOC,B-"
                                   "MISC,I-MISC],task.seqeval_mode=" +
                                       mode);
    garden::config::validate_config(*experiment);
    const auto task = garden::get_task(experiment->task, "");
    const garden::Logs logs = task->reduce_aggregated_logs(
        {{"tagging_label_rows", truth}, {"tagging_predict_rows", found}}, 0);
    EXPECT_DOUBLE_EQ(garden::to_double(logs.at("f1")), f1) << mode;
    EXPECT_DOUBLE_EQ(garden::to_double(logs.at("accuracy")), 4.0 / 7.0) << mode;
  }
  auto bad_mode = tiny_tagging("", "", ",task.class_names=[O],task.seqeval_mode=lenient");
  EXPECT_TRUE(contains(error_of([&] { garden::config::validate_config(*bad_mode); }),
                       "'lenient' is not one of default, strict"));
  auto not_iob = tiny_tagging("", "", ",task.class_names=[O,NOUN],task.seqeval_mode=strict");
  EXPECT_TRUE(contains(error_of([&] { garden::config::validate_config(*not_iob); }),
                       "class 1 'NOUN' does not start with B, I or O"));
}

TEST_F(ConllTaggingTest, ATinyRunOnConll2003FilesReportsStrictF1) {
  garden::set_quiet(true);
  // Training data in IOB1 as CoNLL-2003 ships it, dev data in IOB2.
  auto o = options("conll2003", "run");
  o.test_data_output_path.clear();
  o.max_seq_length = 16;
  garden::nlp::create_finetuning_data(o);
  auto experiment =
      tiny_tagging(o.train_data_output_path, o.eval_data_output_path, ",task.seqeval_mode=strict");
  garden::finalize_config(*experiment);
  garden::RunOptions run;
  run.model_dir = (dir_ / "run_model").string();
  run.mode = "train_and_eval";
  const auto logs = garden::run_experiment(experiment, run);
  // Strict F1 is high only if the IOB1 training tags became IOB2: an I-
  // that starts an entity would teach the model entities strict mode does
  // not count.
  EXPECT_GE(garden::to_double(logs.at("f1")), 0.95);
  EXPECT_GE(garden::to_double(logs.at("accuracy")), 0.95);
  // params.yaml records the class names the meta data gave.
  const auto params = YAML::LoadFile((dir_ / "run_model" / "params.yaml").string());
  EXPECT_EQ(params["task"]["class_names"].as<Names>(), garden::nlp::conll2003_labels());
  garden::set_quiet(false);
}

}  // namespace
