// SentencePiece through Debian's command-line tools (package `sentencepiece`:
// spm_train, spm_encode, spm_decode), not its library.
//
// Why not libsentencepiece: Debian builds it with a bundled protobuf 3.14
// whose symbols it exports. In a process that also loads the system protobuf
// 3.21 (garden's own protos, libtorch's onnx_proto), the library's protobuf
// calls bind to 3.21 and it aborts ("compiled against version 3.14.0 ...")
// on the first model it trains or loads. The tools run in their own process,
// so they are unaffected. The model file is read here directly (a small
// protobuf wire-format reader) for the vocabulary and the special ids.
#include "garden/data/sentencepiece.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unordered_map>

#include "garden/core/error.h"

extern char** environ;

namespace garden::data {

namespace fs = std::filesystem;

struct SentencePieceTokenizer::Impl {
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int64_t> ids;
  int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;  // TrainerSpec's defaults
};

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A scratch directory for one tool run, removed with the object.
class Scratch {
 public:
  Scratch() {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("garden_spm_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  fs::path operator/(const char* name) const { return dir_ / name; }

 private:
  fs::path dir_;
};

struct ToolResult {
  int status = 0;
  std::string out, err;
};

// Runs `args[0]` (found on PATH) with `input` on stdin; captures stdout and
// stderr through files (no pipe deadlocks, no threads).
ToolResult run_tool(const std::vector<std::string>& args, const std::string& input) {
  Scratch scratch;
  const auto in_path = scratch / "in", out_path = scratch / "out", err_path = scratch / "err";
  std::ofstream(in_path, std::ios::binary) << input;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw Error("cannot run SentencePiece's '" + args[0] +
                "' (Debian package sentencepiece): " + std::strerror(rc));
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  ToolResult result;
  result.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

// The tool's own error: its last non-empty stderr lines that are not the
// generic "Program terminated" trailer, e.g.
// `trainer_interface.cc(...) [...] Vocabulary size is too high (100000) ...`.
std::string tool_message(const ToolResult& r) {
  std::istringstream lines(r.err);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (line.empty() || line.rfind("Program terminated", 0) == 0) continue;
    if (line.find("LOG(INFO)") != std::string::npos) continue;
    // A bad flag is reported first, followed by the whole usage text.
    if (line.rfind("Unknown/Invalid flag", 0) == 0) return line;
    last = line;
  }
  if (last.empty()) last = "exit status " + std::to_string(r.status);
  return last;
}

ToolResult check_tool(const std::vector<std::string>& args, const std::string& input,
                      const std::string& what) {
  auto result = run_tool(args, input);
  if (result.status != 0) throw Error(what + ": " + tool_message(result));
  return result;
}

bool has_whitespace(const std::string& text) {
  for (char c : text)
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return true;
  return false;
}

std::string join(const std::vector<std::string>& items, char separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

// ---- protobuf wire format, just enough for ModelProto:
//   ModelProto   { repeated SentencePiece pieces = 1; TrainerSpec trainer_spec = 2; ... }
//   SentencePiece{ string piece = 1; float score = 2; Type type = 3; }
//   TrainerSpec  { ... int32 unk_id = 40; bos_id = 41; eos_id = 42; pad_id = 43; ... }
struct Wire {
  const char* p;
  const char* end;
  bool ok = true;

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) break;
      const auto b = static_cast<unsigned char>(*p++);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  // Calls f(field, wire_type, value or length-delimited bytes) for each field.
  template <typename F>
  void fields(F&& f) {
    while (ok && p < end) {
      const uint64_t key = varint();
      const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
      if (type == 0) {
        f(field, type, varint(), std::string_view());
      } else if (type == 2) {
        const uint64_t n = varint();
        if (n > static_cast<uint64_t>(end - p)) {
          ok = false;
          return;
        }
        f(field, type, 0, std::string_view(p, n));
        p += n;
      } else if (type == 5 || type == 1) {
        const std::ptrdiff_t n = type == 5 ? 4 : 8;
        if (end - p < n) {
          ok = false;
          return;
        }
        p += n;
      } else {
        ok = false;
      }
    }
  }
};

std::unique_ptr<SentencePieceTokenizer::Impl> parse_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot load SentencePiece model '" + path + "': " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto impl = std::make_unique<SentencePieceTokenizer::Impl>();
  Wire model{bytes.data(), bytes.data() + bytes.size()};
  bool valid = true;
  model.fields([&](int field, int type, uint64_t, std::string_view data) {
    if (field == 1 && type == 2) {
      Wire piece{data.data(), data.data() + data.size()};
      std::string text;
      piece.fields([&](int f, int t, uint64_t, std::string_view d) {
        if (f == 1 && t == 2) text = std::string(d);
      });
      valid = valid && piece.ok;
      impl->pieces.push_back(std::move(text));
    } else if (field == 2 && type == 2) {
      Wire spec{data.data(), data.data() + data.size()};
      spec.fields([&](int f, int t, uint64_t v, std::string_view) {
        // int32 fields: negative values are 64-bit two's complement varints.
        const auto value = static_cast<int64_t>(static_cast<int32_t>(v));
        if (t != 0) return;
        if (f == 40) impl->unk_id = value;
        if (f == 41) impl->bos_id = value;
        if (f == 42) impl->eos_id = value;
        if (f == 43) impl->pad_id = value;
      });
      valid = valid && spec.ok;
    }
  });
  if (!model.ok || !valid || impl->pieces.empty())
    throw Error("cannot load SentencePiece model '" + path + "': not a SentencePiece model");
  for (std::size_t i = 0; i < impl->pieces.size(); ++i)
    impl->ids.emplace(impl->pieces[i], static_cast<int64_t>(i));
  return impl;
}

// The tools work line by line: a newline inside `text` would split it.
std::string one_line(std::string_view text) {
  std::string line(text);
  for (auto& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  return line + "\n";
}

std::string strip_newline(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl, std::string path,
                                               SentencePieceOptions options)
    : impl_(std::move(impl)), path_(std::move(path)), options_(options) {}
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept =
    default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& path,
                                                    SentencePieceOptions options) {
  return SentencePieceTokenizer(parse_model(path), path, options);
}

std::vector<std::vector<int64_t>> SentencePieceTokenizer::encode_lines(
    const std::vector<std::string>& texts) const {
  std::string input;
  for (const auto& t : texts) input += one_line(t);
  const auto r = check_tool({"spm_encode", "--model=" + path_, "--output_format=id"}, input,
                            "SentencePiece encode with '" + path_ + "'");
  std::vector<std::vector<int64_t>> out;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<int64_t> ids;
    if (options_.add_bos && bos_id() >= 0) ids.push_back(bos_id());
    std::istringstream fields(line);
    int64_t id = 0;
    while (fields >> id) ids.push_back(id);
    if (options_.add_eos && eos_id() >= 0) ids.push_back(eos_id());
    out.push_back(std::move(ids));
  }
  if (out.size() != texts.size())
    throw Error("SentencePiece encode with '" + path_ + "': got " + std::to_string(out.size()) +
                " lines for " + std::to_string(texts.size()));
  return out;
}

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  return encode_lines({std::string(text)}).front();
}

