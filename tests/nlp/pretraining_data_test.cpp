// create_pretraining_data against BERT's create_pretraining_data.py: the
// records are read back with the tests' own TFRecord / tf.Example decoder
// (reference_formats.h), the original tokens rebuilt from the unmasked ones
// and masked_lm_ids, and every record checked against the corpus it came
// from; the masking and next-sentence rates against their binomial bounds.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "garden/data/sentencepiece.h"
#include "garden/data/wordpiece.h"
#include "garden/nlp/data/pretraining_data.h"
#include "garden/nlp/data/pretraining_instances.h"
#include "reference_formats.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
namespace ref = garden_test::reference;
using garden::nlp::PretrainingDataOptions;
using garden_test::error_of;

constexpr int64_t kCls = 2, kSep = 3, kMask = 4;

// Words, and words that WordPiece splits into "##" pieces.
const std::vector<std::string> kWholeWords = {"the", "cat", "sat",  "on",   "mat",  "a",
                                              "dog", "ran", "far",  "away", "bird", "sang",
                                              "sun", "set", "rain", "fell", "tree", "grew"};
const std::vector<std::string> kSplitWords = {"unwanted", "running", "jumped", "played"};
std::vector<std::string> vocabulary() {
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const auto& w : kWholeWords) vocab.push_back(w);
  for (const auto& p : {"un", "##want", "##ed", "runn", "##ing", "jump", "play", "."})
    vocab.push_back(p);
  return vocab;
}

// One decoded record.
struct Record {
  std::vector<int64_t> input_ids, input_mask, segment_ids, positions, ids;
  std::vector<float> weights;
  int64_t next_sentence_label = -1;
  // Rebuilt: input_ids with masked_lm_ids put back, up to the padding.
  std::vector<int64_t> original;
  int64_t first_sep = -1;
};

std::vector<Record> read_records(const std::vector<std::string>& files, int64_t seq_length,
                                 int64_t predictions) {
  std::vector<Record> records;
  for (const auto& file : files) {
    for (const auto& bytes : ref::read_records(file)) {
      auto features = ref::ref_parse_example(bytes);
      EXPECT_EQ(features.size(), 7u);
      Record r;
      auto ints = [&](const char* name, std::size_t size) {
        const auto& f = features[name];
        EXPECT_EQ(f.kind, ref::kInt64ListField) << name;
        EXPECT_EQ(f.ints.size(), size) << name;
        return f.ints;
      };
      const auto length = static_cast<std::size_t>(seq_length);
      const auto count = static_cast<std::size_t>(predictions);
      r.input_ids = ints("input_ids", length);
      r.input_mask = ints("input_mask", length);
      r.segment_ids = ints("segment_ids", length);
      r.positions = ints("masked_lm_positions", count);
      r.ids = ints("masked_lm_ids", count);
      r.next_sentence_label = ints("next_sentence_labels", 1).at(0);
      EXPECT_EQ(features["masked_lm_weights"].kind, ref::kFloatListField);
      r.weights = features["masked_lm_weights"].floats;
      EXPECT_EQ(r.weights.size(), count);
      const auto n = static_cast<std::size_t>(
          std::count(r.input_mask.begin(), r.input_mask.end(), int64_t{1}));
      r.original.assign(r.input_ids.begin(), r.input_ids.begin() + static_cast<long>(n));
      for (std::size_t k = 0; k < count && r.weights[k] == 1.0f; ++k)
        if (static_cast<std::size_t>(r.positions[k]) < n)
          r.original[static_cast<std::size_t>(r.positions[k])] = r.ids[k];
      for (std::size_t i = 1; i < n; ++i)
        if (r.original[i] == kSep) {
          r.first_sep = static_cast<int64_t>(i);
          break;
        }
      records.push_back(std::move(r));
    }
  }
  return records;
}

// Python's round(): halves to even.
int64_t python_round(double x) {
  const double floor = std::floor(x);
  const double diff = x - floor;
  if (diff > 0.5) return static_cast<int64_t>(floor) + 1;
  if (diff < 0.5) return static_cast<int64_t>(floor);
  return static_cast<int64_t>(std::fmod(floor, 2.0) == 0.0 ? floor : floor + 1);
}

