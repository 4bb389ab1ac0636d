// Question answering end to end: SQuAD JSON read into words and character
// offsets, windows cut doc_stride apart with their maps worked out by hand,
// the windows' logits merged into answers as Model Garden merges them,
// create_finetuning_data's records read back by the tests' own reader, and
// a tiny model that learns to answer, scored by the official rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/nlp/data/squad_data.h"
#include "garden/nlp/metrics/squad_metrics.h"
#include "garden/nlp/tasks/question_answering_config.h"
#include "nlp/squad_fixture.h"
#include "reference_formats.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
namespace ref = garden_test::reference;
using garden::nlp::FinetuningTokenizer;
using garden::nlp::SquadFeature;
using json = nlohmann::json;

using squad_fixture::fruit_questions;
using squad_fixture::one_question;

class QuestionAnsweringTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    garden::register_builtins();
    dir_ = fs::temp_directory_path() / ("question_answering_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    vocab_ = garden_test::write_text_file(dir_ / "vocab.txt", squad_fixture::squad_vocab_text());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::shared_ptr<const FinetuningTokenizer> tokenizer() {
    return FinetuningTokenizer::open(FinetuningTokenizer::Kind::kWordPiece, vocab_, true, "vocab");
  }
  // "the cat sat on the (mat) the dog sat", asked "where is the mat?"; the
  // answer "mat" starts at character 20, inside the word "(mat)".
  static std::vector<garden::nlp::SquadExample> mat_example() {
    const std::string file = garden_test::write_text_file(
        dir_ / "mat.json",
        one_question("the cat sat on the (mat) the dog sat", "where is the mat?", "mat", 20)
            .dump());
    return garden::nlp::read_squad_examples(file, true, false).examples;
  }
  static std::vector<SquadFeature> mat_windows() {
    garden::nlp::SquadConversionOptions o;
    o.max_seq_length = 12;
    o.max_query_length = 4;
    o.doc_stride = 2;
    o.is_training = true;
    return garden::nlp::convert_squad_examples(*tokenizer(), mat_example(), o);
  }
  static fs::path dir_;
  static std::string vocab_;
};
fs::path QuestionAnsweringTest::dir_;
std::string QuestionAnsweringTest::vocab_;

TEST_F(QuestionAnsweringTest, ParagraphsSplitIntoWordsAndAnswersIntoWordPositions) {
  // Offsets count characters, not bytes: "café" is 4 of them.
  const std::string file = garden_test::write_text_file(
      dir_ / "cafe.json", one_question("a café\tby the  river", "where?", "river", 15).dump());
  const auto read = garden::nlp::read_squad_examples(file, true, false);
  ASSERT_EQ(read.examples.size(), 1u);
  const auto& e = read.examples[0];
  EXPECT_EQ(e.doc_tokens, (std::vector<std::string>{"a", "café", "by", "the", "river"}));
  EXPECT_EQ(e.start_position, 4);
  EXPECT_EQ(e.end_position, 4);
  EXPECT_EQ(e.answers, std::vector<std::string>{"river"});
  // An answer that is not where answer_start says: skipped for training,
  // kept (without positions) for evaluation.
  const std::string moved = garden_test::write_text_file(
      dir_ / "moved.json", one_question("a café by the river", "where?", "river", 2).dump());
  const auto skipped = garden::nlp::read_squad_examples(moved, true, false);
  EXPECT_EQ(skipped.examples.size(), 0u);
  EXPECT_EQ(skipped.skipped, 1);
  const auto kept = garden::nlp::read_squad_examples(moved, false, false);
  ASSERT_EQ(kept.examples.size(), 1u);
  EXPECT_EQ(kept.examples[0].start_position, -1);
  // v2.0: is_impossible questions have no answer.
  json impossible = one_question("a b", "c?", "a", 0);
  auto& qa = impossible["data"][0]["paragraphs"][0]["qas"][0];
  qa["is_impossible"] = true;
  qa["answers"] = json::array();
  const auto v2 = garden::nlp::read_squad_examples(
      garden_test::write_text_file(dir_ / "v2.json", impossible.dump()), true, true);
  ASSERT_EQ(v2.examples.size(), 1u);
  EXPECT_TRUE(v2.examples[0].is_impossible);
}

