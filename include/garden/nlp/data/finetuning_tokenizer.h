// The tokenizers of fine-tuning: the one create_finetuning_data and the
// tasks share (WordPiece or SentencePiece, with [CLS] and [SEP]), and the
// raw-text tokenizer a task that serves text carries into its export.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "garden/data/tokenizer.h"

namespace garden::nlp {

// The tokenizer of fine-tuning: a WordPiece vocabulary (vocab.txt, lower-cased
// and accent-stripped when do_lower_case) or a SentencePiece model (the text
// prepared as Model Garden's preprocess_text: whitespace collapsed, `` and ''
// made ", accents stripped, lower-cased when do_lower_case). Either must hold
// the pieces [CLS] and [SEP].
class FinetuningTokenizer {
 public:
  enum class Kind { kWordPiece, kSentencePiece };
  // Throws garden::Error naming the file (and `flag`, the option that gave
  // it) when it cannot be read or lacks [CLS] or [SEP].
  static std::shared_ptr<const FinetuningTokenizer> open(Kind kind, const std::string& path,
                                                         bool do_lower_case,
                                                         const std::string& flag);
  std::vector<int64_t> tokenize(std::string_view text) const;
  // The string `id` stands for ("##ing", "▁the").
  std::string piece(int64_t id) const { return tokenizer_->id_to_piece(id); }
  bool do_lower_case() const { return do_lower_case_; }
  int64_t cls_id() const { return cls_id_; }
  int64_t sep_id() const { return sep_id_; }
  int64_t unk_id() const { return tokenizer_->unk_id(); }
  int64_t vocab_size() const { return tokenizer_->vocab_size(); }
  Kind kind() const { return kind_; }
  const std::string& path() const { return path_; }

 private:
  Kind kind_ = Kind::kWordPiece;
  std::string path_;
  bool do_lower_case_ = true;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  int64_t cls_id_ = -1, sep_id_ = -1;
};

// "WordPiece" or "SentencePiece" (Model Garden's `tokenization`); throws for
// anything else.
FinetuningTokenizer::Kind tokenization_kind(const std::string& name);

// The raw-text tokenizer of a fine-tuning task that serves text: its data
// config's vocab_file (tokenization, lower_case) while training, the
// export's asset once its serving module's prepare gave it. Opened on first use.
class TaskTextTokenizer {
 public:
  // `flag`: the config key that gave vocab_file, named in errors.
  // `model_vocab_size` (when > 0): the encoder's vocab_size; a vocabulary
  // with more pieces is refused when opened, naming both (its last ids would
  // have no embedding).
  TaskTextTokenizer(std::string vocab_file, std::string tokenization, bool lower_case,
                    std::string flag = "task.train_data.vocab_file", int64_t model_vocab_size = 0);
  bool configured() const { return !vocab_file_.empty(); }
  // The file export copies: {"vocab.txt" or "sp.model": vocab_file}, or
  // none when no vocab_file is set.
  std::map<std::string, std::string> assets() const;
  // The export's copy, opened at once (so that serving threads only read
  // it); throws garden::Error when the export lacks it.
  void use_assets(const std::map<std::string, std::string>& assets);
  const FinetuningTokenizer& get();
  // Opens the tokenizer when one is configured, so that a vocabulary the
  // model cannot embed fails before training rather than at export.
  void check() {
    if (configured()) get();
  }

 private:
  std::string vocab_file_, tokenization_;
  bool lower_case_;
  std::string flag_;
  int64_t model_vocab_size_ = 0;
  std::string asset_path_;
  std::shared_ptr<const FinetuningTokenizer> tokenizer_;
};

}  // namespace garden::nlp