bool contains(const std::vector<int64_t>& haystack, const std::vector<int64_t>& needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

class PretrainingDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_pretraining_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream vocab(path("vocab.txt"));
    for (const auto& token : vocabulary()) vocab << token << "\n";
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }
  PretrainingDataOptions options(const std::string& input, const std::string& outputs) const {
    PretrainingDataOptions o;
    o.input_files = {path(input)};
    o.output_file = outputs;
    o.vocab_file = path("vocab.txt");
    o.num_threads = 2;
    return o;
  }
  // Token streams of the corpus' documents (blank lines between them).
  static std::vector<std::vector<int64_t>> document_streams(const std::string& text) {
    const garden::data::WordPieceTokenizer tokenizer(vocabulary(), true);
    std::vector<std::vector<int64_t>> documents(1);
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) {
        documents.emplace_back();
        continue;
      }
      for (int64_t id : tokenizer.encode(line)) documents.back().push_back(id);
    }
    return documents;
  }

  fs::path dir_;
};

// A synthetic corpus: `documents` documents of min..max sentences of 2..9 words.
std::string synthetic_corpus(int documents, uint32_t seed, int min_sentences = 3,
                             int max_sentences = 12) {
  std::mt19937 rng(seed);
  auto pick = [&](int low, int high) {
    return low + static_cast<int>(rng() % static_cast<uint32_t>(high - low + 1));
  };
  std::string text;
  for (int d = 0; d < documents; ++d) {
    const int sentences = pick(min_sentences, max_sentences);
    for (int s = 0; s < sentences; ++s) {
      const int words = pick(2, 9);
      for (int w = 0; w < words; ++w) {
        const bool split = pick(0, 4) == 0;
        text += (w ? " " : "") + (split ? kSplitWords[static_cast<std::size_t>(pick(0, 3))]
                                        : kWholeWords[static_cast<std::size_t>(pick(0, 17))]);
      }
      text += " .\n";
    }
    text += "\n";
  }
  return text;
}

// Checks every structural property of a record against the corpus.
void check_record(const Record& r, int64_t seq_length, int64_t max_predictions,
                  double masked_lm_prob, const std::vector<std::vector<int64_t>>& documents) {
  const auto n = static_cast<int64_t>(r.original.size());
  ASSERT_GE(n, 5);
  ASSERT_LE(n, seq_length);
  for (int64_t i = 0; i < seq_length; ++i) {
    const auto at = static_cast<std::size_t>(i);
    EXPECT_EQ(r.input_mask[at], i < n ? 1 : 0);
    if (i >= n) {
      EXPECT_EQ(r.input_ids[at], 0);
      EXPECT_EQ(r.segment_ids[at], 0);
    }
  }
  // [CLS] A [SEP] B [SEP], segment ids 0 then 1.
  EXPECT_EQ(r.original.front(), kCls);
  EXPECT_EQ(r.original.back(), kSep);
  ASSERT_GE(r.first_sep, 2);
  ASSERT_LE(r.first_sep, n - 3);
  EXPECT_EQ(std::count(r.original.begin(), r.original.end(), kSep), 2);
  EXPECT_EQ(std::count(r.original.begin(), r.original.end(), kCls), 1);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(r.segment_ids[static_cast<std::size_t>(i)], i <= r.first_sep ? 0 : 1);
  // A and B are runs of the corpus; a true next pair comes from one document.
  const std::vector<int64_t> a(r.original.begin() + 1, r.original.begin() + r.first_sep);
  const std::vector<int64_t> b(r.original.begin() + r.first_sep + 1, r.original.end() - 1);
  bool a_found = false, b_found = false, together = false;
  for (const auto& document : documents) {
    const bool has_a = contains(document, a), has_b = contains(document, b);
    a_found = a_found || has_a;
    b_found = b_found || has_b;
    together = together || (has_a && has_b);
  }
  EXPECT_TRUE(a_found);
  EXPECT_TRUE(b_found);
  if (r.next_sentence_label == 0) {
    EXPECT_TRUE(together);
  }
  EXPECT_TRUE(r.next_sentence_label == 0 || r.next_sentence_label == 1);
  // The masked positions: as many as BERT's formula says, increasing, never
  // [CLS], [SEP] or padding; the padding after them zero.
  const int64_t expected = std::min(
      max_predictions, std::max<int64_t>(1, python_round(static_cast<double>(n) * masked_lm_prob)));
  int64_t k = 0;
  while (k < max_predictions && r.weights[static_cast<std::size_t>(k)] == 1.0f) ++k;
  EXPECT_EQ(k, expected);
  for (int64_t j = 0; j < max_predictions; ++j) {
    const auto at = static_cast<std::size_t>(j);
    if (j >= k) {
      EXPECT_EQ(r.weights[at], 0.0f);
      EXPECT_EQ(r.positions[at], 0);
      EXPECT_EQ(r.ids[at], 0);
      continue;
    }
    const int64_t position = r.positions[at];
    EXPECT_GT(position, 0);
    EXPECT_LT(position, n - 1);
    EXPECT_NE(position, r.first_sep);
    if (j > 0) {
      EXPECT_GT(position, r.positions[at - 1]);
    }
    EXPECT_NE(r.ids[at], kCls);
    EXPECT_NE(r.ids[at], kSep);
  }
}

