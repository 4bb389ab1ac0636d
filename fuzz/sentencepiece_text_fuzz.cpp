// SentencePiece encoding and decoding of arbitrary bytes with a model
// trained, at start, on the bundled translation pairs.
#include "fuzz_util.h"
#include "garden/data/sentencepiece.h"

namespace {

garden::data::SentencePieceTokenizer train() {
  const std::string text = garden_fuzz::scratch("pairs.txt");
  garden::data::write_tsv_columns({GARDEN_SOURCE_DIR "/data/testdata/en_de_sample.tsv"}, {0, 1},
                                  text);
  garden::data::SentencePieceTrainOptions options;
  options.input = {text};
  options.model_prefix = garden_fuzz::scratch("spm");
  options.vocab_size = 400;
  garden::data::train_sentencepiece(options);
  return garden::data::SentencePieceTokenizer::load(options.model_prefix + ".model",
                                                    {/*add_bos=*/true, /*add_eos=*/true});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizer = train();
  const std::string_view text = garden_fuzz::as_view(data, size);
  const auto ids = tokenizer.encode(text);
  const auto pieces = tokenizer.encode_pieces(text);
  GARDEN_FUZZ_CHECK(ids.size() == pieces.size());
  GARDEN_FUZZ_CHECK(ids.size() >= 2 && ids.front() == tokenizer.bos_id() &&
                    ids.back() == tokenizer.eos_id());
  for (int64_t id : ids) GARDEN_FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  // Decoding gives text that encodes again (SentencePiece normalizes, so it
  // need not give the same ids).
  const std::string decoded = tokenizer.decode(ids);
  for (int64_t id : tokenizer.encode(decoded))
    GARDEN_FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  return 0;
}