TEST_F(QuestionAnsweringTest, BadFilesNameTheLineColumnOrJsonPath) {
  const std::string broken =
      garden_test::write_text_file(dir_ / "broken.json", "{\"data\": [\n  {\"paragraphs\": [}\n]}");
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_squad_examples(broken, true, false);
            }).find(broken + ": line 2, column 19: not JSON"),
            std::string::npos);
  json no_answers = one_question("a b", "c?", "a", 0);
  no_answers["data"][0]["paragraphs"][0]["qas"][0].erase("answers");
  const std::string missing =
      garden_test::write_text_file(dir_ / "missing.json", no_answers.dump());
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_squad_examples(missing, true, false);
            }).find(missing + ": data[0].paragraphs[0].qas[0] has no 'answers'"),
            std::string::npos);
  const std::string past =
      garden_test::write_text_file(dir_ / "past.json", one_question("a b", "c?", "b", 7).dump());
  EXPECT_NE(garden_test::error_of([&] { garden::nlp::read_squad_examples(past, true, false); })
                .find("qas[0].answers[0] (id q1): answer_start 7 and 1 characters do not fit in "
                      "the context's 3"),
            std::string::npos);
  json typed = one_question("a b", "c?", "a", 0);
  typed["data"][0]["paragraphs"][0]["context"] = 5;
  const std::string wrong = garden_test::write_text_file(dir_ / "typed.json", typed.dump());
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_squad_examples(wrong, true, false);
            }).find("data[0].paragraphs[0].context must be a string, not number"),
            std::string::npos);
  json two = one_question("a b", "c?", "a", 0);
  two["data"][0]["paragraphs"][0]["qas"][0]["answers"].push_back(
      {{"text", "b"}, {"answer_start", 2}});
  const std::string twice = garden_test::write_text_file(dir_ / "two.json", two.dump());
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_squad_examples(twice, true, false);
            }).find("for training, each answerable question has exactly 1 answer, not 2"),
            std::string::npos);
  EXPECT_EQ(garden::nlp::read_squad_examples(twice, false, false).examples[0].answers.size(), 2u);
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_squad_examples((dir_ / "absent.json").string(), true, false);
            }).find("absent.json"),
            std::string::npos);
}

TEST_F(QuestionAnsweringTest, LongParagraphsAreCutIntoWindowsDocStrideApart) {
  // Pieces: the cat sat on the ( mat ) the dog sat (11); the question's 5
  // pieces cut to 4; 12 - 4 - 3 = 5 pieces a window, starting at 0, 2, 4, 6.
  const auto windows = mat_windows();
  ASSERT_EQ(windows.size(), 4u);
  EXPECT_EQ(windows[0].tokens, (std::vector<int64_t>{2, 12, 13, 5, 9, 3, 5, 6, 7, 8, 5, 3}));
  EXPECT_EQ(windows[2].tokens, (std::vector<int64_t>{2, 12, 13, 5, 9, 3, 5, 10, 9, 11, 5, 3}));
  EXPECT_EQ(windows[2].segment_ids, (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(windows[2].token_to_orig_map,
            (std::map<int64_t, int64_t>{{6, 4}, {7, 5}, {8, 5}, {9, 5}, {10, 6}}));
  for (std::size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(windows[i].unique_id, 1000000000 + static_cast<int64_t>(i));
    EXPECT_EQ(windows[i].doc_span_index, static_cast<int64_t>(i));
  }
  // The answer "mat" narrowed from "( mat )" to its own piece, doc piece 6:
  // outside window 0; at 6 + 6 - start in the others.
  EXPECT_EQ(windows[0].start_position, 0);
  EXPECT_EQ(windows[1].start_position, 10);
  EXPECT_EQ(windows[2].start_position, 8);
  EXPECT_EQ(windows[2].end_position, 8);
  EXPECT_EQ(windows[3].start_position, 6);
  // Piece 6 has most context in window 2 (2 left, 2 right).
  EXPECT_FALSE(windows[1].token_is_max_context.at(10));
  EXPECT_TRUE(windows[2].token_is_max_context.at(8));
  EXPECT_FALSE(windows[3].token_is_max_context.at(6));
  // Windows shorter than the sequence are padded with zeros, mask 0.
  garden::nlp::SquadConversionOptions wide;
  wide.max_seq_length = 24;
  wide.max_query_length = 8;
  const auto one = garden::nlp::convert_squad_examples(*tokenizer(), mat_example(), wide);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].input_ids.size(), 24u);
  EXPECT_EQ(one[0].input_mask[18], 1);  // [CLS] 5 [SEP] 11 [SEP]: 19 tokens
  EXPECT_EQ(one[0].input_mask[19], 0);
  EXPECT_EQ(one[0].start_position, 6 + 1 + 5 + 1);  // [CLS] 5 question pieces [SEP] then piece 6
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::SquadConversionOptions tight;
              tight.max_seq_length = 6;
              tight.max_query_length = 4;
              garden::nlp::convert_squad_examples(*tokenizer(), mat_example(), tight);
            }).find("leaves no room for the document"),
            std::string::npos);
}

