// SentencePiece through Debian's libsentencepiece, reached through
// libgarden_sentencepiece (modules/sentencepiece): a module loaded with
// dlmopen into a link-map namespace of its own, because the library exports
// a bundled protobuf 3.14 that must not meet the system's 3.21 (see
// garden_spm.h). The model file is
// also read here directly (a small protobuf wire-format reader) for the
// vocabulary and the special ids, which need no call into the module.
#include "garden/data/sentencepiece.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden_spm.h"

namespace garden::data {

namespace fs = std::filesystem;

struct SentencePieceTokenizer::Impl {
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int64_t> ids;
  int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;  // TrainerSpec's defaults
  std::shared_ptr<void> processor;                          // in the module
};

namespace {

// The module's functions, resolved once per process.
struct SpmModule {
  decltype(&garden_spm_free) free;
  decltype(&garden_spm_train) train;
  decltype(&garden_spm_load) load;
  decltype(&garden_spm_unload) unload;
  decltype(&garden_spm_encode_ids) encode_ids;
  decltype(&garden_spm_encode_pieces) encode_pieces;
  decltype(&garden_spm_decode_ids) decode_ids;
  decltype(&garden_spm_decode_pieces) decode_pieces;
};

// Beside libgarden (build tree or install libdir), unless
// $GARDEN_SENTENCEPIECE_MODULE names it.
std::string module_path() {
  if (const char* env = std::getenv("GARDEN_SENTENCEPIECE_MODULE")) return env;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&module_path), &info) && info.dli_fname)
    return (fs::path(info.dli_fname).parent_path() / "libgarden_sentencepiece.so").string();
  return "libgarden_sentencepiece.so";
}

const SpmModule& spm_module() {
  static const SpmModule module = [] {
    const std::string path = module_path();
    void* handle = ::dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      throw Error("cannot load Garden's SentencePiece module '" + path + "': " + ::dlerror());
    const auto symbol = [&](const char* name) {
      void* address = ::dlsym(handle, name);
      if (!address)
        throw Error("SentencePiece module '" + path + "' lacks " + name + ": " + ::dlerror());
      return address;
    };
    SpmModule m;
    m.free = reinterpret_cast<decltype(m.free)>(symbol("garden_spm_free"));
    m.train = reinterpret_cast<decltype(m.train)>(symbol("garden_spm_train"));
    m.load = reinterpret_cast<decltype(m.load)>(symbol("garden_spm_load"));
    m.unload = reinterpret_cast<decltype(m.unload)>(symbol("garden_spm_unload"));
    m.encode_ids = reinterpret_cast<decltype(m.encode_ids)>(symbol("garden_spm_encode_ids"));
    m.encode_pieces =
        reinterpret_cast<decltype(m.encode_pieces)>(symbol("garden_spm_encode_pieces"));
    m.decode_ids = reinterpret_cast<decltype(m.decode_ids)>(symbol("garden_spm_decode_ids"));
    m.decode_pieces =
        reinterpret_cast<decltype(m.decode_pieces)>(symbol("garden_spm_decode_pieces"));
    return m;  // the handle stays open for the life of the process
  }();
  return module;
}

// Throws Error(what + the module's message) when rc says it failed. Call it
// after the module call has returned (not as one expression with it: the
// order in which arguments are evaluated is unspecified).
void check(int rc, char* error, const std::string& what) {
  if (rc == 0) return;
  const std::string message = error ? error : "unknown error";
  spm_module().free(error);
  throw Error(what + ": " + message);
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
  // Calls f(field, wire_type, value or length-delimited bytes, the field's
  // bytes from its key on) for each field, fixed-width ones included.
  template <typename F>
  void raw_fields(F&& f) {
    while (ok && p < end) {
      const char* begin = p;
      const uint64_t key = varint();
      const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
      uint64_t value = 0;
      std::string_view data;
      if (type == 0) {
        value = varint();
      } else if (type == 2) {
        const uint64_t n = varint();
        if (n > static_cast<uint64_t>(end - p)) {
          ok = false;
        } else {
          data = std::string_view(p, n);
          p += n;
        }
      } else if (type == 5 || type == 1) {
        const std::ptrdiff_t n = type == 5 ? 4 : 8;
        if (end - p < n) ok = false;
        if (ok) p += n;
      } else {
        ok = false;
      }
      if (!ok) return;
      f(field, type, value, data, std::string_view(begin, p - begin));
    }
  }
  // Calls f(field, wire_type, value or length-delimited bytes) for each
  // varint and length-delimited field.
  template <typename F>
  void fields(F&& f) {
    raw_fields([&](int field, int type, uint64_t value, std::string_view data, std::string_view) {
      if (type == 0 || type == 2) f(field, type, value, data);
    });
  }
};

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  out += static_cast<char>(v);
}

