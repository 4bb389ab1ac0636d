// WordPiece against BERT's documented behaviour (google-research/bert
// tokenization_test.py and README): same vocabularies, same expectations.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/data/wordpiece.h"

namespace {

namespace fs = std::filesystem;
using garden::data::WordPieceTokenizer;
using Pieces = std::vector<std::string>;

// The vocabulary of BERT's tokenization_test.
const std::vector<std::string> kBertTestVocab = {
    "[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","};

WordPieceTokenizer uncased() { return WordPieceTokenizer(kBertTestVocab, true); }
WordPieceTokenizer basic(bool lower) { return WordPieceTokenizer({"[UNK]"}, lower); }

TEST(WordPieceTest, FullTokenizerMatchesBert) {
  const auto tok = uncased();
  EXPECT_EQ(tok.encode_pieces("unwanted running"),
            (Pieces{"un", "##want", "##ed", "runn", "##ing"}));
  EXPECT_EQ(tok.encode("unwanted running"), (std::vector<int64_t>{7, 4, 5, 8, 9}));
  EXPECT_EQ(tok.encode_pieces("UNwant\u00E9d,running"),
            (Pieces{"un", "##want", "##ed", ",", "runn", "##ing"}));
}

TEST(WordPieceTest, CasedKeepsCaseAndAccents) {
  const WordPieceTokenizer tok(kBertTestVocab, false);
  // "UNwantéd" is not in the vocabulary in any split: one [UNK] for the word.
  EXPECT_EQ(tok.encode_pieces("UNwant\u00E9d,running"), (Pieces{"[UNK]", ",", "runn", "##ing"}));
  EXPECT_EQ(basic(false).basic_tokenize(" \tHeLLo!how  \n Are yoU?  "),
            (Pieces{"HeLLo", "!", "how", "Are", "yoU", "?"}));
  EXPECT_EQ(basic(false).basic_tokenize("H\u00E9llo"), (Pieces{"H\u00E9llo"}));
}

TEST(WordPieceTest, UncasedLowersAndStripsAccents) {
  const auto tok = basic(true);
  EXPECT_EQ(tok.basic_tokenize(" \tHeLLo!how  \n Are yoU?  "),
            (Pieces{"hello", "!", "how", "are", "you", "?"}));
  EXPECT_EQ(tok.basic_tokenize("H\u00E9llo"), (Pieces{"hello"}));
  // Already decomposed input: the combining acute (Mn) is dropped as well.
  EXPECT_EQ(tok.basic_tokenize("He\u0301llo"), (Pieces{"hello"}));
  // Latin Extended, Greek with tonos, Cyrillic short i (NFD: и + breve).
  EXPECT_EQ(tok.basic_tokenize("\u0141\u00F3d\u017A \u0386\u039B\u03A6\u0391 \u0419\u043E\u0434"),
            (Pieces{"\u0142odz", "\u03B1\u03BB\u03C6\u03B1", "\u0438\u043E\u0434"}));
  // Capital I with dot: Python lower() gives i + U+0307, which is then stripped.
  EXPECT_EQ(tok.basic_tokenize("\u0130stanbul"), (Pieces{"istanbul"}));
  // Kana with dakuten lose it; Hangul syllables become jamo (NFD).
  EXPECT_EQ(tok.basic_tokenize("\u304C"), (Pieces{"\u304B"}));
  EXPECT_EQ(tok.basic_tokenize("\uD55C"), (Pieces{"\u1112\u1161\u11AB"}));
}

TEST(WordPieceTest, ChineseCharactersAreSplit) {
  EXPECT_EQ(basic(true).basic_tokenize("ah\u535A\u63A8zz"),
            (Pieces{"ah", "\u535A", "\u63A8", "zz"}));
  EXPECT_EQ(basic(false).basic_tokenize("ah\u535A\u63A8zz"),
            (Pieces{"ah", "\u535A", "\u63A8", "zz"}));
}

TEST(WordPieceTest, ControlCharactersAndInvalidBytesAreRemoved) {
  const auto tok = basic(false);
  EXPECT_EQ(tok.basic_tokenize(std::string("a\x05"
                                           "b\x7F"
                                           "c",
                                           6)),
            (Pieces{"abc"}));
  EXPECT_EQ(tok.basic_tokenize(std::string("ab\0c", 4)), (Pieces{"abc"}));
  EXPECT_EQ(tok.basic_tokenize("a\uFFFDb\u200Bc"), (Pieces{"abc"}));  // U+200B is Cf
  EXPECT_EQ(tok.basic_tokenize("a\xFF"
                               "b"),
            (Pieces{"ab"}));  // invalid UTF-8
  // Tab, newline, NBSP and ideographic space are whitespace.
  EXPECT_EQ(tok.basic_tokenize("a\tb\nc\u00A0d\u3000e"), (Pieces{"a", "b", "c", "d", "e"}));
  EXPECT_TRUE(tok.basic_tokenize("").empty());
  EXPECT_TRUE(tok.basic_tokenize(" \t\n").empty());
  EXPECT_TRUE(uncased().encode("").empty());
}

TEST(WordPieceTest, PunctuationSplits) {
  const auto tok = basic(false);
  EXPECT_EQ(tok.basic_tokenize("hello!?"), (Pieces{"hello", "!", "?"}));
  // ASCII symbols that Unicode does not call punctuation still split.
  EXPECT_EQ(tok.basic_tokenize("$5^2`x~"), (Pieces{"$", "5", "^", "2", "`", "x", "~"}));
  // General Punctuation (em dash, ellipsis), inverted question mark, CJK full stop.
  EXPECT_EQ(tok.basic_tokenize("a\u2014b\u2026\u00BFc\u3002"),
            (Pieces{"a", "\u2014", "b", "\u2026", "\u00BF", "c", "\u3002"}));
  // Letters, digits and symbols that are not punctuation stay in the word.
  EXPECT_EQ(tok.basic_tokenize("x\u00B2\u20ACy"), (Pieces{"x\u00B2\u20ACy"}));
}

TEST(WordPieceTest, UnsplittableAndOverlongWordsAreUnk) {
  const auto tok = uncased();
  EXPECT_EQ(tok.wordpiece_tokenize("unwantedX"), (Pieces{"[UNK]"}));
  EXPECT_EQ(tok.encode_pieces("unwanted runningx"), (Pieces{"un", "##want", "##ed", "[UNK]"}));
  EXPECT_EQ(tok.encode("xyz"), (std::vector<int64_t>{0}));

  const WordPieceTokenizer as({"[UNK]", "a", "##a"});
  const std::string hundred(100, 'a');
  EXPECT_EQ(as.wordpiece_tokenize(hundred).size(), 100u);
  EXPECT_EQ(as.wordpiece_tokenize(hundred + "a"), (Pieces{"[UNK]"}));
  // The limit counts code points, not bytes: 100 two-byte letters still split.
  const WordPieceTokenizer es({"[UNK]", "\u00E9", "##\u00E9"}, false);
  std::string hundred_e;
  for (int i = 0; i < 100; ++i) hundred_e += "\u00E9";
  EXPECT_EQ(es.encode_pieces(hundred_e).size(), 100u);
  EXPECT_EQ(es.encode_pieces(hundred_e + "\u00E9"), (Pieces{"[UNK]"}));
}

TEST(WordPieceTest, SpecialTokensAndDecode) {
  const WordPieceTokenizer tok(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##want", "##ed", "runn", "##ing"});
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.cls_id(), 2);
  EXPECT_EQ(tok.eos_id(), 3);
  EXPECT_EQ(tok.mask_id(), 4);
  EXPECT_EQ(tok.piece_to_id("[MASK]"), 4);
  EXPECT_EQ(tok.piece_to_id("nope"), tok.unk_id());
  EXPECT_EQ(tok.find("nope"), -1);
  EXPECT_EQ(tok.id_to_piece(6), "##want");
  EXPECT_THROW(tok.id_to_piece(10), garden::Error);
  EXPECT_EQ(tok.vocab_size(), 10);
  EXPECT_EQ(tok.decode(tok.encode("Unwanted running")), "unwanted running");
  EXPECT_EQ(tok.decode({2, 5, 6, 3}), "[CLS] unwant [SEP]");
  // BERT's test vocabulary has no [PAD] or [MASK].
  EXPECT_EQ(uncased().pad_id(), -1);
  EXPECT_EQ(uncased().mask_id(), -1);
  EXPECT_THROW(WordPieceTokenizer({"a", "b"}), garden::Error);  // no [UNK]
}

class WordPieceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_wordpiece_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  fs::path dir_;
};

TEST_F(WordPieceFileTest, LoadsVocabFileWithLineIds) {
  const auto path = (dir_ / "vocab.txt").string();
  {
    std::ofstream out(path, std::ios::binary);
    // CRLF line ends and stray spaces are trimmed, as BERT's load_vocab does.
    for (const auto& token : kBertTestVocab) out << token << " \r\n";
  }
  const auto tok = WordPieceTokenizer::from_vocab_file(path);
  EXPECT_EQ(tok.vocab_size(), 11);
  EXPECT_EQ(tok.piece_to_id("##ing"), 9);
  EXPECT_EQ(tok.encode("unwanted running"), (std::vector<int64_t>{7, 4, 5, 8, 9}));
  EXPECT_TRUE(tok.do_lower_case());
  EXPECT_FALSE(WordPieceTokenizer::from_vocab_file(path, false).do_lower_case());
}

TEST_F(WordPieceFileTest, ErrorsNameTheFile) {
  const auto missing = (dir_ / "missing.txt").string();
  try {
    WordPieceTokenizer::from_vocab_file(missing);
    FAIL() << "no error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  const auto no_unk = (dir_ / "no_unk.txt").string();
  std::ofstream(no_unk) << "a\nb\n";
  try {
    WordPieceTokenizer::from_vocab_file(no_unk);
    FAIL() << "no error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find(no_unk), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[UNK]"), std::string::npos) << e.what();
  }
}

}  // namespace