TEST_F(QuestionAnsweringTest, WindowsMergeIntoTheBestSpanWhereItsStartHasMostContext) {
  const auto examples = mat_example();
  const auto windows = mat_windows();
  std::vector<garden::nlp::SquadRawResult> results;
  for (const auto& w : windows)
    results.push_back({w.unique_id, std::vector<float>(12, 0.0f), std::vector<float>(12, 0.0f)});
  // Window 1 scores "mat" highest, but its start has more context in
  // window 2: only window 2's "mat" (5 + 5) counts. Window 3 says "dog"
  // (4 + 4). A five-token span (6..10) is longer than max_answer_length.
  results[1].start_logits[10] = results[1].end_logits[10] = 20;
  results[2].start_logits[8] = results[2].end_logits[8] = 5;
  results[2].start_logits[6] = 3;
  results[2].end_logits[10] = 9;
  results[3].start_logits[9] = results[3].end_logits[9] = 4;
  garden::nlp::SquadPostprocessOptions o;
  o.n_best_size = 3;
  o.max_answer_length = 3;
  auto p = garden::nlp::postprocess_squad(*tokenizer(), examples, windows, results, o);
  // (8, 10) "mat) the" would be 5 + 9 = 14 in three tokens: allowed, best.
  // In "the cat sat on the (mat) the dog sat" it is characters 20 to 27.
  EXPECT_EQ(p.answers.at("q1"), "mat) the");
  EXPECT_EQ(p.nbest.at("q1")[0].start_char, 20);
  EXPECT_EQ(p.nbest.at("q1")[0].end_char, 28);
  results[2].end_logits[10] = 0;
  p = garden::nlp::postprocess_squad(*tokenizer(), examples, windows, results, o);
  // The piece "mat" maps back into the word "(mat)" without its brackets.
  EXPECT_EQ(p.answers.at("q1"), "mat");
  const auto& nbest = p.nbest.at("q1");
  ASSERT_EQ(nbest.size(), 2u);
  EXPECT_EQ(nbest[0].start_char, 20);
  EXPECT_EQ(nbest[0].end_char, 23);
  EXPECT_EQ(nbest[1].text, "dog");
  EXPECT_EQ(nbest[1].start_char, 29);
  EXPECT_EQ(nbest[1].end_char, 32);
  EXPECT_DOUBLE_EQ(nbest[0].start_logit + nbest[0].end_logit, 10.0);
  EXPECT_GT(nbest[0].probability, nbest[1].probability);
  double sum = 0;
  for (const auto& n : nbest) sum += n.probability;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  // v2.0: the no-answer score (the lowest [CLS] start + end over windows,
  // here 6 + 6) beats "mat" (10) by 2: above threshold 0, below 3.
  for (auto& r : results) r.start_logits[0] = r.end_logits[0] = 6;
  o.version_2_with_negative = true;
  p = garden::nlp::postprocess_squad(*tokenizer(), examples, windows, results, o);
  EXPECT_EQ(p.answers.at("q1"), "");
  EXPECT_DOUBLE_EQ(p.scores_diff.at("q1"), 2.0);
  o.null_score_diff_threshold = 3.0;
  p = garden::nlp::postprocess_squad(*tokenizer(), examples, windows, results, o);
  EXPECT_EQ(p.answers.at("q1"), "mat");
}

