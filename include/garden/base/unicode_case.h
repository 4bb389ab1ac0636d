// Python's str.lower() code point by code point: what BERT's tokenizer
// (do_lower_case) and Model Garden's BLEU tokenizer lower-case with. One
// table for both, generated from Python 3.11's unicodedata (Unicode 14.0).
#pragma once

#include <string>

namespace garden::unicode {

// Appends the lower case of `cp`: Python's single-code-point mappings, and
// U+0130 (capital I with dot above) as "i" + U+0307, its one mapping to two
// code points. Python's context-dependent final sigma is the caller's: here
// capital sigma always becomes U+03C3.
void append_lower(char32_t cp, std::u32string& out);

// The lower case of `cp` when it is one code point (every case but
// U+0130's), else `cp` itself.
char32_t lower_one(char32_t cp);

}  // namespace garden::unicode
