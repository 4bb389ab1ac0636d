// The tokenizers of BLEU:
//  * sacreBLEU's (sacrebleu 2.x): `13a` (its default), `intl` and `none`, with
//    the preprocessing of BLEU._preprocess_segment (lowercasing, rstrip);
//  * Model Garden's official/nlp/metrics/bleu.py `bleu_tokenize`.
//
// All text is UTF-8. Unicode properties (punctuation P*, symbols S*, numbers N*,
// whitespace, lowercasing) follow Python's unicodedata/str semantics, from tables
// generated with Python (Unicode 14.0); see src/nlp/bleu_tokenizers.cpp for the two
// documented simplifications (Greek final sigma context, invalid UTF-8).
#pragma once

#include <string>
#include <vector>

namespace garden::nlp {

enum class BleuTokenizer {
  k13a,   // mteval-v13a.pl regexes (sacreBLEU's default)
  kIntl,  // mteval-v14 "international": split on Unicode punctuation and symbols
  kNone,  // whitespace split only
};

// "13a", "intl" or "none"; anything else throws garden::Error.
BleuTokenizer parse_bleu_tokenizer(const std::string& name);

// Tokenizes one line the way sacreBLEU's tokenizer does: tokens joined by single spaces.
std::string bleu_tokenize(const std::string& line, BleuTokenizer tokenizer);

// Python's str.lower() on UTF-8 text.
std::string unicode_lowercase(const std::string& text);

// sacreBLEU's BLEU._preprocess_segment followed by the split into words: the
// segment lowercased when asked (Python's str.lower()), stripped on the right
// (str.rstrip()), then tokenized. What corpus_bleu counts n-grams of.
std::vector<std::string> bleu_segment_tokens(const std::string& segment, BleuTokenizer tokenizer,
                                             bool lowercase);

// Model Garden's `bleu_tokenize` (tensor2tensor's bleu_hook): tokens of one line.
std::vector<std::string> model_garden_bleu_tokenize(const std::string& line);

}  // namespace garden::nlp