TEST_F(QuestionAnsweringTest, ARawQuestionsAnswerIsPlacedInItsContextByCharacters) {
  // A served question: its context split as a paragraph is, each word's
  // first character kept ("café" is 4 characters, 5 bytes; a tab and two
  // spaces are whitespace).
  const auto question = garden::nlp::squad_question("7", "where?", "a café\tby  the river ");
  EXPECT_EQ(question.qas_id, "7");
  EXPECT_EQ(question.question_text, "where?");
  EXPECT_EQ(question.doc_tokens, (std::vector<std::string>{"a", "café", "by", "the", "river"}));
  EXPECT_EQ(question.doc_token_offsets, (std::vector<int64_t>{0, 2, 7, 11, 15}));
  // One window: [CLS] where ? [SEP] a [UNK] by the river [SEP]; the span
  // "by the" (positions 6, 7) is answered with the words' single space, and
  // placed at characters [7, 14) of the context, "by  the".
  garden::nlp::SquadConversionOptions c;
  c.max_seq_length = 16;
  c.max_query_length = 4;
  const auto windows = garden::nlp::convert_squad_examples(*tokenizer(), {question}, c);
  ASSERT_EQ(windows.size(), 1u);
  ASSERT_EQ(windows[0].tokens, (std::vector<int64_t>{2, 12, 14, 3, 17, 1, 28, 5, 29, 3}));
  garden::nlp::SquadRawResult r{windows[0].unique_id, std::vector<float>(16, 0.0f),
                                std::vector<float>(16, 0.0f)};
  r.start_logits[6] = 4;
  r.end_logits[7] = 4;
  auto p = garden::nlp::postprocess_squad(*tokenizer(), {question}, windows, {r}, {});
  EXPECT_EQ(p.answers.at("7"), "by the");
  EXPECT_EQ(p.nbest.at("7")[0].start_char, 7);
  EXPECT_EQ(p.nbest.at("7")[0].end_char, 14);
  // "café", an unknown word, is the word itself: characters [2, 6).
  r.start_logits[6] = 0;
  r.start_logits[5] = r.end_logits[5] = 9;
  p = garden::nlp::postprocess_squad(*tokenizer(), {question}, windows, {r}, {});
  EXPECT_EQ(p.answers.at("7"), "café");
  EXPECT_EQ(p.nbest.at("7")[0].start_char, 2);
  EXPECT_EQ(p.nbest.at("7")[0].end_char, 6);
}

TEST_F(QuestionAnsweringTest, FinalTextMapsPiecesBackOntoTheOriginalWords) {
  // BERT's own example: the prediction "steve smith" in "Steve Smith's".
  EXPECT_EQ(garden::nlp::squad_final_text("steve smith", "Steve Smith's", true), "Steve Smith");
  EXPECT_EQ(garden::nlp::squad_final_text("1895", "(1895-1943).", true), "1895");
  EXPECT_EQ(garden::nlp::squad_final_text("smith ' s", "Steve Smith's", true), "Smith's");
  // Not found: the whole original text.
  EXPECT_EQ(garden::nlp::squad_final_text("jones", "Steve Smith's", true), "Steve Smith's");
  // Cased: "steve" is not in "Steve Smith".
  EXPECT_EQ(garden::nlp::squad_final_text("steve", "Steve Smith", false), "Steve Smith");
}

