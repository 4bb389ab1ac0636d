// `garden spm ...` as a user meets it: the user's files are never replaced
// or removed by a training, whether it works or fails, and scratch files
// live (and die) in a temporary directory of their own.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"
#include "garden/base/error.h"
#include "garden/data/sentencepiece.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliRun;
using garden_test::entries;
using garden_test::expect_one_error_line;
using garden_test::slurp;
using garden_test::spit;

const std::string kTsv = std::string(GARDEN_DATA_DIR) + "/testdata/en_de_sample.tsv";

class SpmCliTest : public garden_test::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    work_ = dir_ / "work";
    tmp_ = dir_ / "tmp";
    fs::create_directories(work_);
    fs::create_directories(tmp_);
    // The command's scratch directory goes here, where the test can see it.
    const char* old = ::getenv("TMPDIR");
    had_tmpdir_ = old != nullptr;
    if (old) old_tmpdir_ = old;
    ::setenv("TMPDIR", tmp_.c_str(), 1);
  }
  void TearDown() override {
    if (had_tmpdir_)
      ::setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    CliFixture::TearDown();
  }
  std::string work(const std::string& name) const { return (work_ / name).string(); }

  fs::path work_, tmp_;
  bool had_tmpdir_ = false;
  std::string old_tmpdir_;
};

// The new user's command: a plain-text corpus named like the old scratch
// file PREFIX.train.txt, with --tsv_columns it does not have.
TEST_F(SpmCliTest, TsvColumnsNeverTouchTheInputAndLeaveNoScratch) {
  const std::string corpus = "User name\nkeyboards\nManage Custom Sizes\n";
  spit(work_ / "corpus.train.txt", corpus);
  const auto before = entries(work_);
  CliRun run =
      garden("spm train --input='" + work("corpus.train.txt") +
             "' --tsv_columns=0,1 --model_prefix='" + work("corpus") + "' --vocab_size=300");
  expect_one_error_line(run, {work("corpus.train.txt"), "line 1", "column 1"});
  EXPECT_EQ(slurp(work_ / "corpus.train.txt"), corpus);
  EXPECT_EQ(entries(work_), before);
  EXPECT_TRUE(fs::is_empty(tmp_));

  // A column the TSV lacks: no empty scratch file left anywhere.
  fs::copy_file(kTsv, work_ / "pairs.tsv");
  const auto with_tsv = entries(work_);
  run = garden("spm train --input='" + work("pairs.tsv") + "' --tsv_columns=5 --model_prefix='" +
               work("pairs") + "' --vocab_size=200");
  expect_one_error_line(run, {work("pairs.tsv"), "column 5"});
  EXPECT_EQ(entries(work_), with_tsv);
  EXPECT_TRUE(fs::is_empty(tmp_));

  // And what works keeps working: the model and vocabulary, nothing else.
  run = garden("spm train --input='" + work("pairs.tsv") + "' --tsv_columns=0,1 --model_prefix='" +
               work("pairs") + "' --vocab_size=200");
  ASSERT_EQ(run.status, 0) << run.err;
  auto expected = with_tsv;
  expected.insert({"pairs.model", "pairs.vocab"});
  EXPECT_EQ(entries(work_), expected);
  EXPECT_TRUE(fs::is_empty(tmp_));
}

// Two trainings of the same text, each its own process, write the same
// bytes: the model records the --input and --model_prefix the user gave (as
// spm_train does), not the scratch file nor the temporary prefix with its
// process id.
TEST_F(SpmCliTest, TwoTrainingsOfTheSameTextWriteTheSameModel) {
  fs::copy_file(kTsv, work_ / "pairs.tsv");
  const std::string command = "spm train --input='" + work("pairs.tsv") +
                              "' --tsv_columns=0,1 --model_prefix='" + work("m") +
                              "' --vocab_size=200";
  CliRun run = garden(command);
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string model = slurp(work_ / "m.model"), vocab = slurp(work_ / "m.vocab");
  run = garden(command);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(slurp(work_ / "m.model"), model);
  EXPECT_EQ(slurp(work_ / "m.vocab"), vocab);
  EXPECT_NE(model.find(work("pairs.tsv")), std::string::npos);
  EXPECT_EQ(model.find("train.txt"), std::string::npos);
  EXPECT_EQ(model.find(".tmp-"), std::string::npos);
  EXPECT_EQ(model.find(tmp_.string()), std::string::npos);
}

