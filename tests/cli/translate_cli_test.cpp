// `garden translate`: a model_dir trained by `garden train` on a handful of
// bundled pairs translates stdin or a file, one line per line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"
#include "device_util.h"
#include "garden/kernels/int8.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliFixture;
using garden_test::CliRun;
using garden_test::slurp;
using garden_test::spit;

using garden_test::lines_of;

// The first 16 pairs of the bundled sample: the lines as they are, and their
// sources and targets.
struct SamplePairs {
  std::string lines;
  std::vector<std::string> sources, targets;
};
SamplePairs sample_pairs() {
  std::ifstream sample(std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv");
  SamplePairs pairs;
  std::string line;
  for (int i = 0; i < 16 && std::getline(sample, line); ++i) {
    pairs.lines += line + "\n";
    const auto tab = line.find('\t');
    pairs.sources.push_back(line.substr(0, tab));
    pairs.targets.push_back(line.substr(tab + 1));
  }
  return pairs;
}

// The demo experiment shrunk to overfit the pairs in `data` in `steps`
// steps (a few seconds on a CPU).
std::string overfit_yaml(const std::string& data, int steps) {
  return "task:\n"
         "  sentencepiece_vocab_size: 100\n"
         "  print_translations: true\n"
         "  model:\n"
         "    embedding_width: 64\n"
         "    dropout_rate: 0.0\n"
         "    label_smoothing: 0.0\n"
         "    encoder: {num_layers: 1, num_attention_heads: 4, intermediate_size: 128,"
         " dropout_rate: 0.0, attention_dropout_rate: 0.0, intermediate_dropout: 0.0}\n"
         "    decoder: {num_layers: 1, num_attention_heads: 4, intermediate_size: 128,"
         " dropout_rate: 0.0, attention_dropout_rate: 0.0, intermediate_dropout: 0.0}\n"
         "  train_data: {input_path: '" +
         data +
         "', global_batch_size: 512, shuffle_buffer_size: 16}\n"
         "  validation_data: {input_path: '" +
         data +
         "', global_batch_size: 512, max_seq_length: 40}\n"
         "trainer:\n"
         "  train_steps: " +
         std::to_string(steps) +
         "\n"
         "  steps_per_loop: 100\n"
         "  summary_interval: 100\n"
         "  validation_interval: " +
         std::to_string(steps) +
         "\n"
         "  checkpoint_interval: " +
         std::to_string(steps / 2) +
         "\n"
         "  optimizer_config:\n"
         "    learning_rate: {type: polynomial, polynomial: {initial_learning_rate: 0.005,"
         " decay_steps: " +
         std::to_string(steps) +
         ", end_learning_rate: 0.0001}}\n"
         "    warmup: {type: null}\n";
}

class TranslateCliTest : public CliFixture {
 protected:
  // One model_dir for the whole suite: the demo experiment shrunk to overfit
  // 16 pairs in a few seconds. ctest runs each test in a process of its own,
  // so the model is kept in the build tree for the garden binary that trained
  // it: the first process trains it (the others wait on a lock) and every
  // later one reuses it. The tests only read it.
  static void SetUpTestSuite() {
    const SamplePairs pairs = sample_pairs();
    sources_ = pairs.sources;
    targets_ = pairs.targets;
    const auto built = fs::last_write_time(GARDEN_CLI_PATH).time_since_epoch().count();
    suite_dir_ = fs::path(GARDEN_BINARY_DIR) / "test_cache" /
                 ("translate_cli_" + std::to_string(static_cast<unsigned long long>(built)));
    fs::create_directories(suite_dir_.parent_path());
    const int lock = ::open((suite_dir_.string() + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
    if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
      train_status_ = -2;
      return;
    }
    if (fs::is_regular_file(suite_dir_ / "model" / "ckpt-400")) {
      train_status_ = 0;
    } else {
      // Models of earlier builds go: this build's replaces them.
      for (const auto& entry : fs::directory_iterator(suite_dir_.parent_path())) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("translate_cli_", 0) == 0 && entry.is_directory() &&
            entry.path() != suite_dir_)
          fs::remove_all(entry.path());
      }
      const fs::path staging = suite_dir_.string() + ".staging";
      fs::remove_all(staging);
      fs::create_directories(staging);
      spit(staging / "pairs.tsv", pairs.lines);
      spit(staging / "overfit.yaml", overfit_yaml((suite_dir_ / "pairs.tsv").string(), 400));
      // Trained in place of the final directory's name, then renamed whole.
      fs::remove_all(suite_dir_);
      fs::rename(staging, suite_dir_);
      const std::string command = std::string("'") + GARDEN_CLI_PATH +
                                  "' train --experiment wmt_transformer/demo --config_file '" +
                                  (suite_dir_ / "overfit.yaml").string() + "' --model_dir '" +
                                  model_dir() + "' >'" + (suite_dir_ / "train.log").string() +
                                  "' 2>&1";
      train_status_ = std::system(command.c_str());
      if (train_status_ != 0) {  // kept for the message; the next process trains again
        fs::remove_all(suite_dir_.string() + ".failed");
        fs::rename(suite_dir_, suite_dir_.string() + ".failed");
      }
    }
    ::flock(lock, LOCK_UN);
    ::close(lock);
  }
  void SetUp() override {
    CliFixture::SetUp();
    ASSERT_EQ(train_status_, 0) << slurp(suite_dir_.string() + ".failed/train.log");
  }

  static std::string model_dir() { return (suite_dir_ / "model").string(); }

  CliRun translate(const std::string& input_text, const std::string& flags = "") {
    spit(dir_ / "input.txt", input_text);
    return garden("translate --model_dir '" + model_dir() + "' " + flags + " <'" +
                  (dir_ / "input.txt").string() + "'");
  }

  static fs::path suite_dir_;
  static int train_status_;
  static std::vector<std::string> sources_, targets_;
};

