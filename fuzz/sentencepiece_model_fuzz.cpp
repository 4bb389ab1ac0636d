// SentencePiece model files on arbitrary bytes: refused with one line, or
// loaded and used.
#include "fuzz_util.h"
#include "garden/data/sentencepiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = garden_fuzz::write_file("spm.model", garden_fuzz::as_view(data, size));
  try {
    const auto tokenizer = garden::data::SentencePieceTokenizer::load(path);
    const auto ids = tokenizer.encode("Hello, World! Öffne die Datei.");
    for (int64_t id : ids) GARDEN_FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
    tokenizer.decode(ids);
  } catch (const garden::Error&) {
  }
  return 0;
}
