#include "garden/nlp/data/finetuning_tokenizer.h"

#include <cctype>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/unicode_case.h"
#include "garden/data/sentencepiece.h"
#include "garden/data/wordpiece.h"
#include "garden/data/wordpiece_unicode.h"

namespace garden::nlp {

namespace {
// Model Garden's preprocess_text for SentencePiece.
std::string preprocess_text(std::string_view text, bool lower) {
  std::string collapsed;
  bool space = false;
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !collapsed.empty();
      continue;
    }
    if (space) collapsed += ' ';
    space = false;
    collapsed += c;
  }
  std::string quoted;
  for (std::size_t i = 0; i < collapsed.size(); ++i) {
    if (i + 1 < collapsed.size() && ((collapsed[i] == '`' && collapsed[i + 1] == '`') ||
                                     (collapsed[i] == '\'' && collapsed[i + 1] == '\''))) {
      quoted += '"';
      ++i;
    } else {
      quoted += collapsed[i];
    }
  }
  std::u32string stripped;
  for (const char32_t cp : unicode::decode_utf8(quoted))
    data::unicode::append_stripped(cp, stripped);
  std::u32string cased;
  if (lower)
    for (const char32_t cp : stripped) unicode::append_lower(cp, cased);
  std::string out;
  for (const char32_t cp : lower ? cased : stripped) unicode::append_utf8(cp, out);
  return out;
}
}  // namespace

FinetuningTokenizer::Kind tokenization_kind(const std::string& name) {
  if (name == "WordPiece") return FinetuningTokenizer::Kind::kWordPiece;
  if (name == "SentencePiece") return FinetuningTokenizer::Kind::kSentencePiece;
  throw Error("tokenization '" + name + "' is not one of WordPiece, SentencePiece");
}

std::shared_ptr<const FinetuningTokenizer> FinetuningTokenizer::open(Kind kind,
                                                                     const std::string& path,
                                                                     bool do_lower_case,
                                                                     const std::string& flag) {
  check_input_file(path, flag);
  auto out = std::make_shared<FinetuningTokenizer>();
  out->kind_ = kind;
  out->path_ = path;
  out->do_lower_case_ = do_lower_case;
  if (kind == Kind::kWordPiece)
    out->tokenizer_ = std::make_unique<data::WordPieceTokenizer>(
        data::WordPieceTokenizer::from_vocab_file(path, do_lower_case));
  else
    out->tokenizer_ =
        std::make_unique<data::SentencePieceTokenizer>(data::SentencePieceTokenizer::load(path));
  auto special = [&](const char* piece) {
    const int64_t id = out->tokenizer_->piece_to_id(piece);
    if (id < 0 || out->tokenizer_->id_to_piece(id) != piece)
      throw Error(flag + " '" + path + "' has no piece " + piece +
                  (kind == Kind::kWordPiece
                       ? " (add it to the vocabulary)"
                       : " (train the model with --user_defined_symbols=[CLS],[SEP],[MASK])"));
    return id;
  };
  out->cls_id_ = special("[CLS]");
  out->sep_id_ = special("[SEP]");
  return out;
}

std::vector<int64_t> FinetuningTokenizer::tokenize(std::string_view text) const {
  if (kind_ == Kind::kWordPiece) return tokenizer_->encode(text);
  return tokenizer_->encode(preprocess_text(text, do_lower_case_));
}

TaskTextTokenizer::TaskTextTokenizer(std::string vocab_file, std::string tokenization,
                                     bool lower_case, std::string flag, int64_t model_vocab_size)
    : vocab_file_(std::move(vocab_file)),
      tokenization_(std::move(tokenization)),
      lower_case_(lower_case),
      flag_(std::move(flag)),
      model_vocab_size_(model_vocab_size) {}

namespace {
const char* asset_name(const std::string& tokenization) {
  return tokenization == "WordPiece" ? "vocab.txt" : "sp.model";
}
}  // namespace

std::map<std::string, std::string> TaskTextTokenizer::assets() const {
  if (vocab_file_.empty()) return {};
  return {{asset_name(tokenization_), vocab_file_}};
}

void TaskTextTokenizer::use_assets(const std::map<std::string, std::string>& assets) {
  if (vocab_file_.empty()) return;
  const auto it = assets.find(asset_name(tokenization_));
  if (it == assets.end())
    throw Error(std::string("the export has no asset '") + asset_name(tokenization_) + "'");
  asset_path_ = it->second;
  tokenizer_.reset();
  // Opened now, not on the first request: serving threads then only read it.
  get();
}

const FinetuningTokenizer& TaskTextTokenizer::get() {
  if (!tokenizer_) {
    const std::string& path = asset_path_.empty() ? vocab_file_ : asset_path_;
    if (path.empty()) throw Error(flag_ + " is empty: the task has no tokenizer for raw text");
    auto opened =
        FinetuningTokenizer::open(tokenization_kind(tokenization_), path, lower_case_, flag_);
    if (model_vocab_size_ > 0 && opened->vocab_size() > model_vocab_size_)
      throw Error(flag_ + " '" + path + "' has " + std::to_string(opened->vocab_size()) +
                  " pieces, more than the encoder's vocab_size " +
                  std::to_string(model_vocab_size_) + ": ids from " +
                  std::to_string(model_vocab_size_) +
                  " on would have no embedding; use the vocabulary the encoder was trained with");
    tokenizer_ = std::move(opened);
  }
  return *tokenizer_;
}

}  // namespace garden::nlp