fs::path TranslateCliTest::suite_dir_;
int TranslateCliTest::train_status_ = -1;
std::vector<std::string> TranslateCliTest::sources_, TranslateCliTest::targets_;

TEST_F(TranslateCliTest, OneLinePerLineInOrderAndEmptyLinesStayEmpty) {
  std::string input;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    input += sources_[i] + "\n";
    if (i == 3) input += "\n";  // an empty line in the middle
  }
  input += "\n";  // and one at the end
  const CliRun run = translate(input, "--batch_size 3");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto outputs = lines_of(run.out);
  ASSERT_EQ(outputs.size(), sources_.size() + 2);
  EXPECT_EQ(outputs[4], "");
  EXPECT_EQ(outputs.back(), "");
  // The overfitted model reproduces its training targets, in input order.
  int exact = 0;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const std::string& output = outputs[i < 4 ? i : i + 1];
    EXPECT_FALSE(output.empty()) << "line " << i + 1;
    exact += output == targets_[i];
  }
  EXPECT_GE(exact, 12) << run.out;
  EXPECT_NE(run.err.find("translated 18 lines (16 non-empty)"), std::string::npos) << run.err;
}

TEST_F(TranslateCliTest, TheRunWroteBleuAndExampleTranslationsToTensorBoard) {
  std::string events;
  for (const auto& entry : fs::directory_iterator(fs::path(model_dir()) / "validation"))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      events += slurp(entry.path());
  // Tags and the text summary's UTF-8 payload are stored as they are.
  EXPECT_NE(events.find("sacrebleu_score"), std::string::npos);
  EXPECT_NE(events.find("bleu_score"), std::string::npos);
  EXPECT_NE(events.find("translations"), std::string::npos);
  EXPECT_NE(events.find("input: " + sources_[0]), std::string::npos);
  EXPECT_NE(events.find("reference: " + targets_[0]), std::string::npos);
  // print_translations logged every pair.
  const std::string log = slurp(suite_dir_ / "train.log");
  for (std::size_t i = 0; i < sources_.size(); ++i)
    EXPECT_NE(log.find("  input:     " + sources_[i] + "\n"), std::string::npos) << i;
}

TEST_F(TranslateCliTest, FilesGreedyAndAnExplicitCheckpointAgreeWithStdin) {
  std::string input;
  for (const auto& s : sources_) input += s + "\n";
  spit(dir_ / "in.txt", input);
  const CliRun from_stdin = translate(input, "--beam_size 1");
  ASSERT_EQ(from_stdin.status, 0) << from_stdin.err;
  const CliRun from_file = garden(
      "translate --model_dir '" + model_dir() + "' --beam_size 1 --input '" + path("in.txt") +
      "' --output '" + path("out.txt") + "' --checkpoint '" + model_dir() + "/ckpt-400'");
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  EXPECT_EQ(from_file.out, "");
  EXPECT_EQ(slurp(dir_ / "out.txt"), from_stdin.out);
  EXPECT_NE(from_file.err.find("beam 1"), std::string::npos) << from_file.err;
  // The older checkpoint translates differently (it is half trained).
  const CliRun older =
      translate(input, "--beam_size 1 --checkpoint '" + model_dir() + "/ckpt-200'");
  ASSERT_EQ(older.status, 0) << older.err;
  EXPECT_NE(older.out, from_stdin.out);
}

