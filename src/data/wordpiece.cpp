#include "garden/data/wordpiece.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/unicode_case.h"

namespace garden::data {

namespace {

using namespace unicode;
using garden::unicode::append_utf8;
using garden::unicode::decode_utf8;

// Python's str.split() whitespace, which BERT's whitespace_tokenize uses: a
// bit wider than is_whitespace (line/paragraph separators, \v, \f, ...).
bool is_split_space(char32_t cp) {
  return is_whitespace(cp) || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1F) ||
         cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(cp, out);
  return out;
}

std::vector<std::u32string> split_whitespace(const std::u32string& text) {
  std::vector<std::u32string> words;
  std::u32string current;
  for (char32_t cp : text) {
    if (is_split_space(cp)) {
      if (!current.empty()) words.push_back(std::move(current));
      current.clear();
    } else {
      current += cp;
    }
  }
  if (!current.empty()) words.push_back(std::move(current));
  return words;
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

namespace {

// Hugging Face tokenizers' tokenizer.json with a WordPiece model.
WordPieceTokenizer from_tokenizer_json(const std::string& path, bool do_lower_case) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path, "tokenizer.json"));
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(path + ": not JSON (" + e.what() + ")");
  }
  const auto model = j.find("model");
  if (model == j.end() || !model->is_object() || model->value("type", "") != "WordPiece")
    throw Error(path + ": model.type is not WordPiece");
  if (model->value("continuing_subword_prefix", "##") != "##")
    throw Error(path + ": model.continuing_subword_prefix '" +
                model->value("continuing_subword_prefix", "") + "' is not '##'");
  const auto normalizer = j.find("normalizer");
  if (normalizer != j.end() && normalizer->is_object() && normalizer->contains("lowercase") &&
      normalizer->at("lowercase").is_boolean() &&
      normalizer->at("lowercase").get<bool>() != do_lower_case)
    throw Error(path + ": normalizer.lowercase " +
                std::string(normalizer->at("lowercase").get<bool>() ? "true" : "false") +
                " differs from do_lower_case " + (do_lower_case ? "true" : "false"));
  const auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object() || vocab->empty())
    throw Error(path + ": model.vocab is not an object of token -> id");
  std::vector<std::string> tokens(vocab->size());
  std::vector<bool> seen(vocab->size(), false);
  for (const auto& [token, id] : vocab->items()) {
    const int64_t value = id.is_number_integer() ? id.get<int64_t>() : -1;
    if (value < 0 || value >= static_cast<int64_t>(tokens.size()) ||
        seen[static_cast<std::size_t>(value)])
      throw Error(path + ": model.vocab gives '" + token + "' the id " + id.dump() +
                  ", not one of 0 .. " + std::to_string(tokens.size() - 1) + " once each");
    seen[static_cast<std::size_t>(value)] = true;
    tokens[static_cast<std::size_t>(value)] = token;
  }
  try {
    return WordPieceTokenizer(std::move(tokens), do_lower_case, model->value("unk_token", "[UNK]"),
                              model->value("max_input_chars_per_word", 100));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::string& path,
                                                       bool do_lower_case) {
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    return from_tokenizer_json(path, do_lower_case);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open WordPiece vocab '" + path + "': " + std::strerror(errno));
  std::vector<std::string> vocab;
  std::string line;
  while (std::getline(in, line)) vocab.push_back(trim(line));
  if (in.bad()) throw Error("cannot read WordPiece vocab '" + path + "'");
  if (vocab.empty()) throw Error("WordPiece vocab '" + path + "' is empty");
  try {
    return WordPieceTokenizer(std::move(vocab), do_lower_case);
  } catch (const Error& e) {
    throw Error("WordPiece vocab '" + path + "': " + e.what());
  }
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, bool do_lower_case,
                                       std::string unk_token, int max_input_chars_per_word)
    : vocab_(std::move(vocab)),
      do_lower_case_(do_lower_case),
      unk_token_(std::move(unk_token)),
      max_input_chars_per_word_(max_input_chars_per_word) {
  ids_.reserve(vocab_.size());
  // Like BERT's load_vocab, a repeated token maps to its last line.
  for (std::size_t i = 0; i < vocab_.size(); ++i) ids_[vocab_[i]] = static_cast<int64_t>(i);
  unk_id_ = find(unk_token_);
  if (unk_id_ < 0) throw Error("the vocabulary has no unknown token '" + unk_token_ + "'");
  pad_id_ = find("[PAD]");
  cls_id_ = find("[CLS]");
  sep_id_ = find("[SEP]");
  mask_id_ = find("[MASK]");
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  // Clean (drop NUL, U+FFFD and controls; any whitespace becomes a space) and
  // put spaces around CJK ideographs, which BERT treats as words.
  std::u32string cleaned;
  for (char32_t cp : decode_utf8(text)) {
    if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
    if (is_whitespace(cp)) {
      cleaned += U' ';
    } else if (is_cjk(cp)) {
      cleaned += U' ';
      cleaned += cp;
      cleaned += U' ';
    } else {
      cleaned += cp;
    }
  }
  std::vector<std::string> tokens;
  std::u32string normalized;
  for (const auto& word : split_whitespace(cleaned)) {
    const std::u32string* source = &word;
    if (do_lower_case_) {
      std::u32string lowered;
      for (char32_t cp : word) garden::unicode::append_lower(cp, lowered);
      normalized.clear();
      for (char32_t cp : lowered) append_stripped(cp, normalized);
      source = &normalized;
    }
    // Every punctuation character is a token of its own.
    std::u32string current;
    for (char32_t cp : *source) {
      if (is_punctuation(cp)) {
        if (!current.empty()) tokens.push_back(to_utf8(current));
        current.clear();
        tokens.push_back(to_utf8(std::u32string(1, cp)));
      } else if (is_split_space(cp)) {  // cannot arise from the tables, but be safe
        if (!current.empty()) tokens.push_back(to_utf8(current));
        current.clear();
      } else {
        current += cp;
      }
    }
    if (!current.empty()) tokens.push_back(to_utf8(current));
  }
  return tokens;
}