// BERT's special pieces survive the command line whole: CLI11 would read
// "[CLS],[SEP]" as its own bracketed list and strip the brackets.
TEST_F(SpmCliTest, UserDefinedSymbolsKeepTheirBrackets) {
  fs::copy_file(kTsv, work_ / "pairs.tsv");
  CliRun run = garden("spm train --input='" + work("pairs.tsv") +
                      "' --tsv_columns=0 --model_prefix='" + work("sp") +
                      "' --vocab_size=200 --pad_id=0 --unk_id=1 --bos_id=-1 --eos_id=-1 "
                      "--user_defined_symbols='[CLS],[SEP],[MASK]'");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string vocab = slurp(work_ / "sp.vocab");
  EXPECT_EQ(vocab.rfind("<pad>\t0\n<unk>\t0\n[CLS]\t0\n[SEP]\t0\n[MASK]\t0\n", 0), 0u)
      << vocab.substr(0, 80);
}

// An --input that is PREFIX.model or PREFIX.vocab (by any name) would be
// replaced by the training: refused before it starts.
TEST_F(SpmCliTest, AnInputThatIsAnOutputIsRefused) {
  fs::copy_file(kTsv, work_ / "m.vocab");
  fs::create_symlink(work_ / "m.vocab", work_ / "link.txt");
  const std::string kept = slurp(work_ / "m.vocab");
  const auto before = entries(work_);
  for (const std::string& input : std::vector<std::string>{work("m.vocab"), work("link.txt")}) {
    SCOPED_TRACE(input);
    const CliRun run = garden("spm train --input='" + input + "' --model_prefix='" + work("m") +
                              "' --vocab_size=200");
    expect_one_error_line(run, {"--input '" + input + "'", work("m.vocab"), "same file"});
    EXPECT_TRUE(slurp(work_ / "m.vocab") == kept) << "m.vocab was replaced";
    EXPECT_EQ(entries(work_), before);
  }
}

// A training that fails leaves an existing PREFIX.model and PREFIX.vocab as
// they were (never a new model beside an old vocabulary), and no temporary
// files.
TEST_F(SpmCliTest, AFailedTrainingKeepsTheExistingModel) {
  fs::copy_file(kTsv, work_ / "pairs.tsv");
  const std::string train = "spm train --input='" + work("pairs.tsv") +
                            "' --tsv_columns=0,1 --model_prefix='" + work("m") + "'";
  CliRun run = garden(train + " --vocab_size=200");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string model = slurp(work_ / "m.model"), vocab = slurp(work_ / "m.vocab");
  const auto before = entries(work_);

  // SentencePiece refuses: nothing changes.
  run = garden(train + " --vocab_size=100000");
  expect_one_error_line(run, {"Vocabulary size"});
  EXPECT_TRUE(slurp(work_ / "m.model") == model) << "m.model was replaced";
  EXPECT_TRUE(slurp(work_ / "m.vocab") == vocab) << "m.vocab was replaced";
  EXPECT_EQ(entries(work_), before);

  // The vocabulary cannot be written (its name is a directory): the model
  // is not replaced either.
  fs::remove(work_ / "m.vocab");
  fs::create_directory(work_ / "m.vocab");
  run = garden(train + " --vocab_size=150");
  expect_one_error_line(run, {work("m.vocab")});
  EXPECT_TRUE(slurp(work_ / "m.model") == model) << "m.model was replaced";
  EXPECT_EQ(entries(work_), before);
  EXPECT_TRUE(fs::is_empty(tmp_));
}