TEST_F(QuestionAnsweringTest, RecordsReadBackByAnIndependentReader) {
  garden::nlp::FinetuningDataOptions o;
  o.fine_tuning_task_type = "squad";
  o.squad_data_file = (dir_ / "mat.json").string();
  mat_example();  // writes mat.json
  o.train_data_output_path = (dir_ / "squad.tfrecord").string();
  o.meta_data_file_path = (dir_ / "squad_meta.json").string();
  o.vocab_file = vocab_;
  o.max_seq_length = 12;
  o.max_query_length = 4;
  o.doc_stride = 2;
  const auto report = garden::nlp::create_finetuning_data(o);
  EXPECT_EQ(report.train_examples, 4);
  const auto meta = json::parse(std::ifstream(dir_ / "squad_meta.json"));
  EXPECT_EQ(meta.at("task_type"), "bert_squad");
  EXPECT_EQ(meta.at("doc_stride"), 2);
  EXPECT_EQ(meta.at("max_query_length"), 4);
  const auto windows = mat_windows();
  const auto records = ref::read_records(o.train_data_output_path);
  ASSERT_EQ(records.size(), 4u);
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto f = ref::ref_parse_example(records[i]);
    EXPECT_EQ(f.size(), 7u);
    EXPECT_EQ(f["unique_ids"].ints, std::vector<int64_t>{windows[i].unique_id});
    EXPECT_EQ(f["input_ids"].ints, windows[i].input_ids);
    EXPECT_EQ(f["input_mask"].ints, windows[i].input_mask);
    EXPECT_EQ(f["segment_ids"].ints, windows[i].segment_ids);
    EXPECT_EQ(f["start_positions"].ints, std::vector<int64_t>{windows[i].start_position});
    EXPECT_EQ(f["end_positions"].ints, std::vector<int64_t>{windows[i].end_position});
    EXPECT_EQ(f["is_impossible"].ints, std::vector<int64_t>{0});
  }
  // The evaluation reads the JSON: an eval output is refused, as is a
  // missing squad_data_file; nothing is written.
  o.eval_data_output_path = (dir_ / "eval.tfrecord").string();
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::create_finetuning_data(o);
            }).find("--eval_data_output_path is not used for squad"),
            std::string::npos);
  o.eval_data_output_path.clear();
  o.squad_data_file.clear();
  o.train_data_output_path = (dir_ / "none.tfrecord").string();
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::create_finetuning_data(o);
            }).find("--squad_data_file"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "none.tfrecord"));
}

TEST_F(QuestionAnsweringTest, ATinyModelLearnsToAnswerAndIsScoredByTheOfficialRules) {
  garden::set_quiet(true);
  const std::string train =
      garden_test::write_text_file(dir_ / "fruit_train.json", fruit_questions(300, 1).dump());
  const std::string dev =
      garden_test::write_text_file(dir_ / "fruit_dev.json", fruit_questions(60, 2).dump());
  garden::nlp::FinetuningDataOptions o;
  o.fine_tuning_task_type = "squad";
  o.squad_data_file = train;
  o.train_data_output_path = (dir_ / "fruit.tfrecord").string();
  o.meta_data_file_path = (dir_ / "fruit_meta.json").string();
  o.vocab_file = vocab_;
  o.max_seq_length = 16;
  o.max_query_length = 4;
  o.doc_stride = 4;
  const auto report = garden::nlp::create_finetuning_data(o);
  EXPECT_GT(report.train_examples, 300);  // long paragraphs make several windows
  auto experiment = garden::config::get_experiment_config("bert/squad");
  garden::config::apply_override(
      *experiment,
      "task.model.encoder.bert.vocab_size=30,task.model.encoder.bert.hidden_size=32,"
      "task.model.encoder.bert.num_layers=2,task.model.encoder.bert.num_attention_heads=2,"
      "task.model.encoder.bert.intermediate_size=64,"
      "task.model.encoder.bert.max_position_embeddings=16,"
      "task.train_data.seq_length=16,task.validation_data.seq_length=16,"
      "task.validation_data.query_length=4,"
      "task.validation_data.doc_stride=4,"
      "task.train_data.global_batch_size=16,task.validation_data.global_batch_size=16,"
      "trainer.train_steps=200,trainer.steps_per_loop=200,trainer.summary_interval=200,"
      "trainer.checkpoint_interval=200,trainer.validation_interval=200,trainer.validation_steps=-1,"
      "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=0.003,"
      "trainer.optimizer_config.learning_rate.polynomial.decay_steps=200,"
      "trainer.optimizer_config.warmup.polynomial.warmup_steps=10,"
      "runtime.distribution_strategy=one_device,runtime.seed=5");
  auto& task = static_cast<garden::nlp::QuestionAnsweringConfig&>(*experiment->task);
  task.train_data.input_path = o.train_data_output_path;
  task.validation_data.input_path = dev;
  task.train_data.vocab_file = vocab_;
  garden::config::validate_config(*experiment);
  garden::finalize_config(*experiment);
  garden::RunOptions run;
  run.model_dir = (dir_ / "run").string();
  run.mode = "train_and_eval";
  const auto logs = garden::run_experiment(experiment, run);
  EXPECT_GE(garden::to_double(logs.at("exact_match")), 0.95);
  EXPECT_GE(garden::to_double(logs.at("final_f1")), 0.95);
  EXPECT_GE(garden::to_double(logs.at("start_position_accuracy")), 0.9);
  // The answers the run wrote score the same by the official rules.
  const auto predictions = json::parse(std::ifstream(fs::path(run.model_dir) / "predictions.json"))
                               .get<std::map<std::string, std::string>>();
  EXPECT_EQ(predictions.size(), 60u);
  const auto examples = garden::nlp::read_squad_examples(dev, false, false).examples;
  std::map<std::string, std::vector<std::string>> truths;
  for (const auto& e : examples) truths[e.qas_id] = e.answers;
  const auto scores = garden::nlp::evaluate_squad(truths, predictions);
  EXPECT_DOUBLE_EQ(scores.exact_match / 100.0, garden::to_double(logs.at("exact_match")));
  EXPECT_DOUBLE_EQ(scores.f1 / 100.0, garden::to_double(logs.at("final_f1")));
  garden::set_quiet(false);
}