std::vector<std::string> SentencePieceTokenizer::encode_pieces(std::string_view text) const {
  const auto r = check_tool({"spm_encode", "--model=" + path_, "--output_format=piece"},
                            one_line(text), "SentencePiece encode with '" + path_ + "'");
  std::vector<std::string> pieces;
  if (options_.add_bos && bos_id() >= 0) pieces.push_back(id_to_piece(bos_id()));
  // Pieces never contain a space: SentencePiece writes spaces as U+2581.
  std::istringstream fields(strip_newline(r.out));
  std::string piece;
  while (fields >> piece) pieces.push_back(piece);
  if (options_.add_eos && eos_id() >= 0) pieces.push_back(id_to_piece(eos_id()));
  return pieces;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  const int64_t size = vocab_size();
  std::string line;
  for (int64_t id : ids) {
    // spm_decode aborts on an out-of-range id: check first, with a clear message.
    if (id < 0 || id >= size)
      throw Error("SentencePiece decode with '" + path_ + "': id " + std::to_string(id) +
                  " is outside the vocabulary [0, " + std::to_string(size) + ")");
    line += std::to_string(id) + " ";
  }
  if (ids.empty()) return "";
  const auto r = check_tool({"spm_decode", "--model=" + path_, "--input_format=id"}, line + "\n",
                            "SentencePiece decode with '" + path_ + "'");
  return strip_newline(r.out);
}

std::string SentencePieceTokenizer::decode_pieces(const std::vector<std::string>& pieces) const {
  if (pieces.empty()) return "";
  const auto r = check_tool({"spm_decode", "--model=" + path_, "--input_format=piece"},
                            join(pieces, ' ') + "\n", "SentencePiece decode with '" + path_ + "'");
  return strip_newline(r.out);
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->pieces.size());
}
int64_t SentencePieceTokenizer::pad_id() const { return impl_->pad_id; }
int64_t SentencePieceTokenizer::unk_id() const { return impl_->unk_id; }
int64_t SentencePieceTokenizer::bos_id() const { return impl_->bos_id; }
int64_t SentencePieceTokenizer::eos_id() const { return impl_->eos_id; }