// int8 decoding of the overfit model gives the float translations on
// nearly every line (its logits have wide margins), and says it is int8.
TEST_F(TranslateCliTest, Int8TranslatesNearlyEveryLineAsFloat32Does) {
  std::string input;
  for (const auto& s : sources_) input += s + "\n";
  for (const std::string beam : {"1", "4"}) {
    const CliRun fp32 = translate(input, "--beam_size " + beam);
    ASSERT_EQ(fp32.status, 0) << fp32.err;
    const CliRun int8 = translate(input, "--int8 --beam_size " + beam);
    ASSERT_EQ(int8.status, 0) << int8.err;
    EXPECT_NE(int8.err.find("beam " + beam + ", int8 (" + garden::kernels::int8_kernel() + "),"),
              std::string::npos)
        << int8.err;
    const auto a = lines_of(fp32.out), b = lines_of(int8.out);
    ASSERT_EQ(a.size(), sources_.size());
    ASSERT_EQ(b.size(), sources_.size());
    int same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i] ? 1 : 0;
    EXPECT_GE(same, 14) << "beam " << beam << "\n" << fp32.out << "---\n" << int8.out;
  }
}

// Batches decoded on several threads give the lines one batch at a time
// gives, in input order, across several windows (16 batches each).
TEST_F(TranslateCliTest, ParallelBatchesGiveTheSameLinesInOrderAsOneAtATime) {
  std::string input;
  for (int copy = 0; copy < 5; ++copy)
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      // Each copy starts at another line, so windows differ in content.
      input += sources_[(i + static_cast<std::size_t>(copy) * 3) % sources_.size()] + "\n";
      if (i == 7) input += "\n";
    }
  for (const std::string mode : {"--beam_size 1", "--beam_size 4", "--int8 --beam_size 4"}) {
    const CliRun one = translate(input, mode + " --batch_size 2 --parallel_batches 1");
    ASSERT_EQ(one.status, 0) << one.err;
    EXPECT_NE(one.err.find("1 batch at once"), std::string::npos) << one.err;
    ASSERT_EQ(lines_of(one.out).size(), 85u);
    for (const std::string threads : {"2", "3"}) {
      const CliRun many = translate(input, mode + " --batch_size 2 --parallel_batches " + threads);
      ASSERT_EQ(many.status, 0) << many.err;
      EXPECT_NE(many.err.find(threads + " batches at once"), std::string::npos) << many.err;
      EXPECT_EQ(many.out, one.out) << mode << ", " << threads << " batches at once";
    }
  }
  const CliRun bad = translate(input, "--parallel_batches -1");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "garden: error: --parallel_batches must be >= 0 (0: one per core)\n");
}

TEST_F(TranslateCliTest, ALongLineIsTruncatedWithAWarningNamingIt) {
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += sources_[static_cast<std::size_t>(i % 16)] + " ";
  const CliRun run = translate(sources_[0] + "\n" + long_line + "\n" + sources_[1] + "\n");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines_of(run.out).size(), 3u);
  EXPECT_NE(run.err.find("warning: line 2 is longer than the model's 40 tokens"), std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("line 1 "), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("line 3 "), std::string::npos) << run.err;
}

TEST_F(TranslateCliTest, MissingPiecesAreOneLineErrors) {
  auto one_line_error = [](const CliRun& run, const std::string& text) {
    EXPECT_EQ(run.status, 1);
    EXPECT_EQ(run.out, "");
    EXPECT_NE(run.err.find("garden: error: "), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(text), std::string::npos) << run.err;
    EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
  };
  // A model_dir with params.yaml and the tokenizer but no checkpoint.
  const fs::path empty = dir_ / "no_checkpoint";
  fs::create_directories(empty);
  fs::copy_file(fs::path(model_dir()) / "params.yaml", empty / "params.yaml");
  fs::copy_file(fs::path(model_dir()) / "sentencepiece.model", empty / "sentencepiece.model");
  one_line_error(garden("translate --model_dir '" + empty.string() + "' </dev/null"),
                 "no checkpoint in");
  one_line_error(garden("translate --model_dir '" + path("nowhere") + "' </dev/null"),
                 "has no params.yaml");
  // A model_dir of another task.
  fs::create_directories(dir_ / "iris");
  spit(dir_ / "iris/params.yaml", "task:\n  label_column: label\n");
  one_line_error(garden("translate --model_dir '" + path("iris") + "' </dev/null"),
                 "is not a translation experiment's");
  one_line_error(translate("x\n", "--checkpoint '" + path("missing-ckpt") + "'"),
                 "is not a checkpoint");
  one_line_error(translate("x\n", "--checkpoint best"), "exported no best checkpoint");
}

