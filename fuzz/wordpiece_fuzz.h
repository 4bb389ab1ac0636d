// Checks every WordPiece target makes on what the tokenizer returns.
#pragma once

#include <string_view>

#include "fuzz_util.h"
#include "garden/data/wordpiece.h"

namespace garden_fuzz {

inline void check_wordpiece(const garden::data::WordPieceTokenizer& tokenizer,
                            std::string_view text) {
  const auto ids = tokenizer.encode(text);
  const auto pieces = tokenizer.encode_pieces(text);
  GARDEN_FUZZ_CHECK(ids.size() == pieces.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    GARDEN_FUZZ_CHECK(ids[i] >= 0 && ids[i] < tokenizer.vocab_size());
    GARDEN_FUZZ_CHECK(tokenizer.id_to_piece(ids[i]) == pieces[i]);
  }
  tokenizer.decode(ids);
}

}  // namespace garden_fuzz