std::string SentencePieceTokenizer::id_to_piece(int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("SentencePiece model '" + path_ + "' has no id " + std::to_string(id) +
                " (vocabulary size " + std::to_string(vocab_size()) + ")");
  return impl_->pieces[static_cast<std::size_t>(id)];
}

int64_t SentencePieceTokenizer::piece_to_id(std::string_view piece) const {
  auto it = impl_->ids.find(std::string(piece));
  return it == impl_->ids.end() ? unk_id() : it->second;
}

void train_sentencepiece(const SentencePieceTrainOptions& options) {
  if (options.input.empty()) throw Error("SentencePiece training: no input file given");
  if (options.model_prefix.empty()) throw Error("SentencePiece training: no model_prefix given");
  for (const auto& file : options.input)
    if (!std::ifstream(file))
      throw Error("SentencePiece training: cannot open input '" + file +
                  "': " + std::strerror(errno));

  std::vector<std::pair<std::string, std::string>> flags = {
      {"input", join(options.input, ',')},
      {"model_prefix", options.model_prefix},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.model_type},
      {"unk_id", std::to_string(options.unk_id)},
      {"bos_id", std::to_string(options.bos_id)},
      {"eos_id", std::to_string(options.eos_id)},
      {"pad_id", std::to_string(options.pad_id)},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", options.shuffle_input_sentence ? "true" : "false"},
      {"num_threads", std::to_string(options.num_threads)},
  };
  {
    std::ostringstream coverage;  // the classic locale: always a '.' decimal point
    coverage.imbue(std::locale::classic());
    coverage << options.character_coverage;
    flags.emplace_back("character_coverage", coverage.str());
  }
  if (!options.user_defined_symbols.empty())
    flags.emplace_back("user_defined_symbols", join(options.user_defined_symbols, ','));
  if (options.quiet) flags.emplace_back("minloglevel", "1");
  for (const auto& extra : options.extra_flags) {
    const auto eq = extra.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("SentencePiece training: extra flag '" + extra + "' is not name=value");
    flags.emplace_back(extra.substr(0, eq), extra.substr(eq + 1));
  }

  // SentencePieceTrainer re-splits its flags on whitespace: a value with a
  // space would silently become two flags, so refuse it.
  std::vector<std::string> args = {"spm_train"};
  for (const auto& [name, value] : flags) {
    if (has_whitespace(value))
      throw Error("SentencePiece training: the value of --" + name + " ('" + value +
                  "') contains whitespace, which SentencePiece's flag parser cannot take");
    args.push_back("--" + name + "=" + value);
  }
  check_tool(args, "", "SentencePiece training of '" + options.model_prefix + "' failed");
}

int64_t write_tsv_columns(const std::vector<std::string>& tsv_files,
                          const std::vector<int>& columns, const std::string& output) {
  if (columns.empty()) throw Error("write_tsv_columns: no column given");
  for (int c : columns)
    if (c < 0) throw Error("write_tsv_columns: column " + std::to_string(c) + " is negative");
  std::ofstream out(output, std::ios::binary);
  if (!out) throw Error("cannot write '" + output + "': " + std::strerror(errno));
  int64_t written = 0;
  for (const auto& file : tsv_files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("cannot open TSV file '" + file + "': " + std::strerror(errno));
    std::string line;
    int64_t line_number = 0;
    std::vector<std::string_view> fields;
    while (std::getline(in, line)) {
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      fields.clear();
      std::string_view rest(line);
      for (;;) {
        const auto tab = rest.find('\t');
        fields.push_back(rest.substr(0, tab));
        if (tab == std::string_view::npos) break;
        rest.remove_prefix(tab + 1);
      }
      for (int c : columns) {
        if (static_cast<std::size_t>(c) >= fields.size())
          throw Error("TSV file '" + file + "' line " + std::to_string(line_number) + " has " +
                      std::to_string(fields.size()) + " column(s); column " + std::to_string(c) +
                      " was asked for");
        if (fields[c].empty()) continue;
        out << fields[c] << '\n';
        ++written;
      }
    }
  }
  out.flush();
  if (!out) throw Error("cannot write '" + output + "': " + std::strerror(errno));
  return written;
}

}  // namespace garden::data
