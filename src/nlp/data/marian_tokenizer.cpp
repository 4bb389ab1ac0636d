#include "garden/nlp/data/marian_tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace garden::nlp {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPad = "<pad>";
constexpr const char* kEos = "</s>";
constexpr const char* kUnk = "<unk>";

int64_t required_piece(const std::unordered_map<std::string, int64_t>& ids, const char* piece,
                       const std::string& where) {
  const auto it = ids.find(piece);
  if (it == ids.end()) throw Error(where + " has no '" + piece + "'");
  return it->second;
}

}  // namespace

bool MarianTokenizer::is_marian_dir(const std::string& dir) {
  std::error_code ignored;
  return !dir.empty() && fs::is_directory(dir, ignored) &&
         fs::is_regular_file(fs::path(dir) / kVocabFile, ignored) &&
         fs::is_regular_file(fs::path(dir) / kSourceSpmFile, ignored);
}

std::map<std::string, std::string> MarianTokenizer::files(const std::string& dir) {
  const fs::path root(dir);
  const fs::path target = root / kTargetSpmFile;
  return {{kVocabFile, (root / kVocabFile).string()},
          {kSourceSpmFile, (root / kSourceSpmFile).string()},
          {kTargetSpmFile, (fs::exists(target) ? target : root / kSourceSpmFile).string()}};
}

MarianTokenizer::MarianTokenizer(MarianTokenizer&&) noexcept = default;
MarianTokenizer& MarianTokenizer::operator=(MarianTokenizer&&) noexcept = default;
MarianTokenizer::~MarianTokenizer() = default;

MarianTokenizer MarianTokenizer::load(const std::string& dir) {
  MarianTokenizer t;
  t.dir_ = dir;
  const fs::path root(dir);
  if (fs::exists(root / "target_vocab.json"))
    throw Error(dir +
                " holds target_vocab.json: separate source and target vocabularies are not "
                "supported (the translation Transformer shares one embedding)");
  const auto paths = files(dir);
  const std::string& vocab_path = paths.at(kVocabFile);
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_path, "Marian vocabulary"));
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(vocab_path + ": not JSON (" + e.what() + ")");
  }
  if (!vocab.is_object() || vocab.empty())
    throw Error(vocab_path + ": not a JSON object of piece -> id");
  t.pieces_.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [piece, id] : vocab.items()) {
    if (!id.is_number_integer())
      throw Error(vocab_path + ": the id of '" + piece + "' is not an integer");
    const int64_t value = id.get<int64_t>();
    if (value < 0 || value >= static_cast<int64_t>(vocab.size()))
      throw Error(vocab_path + ": '" + piece + "' has id " + std::to_string(value) +
                  ", outside 0 .. " + std::to_string(vocab.size() - 1));
    if (seen[static_cast<std::size_t>(value)])
      throw Error(vocab_path + ": id " + std::to_string(value) + " is given to two pieces");
    seen[static_cast<std::size_t>(value)] = true;
    t.pieces_[static_cast<std::size_t>(value)] = piece;
    t.ids_.emplace(piece, value);
  }
  t.pad_ = required_piece(t.ids_, kPad, vocab_path);
  t.eos_ = required_piece(t.ids_, kEos, vocab_path);
  t.unk_ = required_piece(t.ids_, kUnk, vocab_path);
  t.source_ = std::make_unique<data::SentencePieceTokenizer>(
      data::SentencePieceTokenizer::load(paths.at(kSourceSpmFile)));
  t.target_ = std::make_unique<data::SentencePieceTokenizer>(
      data::SentencePieceTokenizer::load(paths.at(kTargetSpmFile)));
  return t;
}

int64_t MarianTokenizer::vocab_size() const { return static_cast<int64_t>(pieces_.size()); }
int64_t MarianTokenizer::unk_id() const { return to_garden(unk_); }
int64_t MarianTokenizer::eos_id() const { return to_garden(eos_); }

int64_t MarianTokenizer::to_marian(int64_t garden_id) const {
  const int64_t v = vocab_size();
  if (garden_id < 0 || garden_id >= v)
    throw Error("token id " + std::to_string(garden_id) + " is outside the vocabulary of " + dir_ +
                " (" + std::to_string(v) + " pieces)");
  return (garden_id + pad_) % v;
}

int64_t MarianTokenizer::to_garden(int64_t marian_id) const {
  const int64_t v = vocab_size();
  return ((marian_id - pad_) % v + v) % v;
}

std::vector<std::string> MarianTokenizer::encode_pieces(std::string_view text) const {
  std::vector<std::string> pieces;
  // transformers' remove_language_code: ">>xx<<" first is a token of its own.
  if (text.size() >= 2 && text.substr(0, 2) == ">>") {
    const auto end = text.find("<<");
    if (end != std::string_view::npos) {
      pieces.emplace_back(text.substr(0, end + 2));
      text.remove_prefix(end + 2);
    }
  }
  for (auto& piece : source_->encode_pieces(text)) pieces.push_back(std::move(piece));
  return pieces;
}

std::vector<int64_t> MarianTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const auto& piece : encode_pieces(text)) ids.push_back(piece_to_id(piece));
  return ids;
}

std::vector<int64_t> MarianTokenizer::encode_target(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const auto& piece : target_->encode_pieces(text)) ids.push_back(piece_to_id(piece));
  return ids;
}

std::string MarianTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> pieces;
  for (const int64_t id : ids) {
    const int64_t marian = to_marian(id);
    if (marian == pad_ || marian == eos_ || marian == unk_) continue;
    pieces.push_back(pieces_[static_cast<std::size_t>(marian)]);
  }
  // MarianTokenizer.convert_tokens_to_string: the pieces joined by one
  // SentencePiece model (the source's when the vocabulary is shared, as
  // transformers 5 decodes), which gives a piece it does not know back as
  // it is, U+2581 ("▁") and all; then every U+2581 left is a space, and
  // the ends are stripped (Python's strip()).
  std::string text = source_->decode_pieces(pieces);
  static const std::string kWordBoundary = "\xE2\x96\x81";  // U+2581
  for (auto at = text.find(kWordBoundary); at != std::string::npos;
       at = text.find(kWordBoundary, at + 1))
    text.replace(at, kWordBoundary.size(), " ");
  const char* const kSpace = " \t\n\r\f\v";
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(kSpace) - first + 1);
}

std::string MarianTokenizer::id_to_piece(int64_t id) const {
  return pieces_[static_cast<std::size_t>(to_marian(id))];
}

int64_t MarianTokenizer::piece_to_id(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  return to_garden(it == ids_.end() ? unk_ : it->second);
}

std::string marian_vocab_json(const data::Tokenizer& tokenizer) {
  const int64_t v = tokenizer.vocab_size();
  if (tokenizer.pad_id() != 0)
    throw Error("a Marian vocabulary needs the tokenizer's padding at id 0, not " +
                std::to_string(tokenizer.pad_id()));
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  // Written in Marian id order: "</s>" (Garden's 1) first, "<pad>" last.
  for (int64_t m = 0; m < v; ++m) vocab[tokenizer.id_to_piece((m + 1) % v)] = m;
  if (static_cast<int64_t>(vocab.size()) != v)
    throw Error("the tokenizer has pieces that repeat: no vocab.json can name them");
  for (const char* piece : {kPad, kEos, kUnk})
    if (!vocab.contains(piece))
      throw Error(std::string("the tokenizer has no '") + piece + "', which MarianTokenizer needs");
  return vocab.dump(2) + "\n";
}

}  // namespace garden::nlp