std::vector<std::string> files_of(const std::string& commas) {
  std::vector<std::string> files;
  std::stringstream in(commas);
  std::string file;
  while (std::getline(in, file, ',')) files.push_back(file);
  return files;
}

TEST_F(PretrainingDataTest, SmallCorpusRecordsAreBertsPairsAndMasks) {
  const std::string corpus =
      "the cat sat on the mat .\nthe dog ran far away .\na bird sang .\n\n"
      "the sun set .\nrain fell on the tree .\nthe tree grew .\nthe cat jumped .\n\n"
      "unwanted running .\nthe dog played .\n\n"
      "a bird sang on the tree .\nthe sun set far away .\nthe rain fell .\n";
  write("corpus.txt", corpus);
  auto o = options("corpus.txt", path("a.tfrecord") + "," + path("b.tfrecord"));
  o.max_seq_length = 24;
  o.max_predictions_per_seq = 5;
  o.dupe_factor = 4;
  const auto report = garden::nlp::create_pretraining_data(o);
  EXPECT_EQ(report.documents, 4);
  EXPECT_EQ(report.output_files, files_of(o.output_file));
  const auto records = read_records(report.output_files, 24, 5);
  ASSERT_EQ(static_cast<int64_t>(records.size()), report.instances);
  ASSERT_GE(records.size(), 16u);  // at least one pair a document a pass
  // Round-robin: the first file gets the odd one.
  EXPECT_EQ(ref::read_records(path("a.tfrecord")).size(), (records.size() + 1) / 2);
  const auto documents = document_streams(corpus);
  for (const auto& r : records) check_record(r, 24, 5, 0.15, documents);
  // Nothing but the outputs in the directory: no temporary file survives.
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.insert(entry.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"a.tfrecord", "b.tfrecord", "corpus.txt", "vocab.txt"}));
}

TEST_F(PretrainingDataTest, RatesAreBertsWithinBinomialBounds) {
  // Long documents: a chunk of one sentence (always a random next) is rare.
  const std::string corpus = synthetic_corpus(60, 7, 30, 40);
  write("corpus.txt", corpus);
  auto o = options("corpus.txt", path("out.tfrecord"));
  o.max_seq_length = 48;
  o.max_predictions_per_seq = 20;  // 48 * 0.15 rounds to 7: never the cap
  o.dupe_factor = 3;
  o.short_seq_prob = 0.0;
  const auto report = garden::nlp::create_pretraining_data(o);
  const auto records = read_records(report.output_files, 48, 20);
  const auto documents = document_streams(corpus);
  int64_t tokens = 0, predicted = 0, as_mask = 0, kept = 0, random_next = 0;
  for (const auto& r : records) {
    check_record(r, 48, 20, 0.15, documents);
    tokens += static_cast<int64_t>(r.original.size());
    random_next += r.next_sentence_label;
    for (std::size_t j = 0; j < 20 && r.weights[j] == 1.0f; ++j) {
      ++predicted;
      const int64_t shown = r.input_ids[static_cast<std::size_t>(r.positions[j])];
      as_mask += shown == kMask;
      kept += shown == r.ids[j];
    }
  }
  const auto n = static_cast<double>(predicted);
  ASSERT_GT(n, 3000);
  EXPECT_NEAR(n / static_cast<double>(tokens), 0.15, 0.01);
  // 80% [MASK]; 10% kept plus the random draws that hit the same token (1 in
  // 31); 5 standard deviations.
  const double p_kept = 0.1 + 0.1 / static_cast<double>(vocabulary().size());
  EXPECT_NEAR(as_mask / n, 0.8, 5 * std::sqrt(0.8 * 0.2 / n));
  EXPECT_NEAR(kept / n, p_kept, 5 * std::sqrt(p_kept * (1 - p_kept) / n));
  // Random next half the time, plus the rare chunks of one sentence, which
  // are always random.
  const auto m = static_cast<double>(records.size());
  EXPECT_GT(random_next / m, 0.5 - 5 * std::sqrt(0.25 / m));
  EXPECT_LT(random_next / m, 0.5 + 0.03 + 5 * std::sqrt(0.25 / m));
}

