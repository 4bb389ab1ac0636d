// The translation task's tokenizer: one joint SentencePiece model for both
// languages, with Model Garden's ids (0 pads and starts decoding, 1 ends a
// sentence).
#pragma once

#include <cstdint>
#include <string>

#include "garden/data/sentencepiece.h"
#include "garden/nlp/data/translation_data_config.h"

namespace garden::nlp {

// Trains a unigram model of vocab_size pieces on both sides of train_data
// into model_path (and its .vocab beside it).
// Everything is written to temporary names first and renamed at the end, so
// a killed or failed run never leaves a half-written model; a directory it
// had to create is removed again on failure.
void train_translation_sentencepiece(const TranslationDataConfig& train_data, int64_t vocab_size,
                                     const std::string& model_path);

// Loads a SentencePiece model and checks that it fits the task: id 0 pads
// and an EOS piece exists. Errors name the file.
data::SentencePieceTokenizer load_translation_sentencepiece(const std::string& path);

}  // namespace garden::nlp
