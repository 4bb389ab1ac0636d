// SentencePiece through Debian's libsentencepiece: a tiny model trained in the
// test on a bundled slice of the gettext en-de pairs (data/testdata).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/cli/spm_command.h"
#include "garden/data/sentencepiece.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using garden::data::SentencePieceOptions;
using garden::data::SentencePieceTokenizer;
using garden::data::SentencePieceTrainOptions;

const std::string kTsv = std::string(GARDEN_DATA_DIR) + "/testdata/en_de_sample.tsv";

// Sentences whose round trip is exact: NFKC-stable, single spaces, no edges.
const std::vector<std::string> kSentences = {
    "User name", "path to the remote git-upload-archive command", "jede Umleitung von %s",
    "Benutzerdefinierte Größen verwalten", "Tastaturen"};

using garden_test::error_of;

// One model for the suite (training takes a fraction of a second, but once
// is enough); every test gets its own scratch directory besides.
class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_dir_ = new fs::path(fs::path(::testing::TempDir()) /
                              ("garden_spm_suite_" + std::to_string(::getpid())));
    fs::remove_all(*suite_dir_);
    fs::create_directories(*suite_dir_);
    const auto text = (*suite_dir_ / "train.txt").string();
    ASSERT_GT(garden::data::write_tsv_columns({kTsv}, {0, 1}, text), 1000);
    SentencePieceTrainOptions options;
    options.input = {text};
    options.model_prefix = (*suite_dir_ / "m").string();
    options.vocab_size = 200;
    options.user_defined_symbols = {"%s", "<sep>"};
    options.input_sentence_size = 2000;
    const auto start = std::chrono::steady_clock::now();
    garden::data::train_sentencepiece(options);
    train_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(*suite_dir_, ignored);
    delete suite_dir_;
  }
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_spm_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  static std::string model() { return (*suite_dir_ / "m.model").string(); }

  static fs::path* suite_dir_;
  static double train_seconds_;
  fs::path dir_;
};
fs::path* SentencePieceTest::suite_dir_ = nullptr;
double SentencePieceTest::train_seconds_ = 0;

TEST_F(SentencePieceTest, TrainsQuicklyWithTheAskedVocabulary) {
  EXPECT_LT(train_seconds_, 3.0);
  EXPECT_TRUE(fs::exists(*suite_dir_ / "m.vocab"));
  const auto tok = SentencePieceTokenizer::load(model());
  EXPECT_EQ(tok.vocab_size(), 200);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), 3);
  EXPECT_EQ(tok.id_to_piece(2), "</s>");
  EXPECT_EQ(tok.piece_to_id("</s>"), 2);
  EXPECT_EQ(tok.piece_to_id("no such piece"), tok.unk_id());
  EXPECT_THROW(tok.id_to_piece(200), garden::Error);
}

// A reader of protobuf's wire format of its own (not Garden's): the bytes
// of the first length-delimited field `wanted` of `message`, or "(absent)".
std::string length_delimited_field(const std::string& message, int wanted) {
  std::size_t at = 0;
  const auto varint = [&] {
    uint64_t value = 0;
    for (int shift = 0; at < message.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(message[at++]);
      value |= uint64_t{byte & 0x7Fu} << shift;
      if (byte < 0x80) break;
    }
    return value;
  };
  while (at < message.size()) {
    const uint64_t key = varint();
    const auto type = key & 7;
    if (type == 0) {
      varint();
    } else if (type == 1 || type == 5) {
      at += type == 1 ? 8 : 4;
    } else if (type == 2) {
      const auto size = static_cast<std::size_t>(varint());
      if (static_cast<int>(key >> 3) == wanted) return message.substr(at, size);
      at += size;
    } else {
      return "(bad wire type)";
    }
  }
  return "(absent)";
}

TEST_F(SentencePieceTest, TheModelRecordsThePrefixItWasGiven) {
  // Trained under a temporary prefix and renamed into place, the model keeps
  // the prefix the user gave in its TrainerSpec (ModelProto field 2,
  // model_prefix its field 2), as spm_train's does: no process id in it, so
  // two trainings of the same text write the same bytes.
  std::ifstream in(model(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string spec = length_delimited_field(bytes, 2);
  EXPECT_EQ(length_delimited_field(spec, 2), (*suite_dir_ / "m").string());
  EXPECT_EQ(bytes.find(".tmp-"), std::string::npos);
  // The other fields are untouched: the input it read, and the vocabulary.
  EXPECT_EQ(length_delimited_field(spec, 1), (*suite_dir_ / "train.txt").string());
  const auto tok = SentencePieceTokenizer::load(model());
  EXPECT_EQ(tok.vocab_size(), 200);
  EXPECT_EQ(tok.decode(tok.encode("Could not open lock file %s")), "Could not open lock file %s");
}

TEST_F(SentencePieceTest, RoundTripsText) {
  const auto tok = SentencePieceTokenizer::load(model());
  for (const auto& text : kSentences) {
    const auto ids = tok.encode(text);
    ASSERT_FALSE(ids.empty());
    for (int64_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok.vocab_size());
    }
    EXPECT_EQ(tok.decode(ids), text);
    EXPECT_EQ(tok.decode_pieces(tok.encode_pieces(text)), text);
    // The pieces are the text, with U+2581 marking where a space was.
    std::string joined;
    for (const auto& piece : tok.encode_pieces(text)) joined += piece;
    std::string spaced;
    for (std::size_t i = 0; i < joined.size();) {
      if (joined.compare(i, 3, "\u2581") == 0) {
        spaced += ' ';
        i += 3;
      } else {
        spaced += joined[i++];
      }
    }
    EXPECT_EQ(spaced, " " + text);
  }
}

TEST_F(SentencePieceTest, AddsBosAndEosWhenAsked) {
  const auto plain = SentencePieceTokenizer::load(model());
  SentencePieceOptions options;
  options.add_eos = true;
  auto tok = SentencePieceTokenizer::load(model(), options);
  auto ids = tok.encode("User name");
  auto expected = plain.encode("User name");
  expected.push_back(2);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tok.encode_pieces("User name").back(), "</s>");
  EXPECT_EQ(tok.decode(ids), "User name");  // control ids decode to nothing
  options.add_bos = true;
  tok.set_options(options);
  ids = tok.encode("User name");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok.encode_pieces("User name").front(), "<s>");
}

