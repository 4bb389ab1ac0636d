// The tokenizer interface the text tasks use: text <-> ids, whatever the
// algorithm behind it (SentencePiece, WordPiece). Kept free of torch and of
// any third-party header so every layer can include it cheaply.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace garden::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text (UTF-8) to ids / to pieces (the strings those ids stand for).
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  virtual std::vector<std::string> encode_pieces(std::string_view text) const = 0;
  // Ids back to text. Special ids (pad, bos, eos, ...) are dropped where the
  // algorithm defines that (SentencePiece does; WordPiece keeps them).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;

  virtual int64_t vocab_size() const = 0;
  // Special ids; -1 when the vocabulary has no such token.
  virtual int64_t pad_id() const = 0;
  virtual int64_t unk_id() const = 0;
  virtual int64_t bos_id() const = 0;
  virtual int64_t eos_id() const = 0;

  // The piece of `id`; throws garden::Error when id is out of range.
  virtual std::string id_to_piece(int64_t id) const = 0;
  // The id of `piece`; unk_id() when the vocabulary does not have it.
  virtual int64_t piece_to_id(std::string_view piece) const = 0;
};

}  // namespace garden::data
