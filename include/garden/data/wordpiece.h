// BERT's tokenizer (google-research/bert tokenization.py, FullTokenizer):
// basic tokenization (clean text, split CJK characters, lower-case and strip
// accents when uncased, split on punctuation and whitespace), then greedy
// longest-match-first WordPiece with "##" continuations.
//
// Unicode without ICU: the character classes BERT asks Python's unicodedata
// for are in garden/data/wordpiece_unicode.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "garden/data/tokenizer.h"
#include "garden/data/wordpiece_unicode.h"

namespace garden::data {

class WordPieceTokenizer : public Tokenizer {
 public:
  // vocab.txt: one token a line, id = line index (0-based). A trailing '\r'
  // and surrounding whitespace are trimmed, as BERT's load_vocab does. Throws
  // garden::Error naming the file when it cannot be read, is empty or lacks
  // unk_token. A path ending in .json is a Hugging Face tokenizer.json whose
  // model is WordPiece: its vocab (ids 0 .. N - 1), unk_token and
  // max_input_chars_per_word; a normalizer whose lowercase differs from
  // do_lower_case, another model type or a continuing_subword_prefix other
  // than "##" is refused naming the key.
  static WordPieceTokenizer from_vocab_file(const std::string& path, bool do_lower_case = true);

  // From the tokens themselves (id = index). Throws when unk_token is missing.
  explicit WordPieceTokenizer(std::vector<std::string> vocab, bool do_lower_case = true,
                              std::string unk_token = "[UNK]", int max_input_chars_per_word = 100);

  // basic_tokenize then wordpiece_tokenize on each word.
  std::vector<int64_t> encode(std::string_view text) const override;
  std::vector<std::string> encode_pieces(std::string_view text) const override;
  // Pieces joined by spaces with "##" continuations glued to the previous
  // piece (BERT has no exact detokenizer: case, accents and the spacing
  // around punctuation are lost).
  std::string decode(const std::vector<int64_t>& ids) const override;

  // BERT's BasicTokenizer alone: words and punctuation, lower-cased and
  // accent-stripped when do_lower_case.
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  // BERT's WordpieceTokenizer on one whitespace-free word: its pieces, or
  // {unk_token} when it cannot be split or is longer than
  // max_input_chars_per_word code points.
  std::vector<std::string> wordpiece_tokenize(std::string_view word) const;

  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }
  // [PAD], [UNK]; bos is [CLS] and eos is [SEP], the tokens BERT puts around
  // a sequence. -1 for a token the vocabulary lacks.
  int64_t pad_id() const override { return pad_id_; }
  int64_t unk_id() const override { return unk_id_; }
  int64_t bos_id() const override { return cls_id_; }
  int64_t eos_id() const override { return sep_id_; }
  int64_t cls_id() const { return cls_id_; }
  int64_t sep_id() const { return sep_id_; }
  int64_t mask_id() const { return mask_id_; }

  std::string id_to_piece(int64_t id) const override;
  // unk_id() for a piece not in the vocabulary.
  int64_t piece_to_id(std::string_view piece) const override;
  // -1 for a piece not in the vocabulary.
  int64_t find(std::string_view piece) const;

  bool do_lower_case() const { return do_lower_case_; }

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int64_t> ids_;
  bool do_lower_case_;
  std::string unk_token_;
  int max_input_chars_per_word_;
  int64_t unk_id_ = -1, pad_id_ = -1, cls_id_ = -1, sep_id_ = -1, mask_id_ = -1;
};

}  // namespace garden::data
