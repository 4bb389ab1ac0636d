// MarianMT's tokenizer (transformers' MarianTokenizer, the OPUS-MT family):
// a directory with source.spm and target.spm, SentencePiece models that cut
// text into pieces, and vocab.json, which maps each piece to the model's id.
//
// Ids are Garden's, not the file's: the translation task pads and starts
// decoding with id 0, so the model's ids are rotated to put <pad> there,
//   garden = (marian - pad) mod V,   marian = (garden + pad) mod V,
// where V is the vocabulary's size and pad vocab.json's "<pad>" (V - 1 in
// OPUS-MT, so "</s>" 0 becomes 1 and "<unk>" 1 becomes 2). The interop layer
// rotates the embedding rows the same way (garden/nlp/interop/marian.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "garden/data/sentencepiece.h"
#include "garden/data/tokenizer.h"

namespace garden::nlp {

class MarianTokenizer : public data::Tokenizer {
 public:
  static constexpr const char* kVocabFile = "vocab.json";
  static constexpr const char* kSourceSpmFile = "source.spm";
  static constexpr const char* kTargetSpmFile = "target.spm";

  // A directory holding vocab.json and source.spm.
  static bool is_marian_dir(const std::string& dir);
  // The tokenizer's files in `dir`, by their names: vocab.json, source.spm
  // and target.spm (source.spm where the directory has no target.spm, as
  // load() reads it).
  static std::map<std::string, std::string> files(const std::string& dir);
  // Reads the three files; one garden::Error line naming the file for
  // anything missing or malformed (vocab.json not an object of piece -> id,
  // ids not 0 .. V - 1 each once, no "<pad>", "</s>" or "<unk>"), and
  // target_vocab.json (separate vocabularies) refused.
  static MarianTokenizer load(const std::string& dir);

  MarianTokenizer(MarianTokenizer&&) noexcept;
  MarianTokenizer& operator=(MarianTokenizer&&) noexcept;
  ~MarianTokenizer() override;

  // transformers' MarianTokenizer without the end token (the task appends
  // eos_id()): a leading language code ">>xx<<" that vocab.json holds is
  // one token; the rest is source.spm's pieces, each looked up in vocab.json
  // (a piece it lacks is <unk>).
  std::vector<int64_t> encode(std::string_view text) const override;
  std::vector<std::string> encode_pieces(std::string_view text) const override;
  // A target sentence (MarianTokenizer's text_target): target.spm's pieces,
  // looked up in vocab.json.
  std::vector<int64_t> encode_target(std::string_view text) const;
  // As MarianTokenizer.decode(ids, skip_special_tokens=True) in
  // transformers 5: <pad>, </s> and <unk> are dropped, the other pieces
  // joined by source.spm (a piece it does not know, one of target.spm's,
  // stays as it is), every U+2581 left becomes a space, and the ends are
  // stripped. A piece of either model decodes to its text.
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  int64_t pad_id() const override { return 0; }
  int64_t unk_id() const override;
  int64_t bos_id() const override { return -1; }
  int64_t eos_id() const override;
  std::string id_to_piece(int64_t id) const override;
  int64_t piece_to_id(std::string_view piece) const override;

  // The rotation above.
  int64_t marian_pad_id() const { return pad_; }
  int64_t to_marian(int64_t garden_id) const;
  int64_t to_garden(int64_t marian_id) const;
  const std::string& dir() const { return dir_; }

 private:
  MarianTokenizer() = default;
  std::string dir_;
  std::unique_ptr<data::SentencePieceTokenizer> source_, target_;
  std::vector<std::string> pieces_;               // by Marian id
  std::unordered_map<std::string, int64_t> ids_;  // piece -> Marian id
  int64_t pad_ = 0, eos_ = 0, unk_ = 0;           // Marian ids
};

// vocab.json for a Garden tokenizer (pad 0) as MarianTokenizer reads it:
// each piece under the id (garden - 1) mod V, so <pad> is V - 1 as in
// OPUS-MT. Throws when the tokenizer lacks "<pad>", "</s>" or "<unk>".
std::string marian_vocab_json(const data::Tokenizer& tokenizer);

}  // namespace garden::nlp