void put_bytes_field(std::string& out, int field, std::string_view bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// `model` (ModelProto bytes) with its trainer_spec's input (TrainerSpec
// field 1, repeated) and model_prefix (field 2) set to `input` and `prefix`,
// every other field as it was. Training reads scratch files and writes
// under a temporary prefix (the outputs are renamed into place), and
// SentencePiece records the names it was given: the model keeps the names
// the user gave, as spm_train's does, so two trainings of the same text
// write the same bytes.
std::string with_recorded_names(const std::string& model, const std::vector<std::string>& input,
                                const std::string& prefix, const std::string& what) {
  std::string out;
  out.reserve(model.size() + prefix.size());
  Wire outer{model.data(), model.data() + model.size()};
  bool inner_ok = true;
  outer.raw_fields([&](int field, int type, uint64_t, std::string_view data, std::string_view raw) {
    if (field != 2 || type != 2) {
      out.append(raw);
      return;
    }
    std::string spec;
    bool input_written = false;
    Wire inner{data.data(), data.data() + data.size()};
    inner.raw_fields([&](int f, int t, uint64_t, std::string_view, std::string_view inner_raw) {
      if (f == 1 && t == 2) {
        if (!input_written)
          for (const auto& name : input) put_bytes_field(spec, 1, name);
        input_written = true;
      } else if (f == 2 && t == 2) {
        put_bytes_field(spec, 2, prefix);
      } else {
        spec.append(inner_raw);
      }
    });
    inner_ok = inner_ok && inner.ok;
    put_bytes_field(out, 2, spec);
  });
  if (!outer.ok || !inner_ok) throw Error(what + " is not a SentencePiece model");
  return out;
}

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
  auto impl = parse_model(path);
  const auto& module = spm_module();
  char* error = nullptr;
  void* processor = module.load(path.c_str(), &error);
  if (!processor) check(1, error, "cannot load SentencePiece model '" + path + "'");
  impl->processor = std::shared_ptr<void>(processor, module.unload);
  return SentencePieceTokenizer(std::move(impl), path, options);
}

std::vector<std::vector<int64_t>> SentencePieceTokenizer::encode_lines(
    const std::vector<std::string>& texts) const {
  std::vector<std::vector<int64_t>> out;
  out.reserve(texts.size());
  for (const auto& text : texts) out.push_back(encode(text));
  return out;
}

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  int* raw = nullptr;
  std::size_t count = 0;
  char* error = nullptr;
  const int rc = spm_module().encode_ids(impl_->processor.get(), text.data(), text.size(), &raw,
                                         &count, &error);
  check(rc, error, "SentencePiece encode with '" + path_ + "'");
  std::vector<int64_t> ids;
  ids.reserve(count + 2);
  if (options_.add_bos && bos_id() >= 0) ids.push_back(bos_id());
  ids.insert(ids.end(), raw, raw + count);
  spm_module().free(raw);
  if (options_.add_eos && eos_id() >= 0) ids.push_back(eos_id());
  return ids;
}

std::vector<std::string> SentencePieceTokenizer::encode_pieces(std::string_view text) const {
  char* packed = nullptr;
  std::size_t count = 0;
  char* error = nullptr;
  const int rc = spm_module().encode_pieces(impl_->processor.get(), text.data(), text.size(),
                                            &packed, &count, &error);
  check(rc, error, "SentencePiece encode with '" + path_ + "'");
  std::vector<std::string> pieces;
  if (options_.add_bos && bos_id() >= 0) pieces.push_back(id_to_piece(bos_id()));
  const char* p = packed;
  for (std::size_t i = 0; i < count; ++i) {
    pieces.emplace_back(p);
    p += pieces.back().size() + 1;
  }
  spm_module().free(packed);
  if (options_.add_eos && eos_id() >= 0) pieces.push_back(id_to_piece(eos_id()));
  return pieces;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  const int64_t size = vocab_size();
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= size)
      throw Error("SentencePiece decode with '" + path_ + "': id " + std::to_string(id) +
                  " is outside the vocabulary [0, " + std::to_string(size) + ")");
    narrow.push_back(static_cast<int>(id));
  }
  char* text = nullptr;
  char* error = nullptr;
  const int rc =
      spm_module().decode_ids(impl_->processor.get(), narrow.data(), narrow.size(), &text, &error);
  check(rc, error, "SentencePiece decode with '" + path_ + "'");
  std::string out(text);
  spm_module().free(text);
  return out;
}