TEST_F(PretrainingDataTest, PredictionsAreCappedAtMaxPredictionsPerSeq) {
  const std::string corpus = synthetic_corpus(30, 3);
  write("corpus.txt", corpus);
  auto o = options("corpus.txt", path("out.tfrecord"));
  o.max_seq_length = 64;
  o.max_predictions_per_seq = 3;
  o.dupe_factor = 1;
  const auto records = read_records(garden::nlp::create_pretraining_data(o).output_files, 64, 3);
  ASSERT_FALSE(records.empty());
  // check_record's count is min(3, ...): every long record has exactly 3.
  const auto documents = document_streams(corpus);
  for (const auto& r : records) check_record(r, 64, 3, 0.15, documents);
}

TEST_F(PretrainingDataTest, SameSeedSameBytesWhateverTheThreadsAnotherSeedOther) {
  write("corpus.txt", synthetic_corpus(60, 11));
  auto run = [&](int64_t threads, int64_t seed, const std::string& name) {
    auto o = options("corpus.txt", path(name + "_0") + "," + path(name + "_1"));
    o.num_threads = threads;
    o.random_seed = seed;
    o.dupe_factor = 3;
    o.max_seq_length = 40;
    garden::nlp::create_pretraining_data(o);
    std::ifstream first(path(name + "_0"), std::ios::binary), second(path(name + "_1"));
    std::stringstream bytes;
    bytes << first.rdbuf() << "|" << second.rdbuf();
    return bytes.str();
  };
  const std::string one = run(1, 12345, "one");
  EXPECT_GT(one.size(), 1000u);
  EXPECT_EQ(run(2, 12345, "two"), one);
  EXPECT_EQ(run(5, 12345, "five"), one);
  EXPECT_NE(run(2, 54321, "other"), one);
}

// Words as BERT groups them: positions of a piece and its "##"
// continuations, [CLS] and [SEP] left out (so a segment B cut to start with
// "##x" continues the last word of A, as in BERT).
std::vector<std::vector<int64_t>> words_of(const std::vector<int64_t>& original,
                                           const std::vector<std::string>& vocab) {
  std::vector<std::vector<int64_t>> words;
  for (std::size_t i = 0; i < original.size(); ++i) {
    if (original[i] == kCls || original[i] == kSep) continue;
    const bool continues = vocab[static_cast<std::size_t>(original[i])].rfind("##", 0) == 0;
    if (!continues || words.empty()) words.emplace_back();
    words.back().push_back(static_cast<int64_t>(i));
  }
  return words;
}

// Masked words that are only partly masked, over all records.
int64_t partly_masked_words(const std::vector<Record>& records) {
  const auto vocab = vocabulary();
  int64_t partly = 0;
  for (const auto& r : records) {
    std::set<int64_t> masked;
    for (std::size_t j = 0; j < r.weights.size() && r.weights[j] == 1.0f; ++j)
      masked.insert(r.positions[j]);
    for (const auto& word : words_of(r.original, vocab)) {
      int64_t in = 0;
      for (int64_t i : word) in += masked.count(i) ? 1 : 0;
      partly += (in > 0 && in < static_cast<int64_t>(word.size())) ? 1 : 0;
    }
  }
  return partly;
}

TEST_F(PretrainingDataTest, WholeWordMaskingMasksAllPiecesOfAWord) {
  write("corpus.txt", synthetic_corpus(80, 5));
  auto o = options("corpus.txt", path("pieces.tfrecord"));
  o.max_seq_length = 48;
  o.dupe_factor = 2;
  const auto pieces = read_records(garden::nlp::create_pretraining_data(o).output_files, 48, 20);
  // Per-piece masking splits words, or the check below could not fail.
  EXPECT_GT(partly_masked_words(pieces), 10);

  o.output_file = path("words.tfrecord");
  o.do_whole_word_mask = true;
  const auto words = read_records(garden::nlp::create_pretraining_data(o).output_files, 48, 20);
  ASSERT_FALSE(words.empty());
  EXPECT_EQ(partly_masked_words(words), 0);
  int64_t predicted = 0, tokens = 0;
  for (const auto& r : words) {
    tokens += static_cast<int64_t>(r.original.size());
    for (float w : r.weights) predicted += w == 1.0f;
  }
  // A word that would pass the count is skipped, so a little under 15%.
  EXPECT_NEAR(static_cast<double>(predicted) / static_cast<double>(tokens), 0.15, 0.02);
}