TEST_F(QuestionAnsweringTest, ConfigRefusesWhatItCannotDo) {
  auto refused = [](const std::string& override_text) {
    auto experiment = garden::config::get_experiment_config("bert/squad");
    return garden_test::error_of([&] {
      garden::config::apply_override(*experiment, override_text);
      garden::config::validate_config(*experiment);
    });
  };
  EXPECT_NE(refused("task.hub_module_url=x").find("hub_module_url"), std::string::npos);
  EXPECT_NE(refused("task.validation_data.tokenization=SentencePiece")
                .find("validation_data.tokenization"),
            std::string::npos);
  EXPECT_NE(refused("task.validation_data.version_2_with_negative=true")
                .find("validation_data.version_2_with_negative"),
            std::string::npos);
  EXPECT_NE(refused("task.validation_data.query_length=400").find("query_length"),
            std::string::npos);
  EXPECT_NE(refused("task.n_best_size=0").find("n_best_size"), std::string::npos);
  EXPECT_NE(refused("task.train_data.seq_length=1024").find("max_position_embeddings"),
            std::string::npos);
  // Records made for SQuAD 2.0 (create_finetuning_data's meta data beside
  // them says so) are not trained and scored as 1.1 without a word.
  const fs::path records = dir_ / "v2_records";
  fs::create_directories(records);
  std::ofstream(records / "meta.json")
      << "{\"task_type\": \"bert_squad\", \"version_2_with_negative\": true}\n";
  auto v1 = garden::config::get_experiment_config("bert/squad");
  auto& task = dynamic_cast<garden::nlp::QuestionAnsweringConfig&>(*v1->task);
  task.train_data.input_path = (records / "train.tfrecord").string();
  EXPECT_EQ(garden_test::error_of([&] { task.resolve_from_files(); }),
            "'" + (records / "meta.json").string() +
                "' says the records beside it were made with version_2_with_negative true, but "
                "task.train_data.version_2_with_negative is false: set "
                "task.train_data.version_2_with_negative=true,"
                "task.validation_data.version_2_with_negative=true");
  task.train_data.version_2_with_negative = true;
  EXPECT_NO_THROW(task.resolve_from_files());
}

}  // namespace