// --no_repeat_ngram_size reaches the search (the searches' bans are
// checked in tests/nlp): the half-trained checkpoint repeats words, and
// banning every repeated piece changes those lines; 0 is the model's own
// setting (none); a negative size is a one-line error.
TEST_F(TranslateCliTest, NoRepeatNgramSizeChangesRepeatingLinesAndANegativeOneIsRefused) {
  std::string input;
  for (const auto& s : sources_) input += s + "\n";
  const std::string older = "--checkpoint '" + model_dir() + "/ckpt-200' ";
  const CliRun plain = translate(input, older);
  const CliRun zero = translate(input, older + "--no_repeat_ngram_size 0");
  const CliRun blocked = translate(input, older + "--no_repeat_ngram_size 1");
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(zero.status, 0) << zero.err;
  ASSERT_EQ(blocked.status, 0) << blocked.err;
  EXPECT_EQ(zero.out, plain.out);
  const std::vector<std::string> plain_lines = lines_of(plain.out);
  const std::vector<std::string> blocked_lines = lines_of(blocked.out);
  ASSERT_EQ(blocked_lines.size(), plain_lines.size());
  const auto repeats_a_word = [](const std::string& line) {
    std::istringstream words(line);
    std::set<std::string> seen;
    std::string word;
    while (words >> word)
      if (!seen.insert(word).second) return true;
    return false;
  };
  int repeating = 0;
  for (std::size_t i = 0; i < plain_lines.size(); ++i) {
    if (!repeats_a_word(plain_lines[i])) continue;
    ++repeating;
    EXPECT_NE(blocked_lines[i], plain_lines[i]) << "line " << i + 1;
  }
  EXPECT_GT(repeating, 0) << plain.out;

  const CliRun negative = translate(input, "--no_repeat_ngram_size -1");
  EXPECT_EQ(negative.status, 1);
  EXPECT_EQ(negative.out, "");
  EXPECT_EQ(negative.err, "garden: error: --no_repeat_ngram_size must be >= 0\n");
}

// The output is never a file the command reads, however it is named:
// refused before anything is written, the file as it was.
TEST_F(TranslateCliTest, TheOutputIsNeverAFileItReads) {
  const std::string input = sources_[0] + "\n" + sources_[1] + "\n";
  spit(dir_ / "in.txt", input);
  fs::create_symlink(dir_ / "in.txt", dir_ / "link.txt");
  for (const std::string& output : std::vector<std::string>{path("in.txt"), path("link.txt")}) {
    SCOPED_TRACE(output);
    const CliRun run = garden("translate --model_dir '" + model_dir() + "' --input '" +
                              path("in.txt") + "' --output '" + output + "'");
    garden_test::expect_one_error_line(run, {"--output '" + output + "'", "--input", "same file"});
    EXPECT_EQ(slurp(dir_ / "in.txt"), input);
  }
  for (const std::string& name :
       std::vector<std::string>{"params.yaml", "sentencepiece.model", "ckpt-400"}) {
    SCOPED_TRACE(name);
    const fs::path file = fs::path(model_dir()) / name;
    ASSERT_TRUE(fs::is_regular_file(file));
    const std::string kept = slurp(file);
    const CliRun run = garden("translate --model_dir '" + model_dir() + "' --input '" +
                              path("in.txt") + "' --output '" + file.string() + "'");
    garden_test::expect_one_error_line(run, {"--output '" + file.string() + "'", "same file"});
    EXPECT_TRUE(slurp(file) == kept) << file << " was replaced";
  }
}