TEST_F(PretrainingDataTest, GlobsAndFilesAreDocumentBoundaries) {
  write("part-1.txt", "the cat sat .\nthe dog ran .");  // no final newline, no blank line
  write("part-2.txt", "a bird sang .\nthe sun set .\n");
  auto o = options("part-*.txt", path("out.tfrecord"));
  o.max_seq_length = 16;
  o.dupe_factor = 2;
  const auto report = garden::nlp::create_pretraining_data(o);
  EXPECT_EQ(report.documents, 2);
  o.input_files = {path("nothing-*.txt")};
  EXPECT_NE(error_of([&] { garden::nlp::create_pretraining_data(o); }).find("matches no file"),
            std::string::npos);
}

TEST_F(PretrainingDataTest, BadInputsAreOneLineAndLeaveNoOutput) {
  write("empty.txt", "");
  write("blank.txt", "\n  \n\n");
  write("good.txt", "the cat sat .\nthe dog ran .\n");
  write("bad.txt", "the cat sat .\nthe d\xC3\xA9g r\xE9n .\n");
  write("no_mask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n");
  auto error = [&](const std::function<void(PretrainingDataOptions&)>& change) {
    auto o = options("good.txt", path("out.tfrecord"));
    change(o);
    const std::string message = error_of([&] { garden::nlp::create_pretraining_data(o); });
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(path("out.tfrecord"))) << message;
    return message;
  };
  EXPECT_NE(
      error([&](auto& o) { o.input_files = {path("empty.txt")}; }).find("empty.txt' is empty"),
      std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.input_files = {path("blank.txt")}; }).find("is empty"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.input_files = {path("missing.txt")}; }).find("does not exist"),
            std::string::npos);
  // The bad byte 0xE9 is on line 2, the 10th character (é counts as one).
  const auto utf8 = error([&](auto& o) { o.input_files = {path("bad.txt")}; });
  EXPECT_NE(utf8.find("bad.txt' line 2, column 10: invalid UTF-8 (byte 0xE9)"), std::string::npos)
      << utf8;
  EXPECT_NE(error([&](auto& o) { o.vocab_file.clear(); }).find("--vocab_file"), std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.sp_model_file = path("m.model"); }).find("only one of"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.vocab_file = path("nope.txt"); }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.vocab_file = path("no_mask.txt"); }).find("no piece [MASK]"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.max_seq_length = 4; }).find("--max_seq_length must be >= 5"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.dupe_factor = 0; }).find("--dupe_factor"), std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.masked_lm_prob = 1.5; }).find("--masked_lm_prob"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.short_seq_prob = -0.1; }).find("--short_seq_prob"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) { o.max_predictions_per_seq = 0; }).find("--max_predictions"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) {
              o.output_file = path("out.tfrecord") + "," + path("out.tfrecord");
            }).find("twice"),
            std::string::npos);
  EXPECT_NE(error([&](auto& o) {
              o.output_file = path("out.tfrecord") + "," + path("good.txt");
            }).find("--output_file"),
            std::string::npos);
  // An output in a directory that does not exist fails before any work.
  EXPECT_NE(error([&](auto& o) {
              o.output_file = path("out.tfrecord") + "," + path("no/dir.tf");
            }).find("--output_file"),
            std::string::npos);
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.insert(entry.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"bad.txt", "blank.txt", "empty.txt", "good.txt",
                                          "no_mask.txt", "vocab.txt"}));
}

TEST(PretrainingInstancesTest, TruncateCutsTheLongerUntilItFits) {
  garden::nlp::PretrainingRng rng(1);
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7}, b = {8, 9};
  garden::nlp::truncate_seq_pair(a, b, 5, rng);
  EXPECT_EQ(a.size() + b.size(), 5u);
  EXPECT_EQ(b, (std::vector<int32_t>{8, 9}));  // the longer loses, ties go to b
  for (std::size_t i = 1; i < a.size(); ++i) EXPECT_EQ(a[i], a[i - 1] + 1);  // still a run
}