// Every file a spm command opens is checked first: one line naming the flag
// and the path.
TEST_F(SpmCliTest, InputsAreCheckedNamingTheFlag) {
  fs::create_directories(work_ / "dir");
  const std::string dir = work("dir"), missing = work("missing.txt");
  expect_one_error_line(
      garden("spm train --input='" + dir + "' --model_prefix='" + work("m") + "' --vocab_size=50"),
      {"--input '" + dir + "' is a directory"});
  expect_one_error_line(garden("spm train --input='" + kTsv + "," + missing + "' --model_prefix='" +
                               work("m") + "' --vocab_size=50 --tsv_columns=0"),
                        {"--input '" + missing + "' does not exist"});
  expect_one_error_line(garden("spm train --input='" + kTsv + "' --model_prefix='" + work("m") +
                               "' --vocab_size=50 --tsv_columns=-1"),
                        {"--tsv_columns", "-1"});
  expect_one_error_line(garden("spm train --input='" + kTsv + "' --model_prefix='" +
                               work("nowhere/m") + "' --vocab_size=50 --tsv_columns=0"),
                        {"--model_prefix", work("nowhere") + "' does not exist"});
  expect_one_error_line(garden("spm train --input='" + kTsv + "' --model_prefix='" + work("dir/") +
                               "' --vocab_size=50 --tsv_columns=0"),
                        {"--model_prefix '" + work("dir/") + "' names a directory"});
  expect_one_error_line(garden("spm encode --model='" + dir + "' </dev/null"),
                        {"--model '" + dir + "' is a directory"});
  expect_one_error_line(garden("spm decode --model='" + missing + "' </dev/null"),
                        {"--model '" + missing + "' does not exist"});
  EXPECT_EQ(entries(work_), std::set<std::string>{"dir"});
  EXPECT_TRUE(fs::is_empty(tmp_));
}

// The data-layer helpers the command uses hold the same line for any
// caller: an input is never their output, and a failure writes nothing.
TEST_F(SpmCliTest, HelpersNeverReplaceAnInputNorWriteHalfAnOutput) {
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const garden::Error& e) {
      return e.what();
    }
    return "<no error>";
  };
  const std::string tsv = work("in.tsv"), out = work("out.txt");
  spit(tsv, "a\tb\nc\td\n");
  spit(out, "keep me\n");
  std::string message = error_of([&] { garden::data::write_tsv_columns({tsv}, {0}, tsv); });
  EXPECT_NE(message.find("same file"), std::string::npos) << message;
  EXPECT_EQ(slurp(tsv), "a\tb\nc\td\n");
  message = error_of([&] { garden::data::write_tsv_columns({tsv}, {5}, out); });
  EXPECT_NE(message.find("column 5"), std::string::npos) << message;
  EXPECT_EQ(slurp(out), "keep me\n");
  message = error_of([&] { garden::data::write_tsv_columns({work_.string()}, {0}, out); });
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
  EXPECT_EQ(slurp(out), "keep me\n");

  fs::copy_file(kTsv, work_ / "m.vocab");
  const std::string vocab = slurp(work_ / "m.vocab");
  garden::data::SentencePieceTrainOptions options;
  options.input = {work("m.vocab")};
  options.model_prefix = work("m");
  options.vocab_size = 100;
  message = error_of([&] { garden::data::train_sentencepiece(options); });
  EXPECT_NE(message.find("same file"), std::string::npos) << message;
  EXPECT_TRUE(slurp(work_ / "m.vocab") == vocab) << "m.vocab was replaced";
  EXPECT_EQ(entries(work_), (std::set<std::string>{"in.tsv", "m.vocab", "out.txt"}));
}

}  // namespace