TEST_F(SentencePieceTest, KeepsUserDefinedSymbolsWhole) {
  const auto tok = SentencePieceTokenizer::load(model());
  const auto pieces = tok.encode_pieces("jede Umleitung von %s<sep>x%sy");
  EXPECT_EQ(std::count(pieces.begin(), pieces.end(), "%s"), 2);
  EXPECT_EQ(std::count(pieces.begin(), pieces.end(), "<sep>"), 1);
  EXPECT_NE(tok.piece_to_id("%s"), tok.unk_id());
  EXPECT_NE(tok.piece_to_id("<sep>"), tok.unk_id());
}

TEST_F(SentencePieceTest, MissingModelNamesTheFile) {
  const auto missing = (dir_ / "nope.model").string();
  const auto message = error_of([&] { SentencePieceTokenizer::load(missing); });
  EXPECT_NE(message.find(missing), std::string::npos) << message;
  const auto junk = (dir_ / "junk.model").string();
  std::ofstream(junk) << "not a model";
  const auto junk_message = error_of([&] { SentencePieceTokenizer::load(junk); });
  EXPECT_NE(junk_message.find(junk), std::string::npos) << junk_message;
}

TEST_F(SentencePieceTest, BadTrainingOptionsGiveSentencePiecesMessage) {
  const auto text = (dir_ / "train.txt").string();
  garden::data::write_tsv_columns({kTsv}, {0}, text);
  SentencePieceTrainOptions options;
  options.input = {text};
  options.model_prefix = (dir_ / "bad").string();
  options.vocab_size = 200;
  options.model_type = "nonsense";
  auto message = error_of([&] { garden::data::train_sentencepiece(options); });
  EXPECT_NE(message.find("nonsense"), std::string::npos) << message;
  options.model_type = "unigram";
  options.vocab_size = 100000;  // more pieces than the text can give
  message = error_of([&] { garden::data::train_sentencepiece(options); });
  EXPECT_NE(message.find("Vocabulary size"), std::string::npos) << message;
  options.vocab_size = 200;
  options.extra_flags = {"no_such_flag=1"};
  message = error_of([&] { garden::data::train_sentencepiece(options); });
  EXPECT_NE(message.find("no_such_flag"), std::string::npos) << message;
  options.extra_flags = {};
  options.user_defined_symbols = {"a b"};
  message = error_of([&] { garden::data::train_sentencepiece(options); });
  EXPECT_NE(message.find("whitespace"), std::string::npos) << message;
  options.user_defined_symbols = {};
  options.input = {(dir_ / "missing.txt").string()};
  message = error_of([&] { garden::data::train_sentencepiece(options); });
  EXPECT_NE(message.find(options.input[0]), std::string::npos) << message;
}

TEST_F(SentencePieceTest, TrainsBpeToo) {
  const auto text = (dir_ / "train.txt").string();
  garden::data::write_tsv_columns({kTsv}, {1}, text);
  SentencePieceTrainOptions options;
  options.input = {text};
  options.model_prefix = (dir_ / "bpe").string();
  options.vocab_size = 150;
  options.model_type = "bpe";
  options.pad_id = -1;
  garden::data::train_sentencepiece(options);
  const auto tok = SentencePieceTokenizer::load(options.model_prefix + ".model");
  EXPECT_EQ(tok.vocab_size(), 150);
  EXPECT_EQ(tok.pad_id(), -1);
  EXPECT_EQ(tok.decode(tok.encode("Benutzerdefinierte Größen verwalten")),
            "Benutzerdefinierte Größen verwalten");
}

TEST_F(SentencePieceTest, WritesTsvColumns) {
  const auto tsv = (dir_ / "in.tsv").string();
  std::ofstream(tsv) << "a\tb\r\n\nc\t\nd\te\tf\n";
  const auto out = (dir_ / "out.txt").string();
  EXPECT_EQ(garden::data::write_tsv_columns({tsv}, {1, 0}, out), 5);  // empty "c\t" field skipped
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "b\na\nc\ne\nd\n");
  const auto message = error_of([&] { garden::data::write_tsv_columns({tsv}, {2}, out); });
  EXPECT_NE(message.find(tsv), std::string::npos) << message;
  EXPECT_NE(message.find("line 1"), std::string::npos) << message;
}

TEST_F(SentencePieceTest, CliStreamsEncodeAndDecode) {
  std::istringstream in("User name\nTastaturen\n");
  std::ostringstream ids;
  garden::cli::spm_encode_stream(model(), false, false, true, in, ids);
  std::istringstream ids_in(ids.str());
  std::ostringstream text;
  garden::cli::spm_decode_stream(model(), ids_in, text);
  EXPECT_EQ(text.str(), "User name\nTastaturen\n");
  std::istringstream again("User name\n");
  std::ostringstream pieces;
  garden::cli::spm_encode_stream(model(), true, false, false, again, pieces);
  EXPECT_EQ(pieces.str().rfind("\u2581", 0), 0u) << pieces.str();
  std::istringstream bad("5 6\n7 x\n");
  std::ostringstream ignored;
  const auto message = error_of([&] { garden::cli::spm_decode_stream(model(), bad, ignored); });
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
}

}  // namespace