std::string SentencePieceTokenizer::decode_pieces(const std::vector<std::string>& pieces) const {
  std::vector<const char*> raw;
  raw.reserve(pieces.size());
  for (const auto& piece : pieces) raw.push_back(piece.c_str());
  char* text = nullptr;
  char* error = nullptr;
  const int rc =
      spm_module().decode_pieces(impl_->processor.get(), raw.data(), raw.size(), &text, &error);
  check(rc, error, "SentencePiece decode with '" + path_ + "'");
  std::string out(text);
  spm_module().free(text);
  return out;
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

namespace {}  // namespace

void check_model_prefix(const std::string& model_prefix, const std::string& what) {
  if (model_prefix.empty()) throw Error(what + " is empty: give a file prefix such as 'spm'");
  const fs::path prefix(model_prefix);
  const std::string name = prefix.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw Error(what + " '" + model_prefix + "' names a directory; give a file prefix such as '" +
                (prefix / "spm").string() + "'");
  const fs::path parent = prefix.parent_path().empty() ? fs::path(".") : prefix.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    throw Error(what + " '" + model_prefix + "': directory '" + parent.string() +
                "' does not exist");
}

void train_sentencepiece(const SentencePieceTrainOptions& options) {
  if (options.input.empty()) throw Error("SentencePiece training: no input file given");
  check_model_prefix(options.model_prefix, "SentencePiece training: model_prefix");
  const std::string model = options.model_prefix + ".model";
  const std::string vocab = options.model_prefix + ".vocab";
  for (const auto& file : options.input) {
    check_input_file(file, "SentencePiece training input");
    refuse_same_file(file, "SentencePiece training input", model, "model_prefix's model");
    refuse_same_file(file, "SentencePiece training input", vocab, "model_prefix's vocabulary");
  }
  // Trained under a temporary prefix beside the outputs, then renamed over
  // them: a failed training leaves existing PREFIX.model / PREFIX.vocab as
  // they were, and a reader never sees half a model.
  const std::string temporary = temporary_path_for(options.model_prefix);
  struct RemoveTemporaries {
    std::string prefix;
    ~RemoveTemporaries() {
      for (const char* ext : {".model", ".vocab"}) ::unlink((prefix + ext).c_str());
    }
  } remove_temporaries{temporary};

  std::vector<std::pair<std::string, std::string>> flags = {
      {"input", join(options.input, ',')},
      {"model_prefix", temporary},
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
  std::string args;
  for (const auto& [name, value] : flags) {
    if (has_whitespace(value))
      throw Error("SentencePiece training: the value of --" + name + " ('" + value +
                  "') contains whitespace, which SentencePiece's flag parser cannot take");
    args += (args.empty() ? "--" : " --") + name + "=" + value;
  }
  char* error = nullptr;
  const int rc = spm_module().train(args.c_str(), &error);
  check(rc, error, "SentencePiece training of '" + options.model_prefix + "' failed");
  const std::string trained = with_recorded_names(
      read_file(temporary + ".model", "the trained SentencePiece model"),
      options.recorded_input.empty() ? options.input : options.recorded_input, options.model_prefix,
      "the trained SentencePiece model '" + temporary + ".model'");
  // The vocabulary first: a loader looks for the model, so a model is never
  // beside a vocabulary older than itself.
  commit_file(temporary + ".vocab", vocab);
  write_file_atomically(model, trained);
}

int64_t write_tsv_columns(const std::vector<std::string>& tsv_files,
                          const std::vector<int>& columns, const std::string& output) {
  if (columns.empty()) throw Error("write_tsv_columns: no column given");
  for (int c : columns)
    if (c < 0) throw Error("write_tsv_columns: column " + std::to_string(c) + " is negative");
  // Every input is checked before the output exists, and the output is
  // never one of them: written whole (atomically) or not at all.
  for (const auto& file : tsv_files) {
    check_input_file(file, "TSV file");
    refuse_same_file(file, "TSV file", output, "the text output");
  }
  AtomicFile out(output);
  std::string buffer;
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
        buffer.append(fields[c]);
        buffer.push_back('\n');
        ++written;
      }
      if (buffer.size() >= (std::size_t{1} << 20)) {
        out.write(buffer);
        buffer.clear();
      }
    }
    if (in.bad()) throw Error("cannot read TSV file '" + file + "'");
  }
  out.write(buffer);
  out.commit();
  return written;
}

}  // namespace garden::data
