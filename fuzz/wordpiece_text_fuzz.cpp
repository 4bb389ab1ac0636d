// WordPiece tokenization (BERT's basic tokenizer: Unicode categories, accent
// stripping, CJK, control characters) of arbitrary bytes.
#include <vector>

#include "wordpiece_fuzz.h"

namespace {

garden::data::WordPieceTokenizer make(bool lower) {
  std::vector<std::string> vocab{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const char* word :
       {"the", "a", "man", "page", "un", "##aff", "##able", "file", "##s", ",",
        ".",   "!", "'",   "日",   "本", "é",     "e",      "##e",  "ﬁ",   "The"})
    vocab.push_back(word);
  for (char c = 'a'; c <= 'z'; ++c) {
    vocab.push_back(std::string(1, c));
    vocab.push_back("##" + std::string(1, c));
  }
  return garden::data::WordPieceTokenizer(vocab, lower);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto uncased = make(true), cased = make(false);
  const std::string_view text = garden_fuzz::as_view(data, size);
  garden_fuzz::check_wordpiece(uncased, text);
  garden_fuzz::check_wordpiece(cased, text);
  return 0;
}