TEST(PretrainingInstancesTest, RandintIsUniformAndInclusive) {
  garden::nlp::PretrainingRng rng(42);
  std::vector<int64_t> counts(5, 0);
  const int draws = 50000;
  for (int i = 0; i < draws; ++i) ++counts[static_cast<std::size_t>(rng.randint(2, 6) - 2)];
  for (int64_t c : counts)
    EXPECT_NEAR(c / static_cast<double>(draws), 0.2, 5 * std::sqrt(0.16 / draws));
  double sum = 0;
  for (int i = 0; i < draws; ++i) {
    const double u = rng.random();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / draws, 0.5, 5 * std::sqrt(1.0 / 12 / draws));
}

// SentencePiece: a tiny model trained here with [CLS], [SEP], [MASK] as
// user-defined symbols; A and B decode back to text of the corpus.
TEST_F(PretrainingDataTest, SentencePieceModelWithSpecialPieces) {
  const std::string tsv = std::string(GARDEN_DATA_DIR) + "/testdata/en_de_sample.tsv";
  ASSERT_GT(garden::data::write_tsv_columns({tsv}, {0}, path("english.txt")), 100);
  std::ifstream in(path("english.txt"));
  std::string line, corpus;
  std::vector<std::string> lines;
  for (int i = 0; i < 300 && std::getline(in, line); ++i) {
    corpus += line + "\n" + (i % 6 == 5 ? "\n" : "");
    lines.push_back(line);
  }
  write("corpus.txt", corpus);
  garden::data::SentencePieceTrainOptions train;
  train.input = {path("english.txt")};
  train.model_prefix = path("plain");
  train.vocab_size = 300;
  train.input_sentence_size = 2000;
  garden::data::train_sentencepiece(train);
  train.model_prefix = path("bert");
  train.user_defined_symbols = {"[CLS]", "[SEP]", "[MASK]"};
  garden::data::train_sentencepiece(train);

  auto o = options("corpus.txt", path("out.tfrecord"));
  o.vocab_file.clear();
  o.sp_model_file = path("plain.model");
  const auto message = error_of([&] { garden::nlp::create_pretraining_data(o); });
  EXPECT_NE(message.find("has no piece [CLS]"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(path("out.tfrecord")));

  o.sp_model_file = path("bert.model");
  o.max_seq_length = 64;
  o.dupe_factor = 2;
  const auto report = garden::nlp::create_pretraining_data(o);
  const auto tokenizer = garden::data::SentencePieceTokenizer::load(path("bert.model"));
  const int64_t cls = tokenizer.piece_to_id("[CLS]"), sep = tokenizer.piece_to_id("[SEP]");
  const auto records = ref::read_records(report.output_files.at(0));
  ASSERT_EQ(static_cast<int64_t>(records.size()), report.instances);
  ASSERT_GT(records.size(), 50u);
  std::string flat = corpus;  // a segment of several lines decodes with spaces between them
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  int candidates = 0, found = 0;
  for (const auto& bytes : records) {
    auto features = ref::ref_parse_example(bytes);
    auto ids = features["input_ids"].ints;
    const auto& mask = features["input_mask"].ints;
    ids.resize(static_cast<std::size_t>(std::count(mask.begin(), mask.end(), int64_t{1})));
    const auto& weights = features["masked_lm_weights"].floats;
    for (std::size_t j = 0; j < weights.size() && weights[j] == 1.0f; ++j)
      ids[static_cast<std::size_t>(features["masked_lm_positions"].ints[j])] =
          features["masked_lm_ids"].ints[j];
    ASSERT_EQ(ids.front(), cls);
    ASSERT_EQ(ids.back(), sep);
    const auto first_sep = std::find(ids.begin() + 1, ids.end(), sep);
    ASSERT_NE(first_sep, ids.end() - 1);
    // Segment A, where its front was not cut mid-word, decodes to text of
    // the corpus (NFKC normalization may change a rare character).
    const std::string a = tokenizer.decode(std::vector<int64_t>(ids.begin() + 1, first_sep));
    if (tokenizer.id_to_piece(ids[1]).rfind("\xE2\x96\x81", 0) == 0) {
      ++candidates;
      found += flat.find(a) != std::string::npos;
    }
  }
  EXPECT_GT(candidates, 20);
  EXPECT_GE(found, candidates * 9 / 10);
}

}  // namespace