// A bad input fails before the output is touched: an existing --output
// stays as it was (a directory as --input once emptied it and reported
// "translated 0 lines"). A good run replaces it whole, leaving no
// temporary file.
TEST_F(TranslateCliTest, ABadInputOrOutputLeavesTheOutputAsItWas) {
  const fs::path work = dir_ / "work";
  fs::create_directories(work / "dir");
  spit(work / "out.txt", "earlier translations\n");
  const std::string out = (work / "out.txt").string(), dir = (work / "dir").string();
  const std::string flags = "translate --model_dir '" + model_dir() + "' --output '" + out + "'";
  garden_test::expect_one_error_line(garden(flags + " --input '" + dir + "'"),
                                     {"--input '" + dir + "' is a directory"});
  EXPECT_EQ(slurp(out), "earlier translations\n");
  const std::string missing = (work / "missing.txt").string();
  garden_test::expect_one_error_line(garden(flags + " --input '" + missing + "'"),
                                     {"--input '" + missing + "' does not exist"});
  EXPECT_EQ(slurp(out), "earlier translations\n");
  garden_test::expect_one_error_line(
      garden("translate --model_dir '" + model_dir() + "' --output '" + dir + "' </dev/null"),
      {"--output", dir, "directory"});
  garden_test::expect_one_error_line(garden("translate --model_dir '" + out + "' </dev/null"),
                                     {"--model_dir '" + out + "' is a file"});
  EXPECT_EQ(garden_test::entries(work), (std::set<std::string>{"dir", "out.txt"}));

  // Text that is not UTF-8 (here Latin-1) names its line and byte.
  spit(work / "latin1.txt", sources_[0] + "\nCaf\xe9 au lait\n");
  const std::string latin1 = (work / "latin1.txt").string();
  garden_test::expect_one_error_line(
      garden(flags + " --input '" + latin1 + "'"),
      {"--input '" + latin1 + "', line 2", "invalid UTF-8 byte 0xE9 at offset 3"});
  EXPECT_EQ(slurp(out), "earlier translations\n");
  garden_test::expect_one_error_line(
      garden("translate --model_dir '" + model_dir() + "' < '" + latin1 + "'"),
      {"standard input, line 2"});
  fs::remove(work / "latin1.txt");

  spit(work / "in.txt", sources_[0] + "\n");
  const CliRun run = garden(flags + " --input '" + (work / "in.txt").string() + "'");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines_of(slurp(out)).size(), 1u);
  EXPECT_NE(slurp(out), "earlier translations\n");
  EXPECT_EQ(garden_test::entries(work), (std::set<std::string>{"dir", "in.txt", "out.txt"}));
}

// train (with the BLEU evaluation) and translate of wmt_transformer/demo on
// each device, as a user runs them: on the CPU always, on CUDA when there is
// one (else skipped). Each overfits the same 16 pairs and
// must translate them back.
class TranslateDeviceCliTest : public CliFixture,
                               public ::testing::WithParamInterface<std::string> {};

TEST_P(TranslateDeviceCliTest, TrainsEvaluatesAndTranslatesTheDemoOnTheDevice) {
  const std::string device = GetParam();
  if (const auto why = garden_test::unavailable(c10::Device(device)); !why.empty())
    GTEST_SKIP() << why;
  const SamplePairs pairs = sample_pairs();
  const std::vector<std::string>& targets = pairs.targets;
  std::string input;
  for (const auto& source : pairs.sources) input += source + "\n";
  spit(dir_ / "pairs.tsv", pairs.lines);
  spit(dir_ / "input.txt", input);
  spit(dir_ / "overfit.yaml", overfit_yaml(path("pairs.tsv"), 400));
  const CliRun train = garden(
      "train --experiment wmt_transformer/demo --mode train_and_eval "
      "--config_file '" +
      path("overfit.yaml") + "' --model_dir '" + path("model") +
      "' --params_override runtime.device=" + device);
  ASSERT_EQ(train.status, 0) << train.err;
  const std::string log = slurp(dir_ / "model" / "train.log");
  EXPECT_NE(log.find("sacrebleu_score"), std::string::npos) << log;
  EXPECT_NE(slurp(dir_ / "model" / "params.yaml").find("device: " + device), std::string::npos);

  const CliRun translate =
      garden("translate --model_dir '" + path("model") + "' --input '" + path("input.txt") + "'");
  ASSERT_EQ(translate.status, 0) << translate.err;
  const auto outputs = lines_of(translate.out);
  ASSERT_EQ(outputs.size(), targets.size()) << translate.out;
  int exact = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) exact += outputs[i] == targets[i];
  EXPECT_GE(exact, 12) << translate.out;
}

INSTANTIATE_TEST_SUITE_P(Devices, TranslateDeviceCliTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
