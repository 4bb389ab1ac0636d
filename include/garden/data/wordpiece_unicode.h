// The Unicode character classes of BERT's basic tokenization (WordPieceTokenizer
// in garden/data/wordpiece.h), without ICU: tables generated from Python 3.11's
// unicodedata (Unicode 14.0), the source BERT's tokenization.py asks, so both
// classify characters alike (see wordpiece_unicode.cpp for what the tables cover
// and where they fall short of Python).
#pragma once

#include <string>

#include "garden/base/encoding.h"

namespace garden::data {

// The Unicode pieces of BERT's basic tokenization, exposed for tests and for
// other BERT-style preprocessing. All take and return UTF-8; invalid UTF-8
// bytes decode to U+FFFD (which clean_text then drops).
namespace unicode {
// (decode_utf8 and append_utf8 are in garden/base/encoding.h.)
bool is_whitespace(char32_t cp);       // space, \t, \n, \r, or category Zs
bool is_control(char32_t cp);          // categories Cc, Cf, Co (not \t \n \r)
bool is_punctuation(char32_t cp);      // ASCII symbol ranges, or category P*
bool is_cjk(char32_t cp);              // BERT's _is_chinese_char ranges
bool is_nonspacing_mark(char32_t cp);  // category Mn
// (Lower-casing: garden::unicode::append_lower, garden/base/unicode_case.h.)
// NFD then drop category Mn, for the covered ranges.
void append_stripped(char32_t cp, std::u32string& out);
}  // namespace unicode

}  // namespace garden::data
