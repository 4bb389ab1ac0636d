// WordPiece vocab files (BERT's vocab.txt) on arbitrary bytes, then used on
// a fixed text, cased and uncased.
#include "wordpiece_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = garden_fuzz::write_file("vocab.txt", garden_fuzz::as_view(data, size));
  for (bool lower : {true, false}) {
    try {
      const auto tokenizer = garden::data::WordPieceTokenizer::from_vocab_file(path, lower);
      garden_fuzz::check_wordpiece(tokenizer,
                                   "Hello, World! The man page's unaffable ﬁle: 日本語 e\xcc\x81.");
    } catch (const garden::Error&) {
    }
  }
  return 0;
}
