// SentencePiece tokenization and training, in process, through Debian's
// libsentencepiece. The library carries its own protobuf 3.14, which aborts
// in a process that also has the system's protobuf (LibTorch, Garden), so it
// lives in the module libgarden_sentencepiece.so, loaded with dlmopen into a
// link-map namespace of its own (see sentencepiece.cpp and garden_spm.h).
// Calls are thread-safe: the input pipeline encodes on its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "garden/data/tokenizer.h"

namespace garden::data {

struct SentencePieceOptions {
  // Prepend bos_id() / append eos_id() to encode()'s ids and encode_pieces()'s
  // pieces (the translation task appends EOS to targets).
  bool add_bos = false;
  bool add_eos = false;
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Loads a trained `<prefix>.model` (its vocabulary and special ids are read
  // here). Throws garden::Error naming `path` when it is missing or not a
  // SentencePiece model.
  static SentencePieceTokenizer load(const std::string& path, SentencePieceOptions options = {});

  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer() override;

  std::vector<int64_t> encode(std::string_view text) const override;
  std::vector<std::string> encode_pieces(std::string_view text) const override;
  // encode() of each text.
  std::vector<std::vector<int64_t>> encode_lines(const std::vector<std::string>& texts) const;
  // Control ids (bos, eos, pad) are dropped; unk decodes to " \u2047 ".
  std::string decode(const std::vector<int64_t>& ids) const override;
  // Pieces (as encode_pieces gives them) back to text.
  std::string decode_pieces(const std::vector<std::string>& pieces) const;

  int64_t vocab_size() const override;
  int64_t pad_id() const override;
  int64_t unk_id() const override;
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  std::string id_to_piece(int64_t id) const override;
  int64_t piece_to_id(std::string_view piece) const override;

  const SentencePieceOptions& options() const { return options_; }
  void set_options(const SentencePieceOptions& options) { options_ = options; }
  const std::string& path() const { return path_; }

 public:
  struct Impl;  // opaque: the vocabulary read from the model file

 private:
  SentencePieceTokenizer(std::unique_ptr<Impl> impl, std::string path,
                         SentencePieceOptions options);

  std::unique_ptr<Impl> impl_;
  std::string path_;
  SentencePieceOptions options_;
};

// SentencePieceTrainer's flags that Garden sets; the defaults are
// SentencePiece's own except where noted. Training writes
// `<model_prefix>.model` and `<model_prefix>.vocab`.
struct SentencePieceTrainOptions {
  // Plain text files, one sentence a line. For TSV data, extract the text
  // first with write_tsv_columns().
  std::vector<std::string> input;
  // What the model records as its input (TrainerSpec.input, as spm_train
  // records --input): the files the text came from when `input` is a scratch
  // file made from them. Empty: `input`.
  std::vector<std::string> recorded_input;
  std::string model_prefix;
  int64_t vocab_size = 8000;
  std::string model_type = "unigram";  // unigram, bpe, char or word
  // 1.0 (SentencePiece: 0.9995) keeps every character of small, mostly-Latin
  // corpora such as ours; use 0.9995 for CJK-rich text.
  double character_coverage = 1.0;
  // Kept as single pieces wherever they occur (e.g. "%s", "<sep>").
  std::vector<std::string> user_defined_symbols;
  // -1 disables a special token. SentencePiece's defaults, except that pad
  // is 3 (it is -1 there) because the models need a padding id.
  int64_t unk_id = 0;
  int64_t bos_id = 1;
  int64_t eos_id = 2;
  int64_t pad_id = 3;
  // Sample this many sentences (0: all), shuffled first when shuffle is set.
  int64_t input_sentence_size = 0;
  bool shuffle_input_sentence = true;
  int num_threads = 1;
  // Any other TrainerSpec flag as "name=value" (e.g. "max_sentence_length=8192").
  std::vector<std::string> extra_flags;
  // Only SentencePiece's warnings and errors on stderr, not its progress log.
  bool quiet = true;
};

// Trains a model. Throws garden::Error with SentencePiece's message when it
// fails (a missing input, an impossible vocab_size, an unknown flag, ...).
// Inputs are checked first (each a readable file, none of them PREFIX.model
// or PREFIX.vocab). The model trains under a temporary prefix beside the
// outputs, renamed over them on success only: a failure leaves existing
// PREFIX.model / PREFIX.vocab as they were and no temporary file behind.
// SentencePiece passes flags as one whitespace-separated string, so no value
// (path, symbol) may contain whitespace; that is an error too.
void train_sentencepiece(const SentencePieceTrainOptions& options);

// Throws garden::Error starting with `what` unless `model_prefix` names a
// file prefix (not empty, not ending in a directory) in a directory that
// exists.
void check_model_prefix(const std::string& model_prefix, const std::string& what);

// Writes the fields `columns` (0-based) of every line of each TSV file to
// `output`, one field a line, skipping empty fields: the training text for
// parallel data such as `english<TAB>german`. Returns the lines written.
// Throws naming the file and line when a line lacks a column, and before
// writing anything when an input is missing, a directory, or `output` itself.
// `output` is written atomically: whole, or left as it was.
int64_t write_tsv_columns(const std::vector<std::string>& tsv_files,
                          const std::vector<int>& columns, const std::string& output);

}  // namespace garden::data
