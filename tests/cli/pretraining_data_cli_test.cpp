// `garden create_pretraining_data` as a user meets it: BERT's flags, the
// records in the files named, and on an error one line and no output file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/cli_fixture.h"
#include "reference_formats.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliRun;
using garden_test::entries;
using garden_test::expect_one_error_line;
using garden_test::spit;

class PretrainingDataCliTest : public garden_test::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    spit(dir_ / "vocab.txt",
         "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\ndog\nran\n.\n");
    spit(dir_ / "corpus.txt",
         "the cat sat on the mat .\nthe dog ran .\nthe cat ran .\n\n"
         "the dog sat .\nthe mat .\n");
  }
  std::string flags(const std::string& input, const std::string& output) const {
    return "create_pretraining_data --input_file='" + input + "' --output_file='" + output +
           "' --vocab_file='" + path("vocab.txt") + "'";
  }
};

TEST_F(PretrainingDataCliTest, WritesTheRecordsRoundRobin) {
  const CliRun run =
      garden(flags(path("corpus.txt"), path("a.tfrecord") + "," + path("b.tfrecord")) +
             " --max_seq_length=16 --dupe_factor=3 --do_lower_case=false"
             " --do_whole_word_mask --num_threads=2");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("documents: 2"), std::string::npos) << run.out;
  const auto a = garden_test::reference::read_records(path("a.tfrecord"));
  const auto b = garden_test::reference::read_records(path("b.tfrecord"));
  EXPECT_GE(a.size(), 3u);
  EXPECT_TRUE(a.size() == b.size() || a.size() == b.size() + 1);
  EXPECT_NE(run.out.find("records:   " + std::to_string(a.size() + b.size())), std::string::npos)
      << run.out;
  EXPECT_EQ(entries(dir_), (std::set<std::string>{"a.tfrecord", "b.tfrecord", "corpus.txt",
                                                  "stderr.txt", "stdout.txt", "vocab.txt"}));
}

TEST_F(PretrainingDataCliTest, ErrorsAreOneLineAndLeaveNoOutput) {
  spit(dir_ / "empty.txt", "");
  expect_one_error_line(garden(flags(path("empty.txt"), path("out.tfrecord"))),
                        {path("empty.txt"), "is empty"});
  EXPECT_FALSE(fs::exists(path("out.tfrecord")));

  const CliRun missing_vocab =
      garden("create_pretraining_data --input_file='" + path("corpus.txt") + "' --output_file='" +
             path("out.tfrecord") + "' --vocab_file='" + path("nope.txt") + "'");
  expect_one_error_line(missing_vocab, {"--vocab_file", path("nope.txt"), "does not exist"});
  EXPECT_FALSE(fs::exists(path("out.tfrecord")));

  const CliRun no_vocab = garden("create_pretraining_data --input_file='" + path("corpus.txt") +
                                 "' --output_file='" + path("out.tfrecord") + "'");
  expect_one_error_line(no_vocab, {"--vocab_file", "--sp_model_file"});

  // An output over an input: refused before anything is read, the input kept.
  const std::string vocab = slurp(dir_ / "vocab.txt");
  expect_one_error_line(
      garden(flags(path("corpus.txt"), path("vocab.txt"))),
      {"--output_file '" + path("vocab.txt") + "' is the same file as --vocab_file"});
  expect_one_error_line(
      garden(flags(path("corpus.txt"), path("corpus.txt"))),
      {"--output_file '" + path("corpus.txt") + "' is the same file as --input_file"});
  EXPECT_EQ(slurp(dir_ / "vocab.txt"), vocab);

  expect_one_error_line(
      garden(flags(path("corpus.txt"), path("out.tfrecord")) + " --masked_lm_prob=2"),
      {"--masked_lm_prob"});
  // A value that is not a number: CLI11's usage error, one line too.
  const CliRun not_a_number =
      garden(flags(path("corpus.txt"), path("out.tfrecord")) + " --max_seq_length=abc");
  EXPECT_EQ(not_a_number.status, 2);
  EXPECT_EQ(not_a_number.err.find('\n'), not_a_number.err.size() - 1) << not_a_number.err;
  EXPECT_EQ(entries(dir_), (std::set<std::string>{"corpus.txt", "empty.txt", "stderr.txt",
                                                  "stdout.txt", "vocab.txt"}));
}

TEST_F(PretrainingDataCliTest, HelpNamesBertsFlags) {
  const CliRun run = garden("create_pretraining_data --help");
  EXPECT_EQ(run.status, 0);
  for (const char* flag :
       {"--input_file", "--output_file", "--vocab_file", "--sp_model_file", "--do_lower_case",
        "--do_whole_word_mask", "--max_seq_length", "--max_predictions_per_seq", "--random_seed",
        "--dupe_factor", "--masked_lm_prob", "--short_seq_prob", "--num_threads"})
    EXPECT_NE(run.out.find(flag), std::string::npos) << flag;
  EXPECT_NE(garden("--help").out.find("create_pretraining_data"), std::string::npos);
}

}  // namespace