std::vector<std::string> WordPieceTokenizer::wordpiece_tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  const auto cps = decode_utf8(text);
  for (const auto& word32 : split_whitespace(std::u32string(cps.begin(), cps.end()))) {
    if (static_cast<int64_t>(word32.size()) > max_input_chars_per_word_) {
      pieces.push_back(unk_token_);
      continue;
    }
    // Byte offset of each code point, so candidates are substrings of `word`.
    std::string word;
    std::vector<std::size_t> offset;
    for (char32_t cp : word32) {
      offset.push_back(word.size());
      append_utf8(cp, word);
    }
    offset.push_back(word.size());
    const std::size_t n = word32.size();
    std::vector<std::string> word_pieces;
    bool bad = false;
    std::string candidate;
    for (std::size_t start = 0; start < n && !bad;) {
      std::size_t end = n;
      bool found = false;
      // Longest match first: shrink from the right until the vocabulary has it.
      for (; end > start; --end) {
        candidate = start > 0 ? "##" : "";
        candidate.append(word, offset[start], offset[end] - offset[start]);
        if (ids_.count(candidate)) {
          found = true;
          break;
        }
      }
      if (!found) {
        bad = true;
      } else {
        word_pieces.push_back(candidate);
        start = end;
      }
    }
    if (bad) {
      pieces.push_back(unk_token_);
    } else {
      for (auto& p : word_pieces) pieces.push_back(std::move(p));
    }
  }
  return pieces;
}

std::vector<std::string> WordPieceTokenizer::encode_pieces(std::string_view text) const {
  std::vector<std::string> pieces;
  for (const auto& token : basic_tokenize(text))
    for (auto& piece : wordpiece_tokenize(token)) pieces.push_back(std::move(piece));
  return pieces;
}

std::vector<int64_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const auto& piece : encode_pieces(text)) ids.push_back(piece_to_id(piece));
  return ids;
}

std::string WordPieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) {
    const std::string piece = id_to_piece(id);  // throws on a bad id
    if (!text.empty() && piece.rfind("##", 0) == 0) {
      text.append(piece, 2, std::string::npos);
    } else {
      if (!text.empty()) text += ' ';
      text += piece;
    }
  }
  return text;
}

std::string WordPieceTokenizer::id_to_piece(int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("WordPiece id " + std::to_string(id) + " is outside the vocabulary [0, " +
                std::to_string(vocab_size()) + ")");
  return vocab_[static_cast<std::size_t>(id)];
}

int64_t WordPieceTokenizer::piece_to_id(std::string_view piece) const {
  const int64_t id = find(piece);
  return id >= 0 ? id : unk_id_;
}

int64_t WordPieceTokenizer::find(std::string_view piece) const {
  auto it = ids_.find(std::string(piece));
  return it == ids_.end() ? -1 : it->second;
}

}  // namespace garden::data
