#include "garden/cli/spm_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/staged_directory.h"
#include "garden/data/sentencepiece.h"

namespace garden {

namespace cli {

void spm_encode_stream(const std::string& model, bool pieces, bool add_bos, bool add_eos,
                       std::istream& in, std::ostream& out) {
  data::SentencePieceOptions options;
  options.add_bos = add_bos;
  options.add_eos = add_eos;
  const auto tokenizer = data::SentencePieceTokenizer::load(model, options);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    bool first = true;
    if (pieces) {
      for (const auto& piece : tokenizer.encode_pieces(line)) {
        out << (first ? "" : " ") << piece;
        first = false;
      }
    } else {
      for (int64_t id : tokenizer.encode(line)) {
        out << (first ? "" : " ") << id;
        first = false;
      }
    }
    out << '\n';
  }
}

void spm_decode_stream(const std::string& model, std::istream& in, std::ostream& out) {
  const auto tokenizer = data::SentencePieceTokenizer::load(model);
  std::string line;
  int64_t line_number = 0;
  std::vector<int64_t> ids;
  while (std::getline(in, line)) {
    ++line_number;
    ids.clear();
    std::istringstream fields(line);
    std::string field;
    while (fields >> field) {
      std::size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(field, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != field.size())
        throw Error("spm decode: line " + std::to_string(line_number) + ": '" + field +
                    "' is not an id");
      ids.push_back(id);
    }
    out << tokenizer.decode(ids) << '\n';
  }
}

}  // namespace cli

namespace {

struct TrainFlags {
  data::SentencePieceTrainOptions options;
  std::vector<int> tsv_columns;
  // Read whole and split on commas here: CLI11 would read "[CLS],[SEP]" as
  // its own bracketed list syntax and strip the brackets off BERT's symbols.
  std::string user_defined_symbols;
};

// A fresh directory of this process's own under $TMPDIR (mkdtemp), removed
// with its content whatever happens: scratch files never sit beside, nor
// replace, a user's file.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "garden-spm-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      const int error = errno;
      throw Error("cannot create a temporary directory '" + pattern + "': " + std::strerror(error) +
                  " (set TMPDIR to a writable directory)");
    }
    path_ = pattern;
    unfinished_ = std::make_unique<UnfinishedPath>(path_);  // also when a stop signal ends us
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::unique_ptr<UnfinishedPath> unfinished_;
  std::filesystem::path path_;
};

void run_spm_train(const TrainFlags& flags) {
  auto options = flags.options;
  for (std::size_t start = 0; start < flags.user_defined_symbols.size();) {
    std::size_t end = flags.user_defined_symbols.find(',', start);
    if (end == std::string::npos) end = flags.user_defined_symbols.size();
    if (end > start)
      options.user_defined_symbols.push_back(flags.user_defined_symbols.substr(start, end - start));
    start = end + 1;
  }
  // Everything the user named is checked before anything is written.
  for (int c : flags.tsv_columns)
    if (c < 0) throw Error("--tsv_columns: column " + std::to_string(c) + " is negative");
  data::check_model_prefix(options.model_prefix, "--model_prefix");
  if (options.vocab_size < 1)
    throw Error("--vocab_size must be >= 1, got " + std::to_string(options.vocab_size));
  for (const auto& input : options.input) {
    check_input_file(input, "--input");
    refuse_same_file(input, "--input", options.model_prefix + ".model", "--model_prefix's model");
    refuse_same_file(input, "--input", options.model_prefix + ".vocab",
                     "--model_prefix's vocabulary");
  }
  std::unique_ptr<ScratchDirectory> scratch;
  if (!flags.tsv_columns.empty()) {
    // SentencePiece reads plain text: the chosen columns go to a file in a
    // temporary directory of our own, removed with it.
    scratch = std::make_unique<ScratchDirectory>();
    const std::string text = (scratch->path() / "train.txt").string();
    data::write_tsv_columns(options.input, flags.tsv_columns, text);
    options.recorded_input = options.input;
    options.input = {text};
  }
  // PREFIX.model and PREFIX.vocab are replaced on success only.
  data::train_sentencepiece(options);
  std::cout << "model: " << options.model_prefix << ".model\n"
            << "vocab: " << options.model_prefix << ".vocab\n";
}

}  // namespace

CLI::App* add_spm_command(CLI::App& app) {
  auto* spm = app.add_subcommand("spm", "Train and apply SentencePiece tokenizers");
  spm->require_subcommand(1);

  // The flags live as long as the callbacks that read them.
  auto train_flags = std::make_shared<TrainFlags>();
  auto& o = train_flags->options;
  auto* train = spm->add_subcommand("train", "Train a SentencePiece model on text files");
  train->add_option("--input", o.input, "Text file(s), one sentence a line (FILE[,FILE...])")
      ->required()
      ->delimiter(',');
  train->add_option("--model_prefix", o.model_prefix, "Writes PREFIX.model and PREFIX.vocab")
      ->required();
  train->add_option("--vocab_size", o.vocab_size, "Vocabulary size")->required();
  train->add_option("--model_type", o.model_type, "unigram, bpe, char or word")
      ->capture_default_str();
  train
      ->add_option("--character_coverage", o.character_coverage,
                   "Fraction of characters the vocabulary covers")
      ->capture_default_str();
  train->add_option("--user_defined_symbols", train_flags->user_defined_symbols,
                    "Symbols kept as single pieces (a,b,...), e.g. [CLS],[SEP],[MASK]");
  train
      ->add_option("--tsv_columns", train_flags->tsv_columns,
                   "Treat the inputs as TSV and train on these 0-based columns (0,1)")
      ->delimiter(',');
  train->add_option("--unk_id", o.unk_id, "-1 disables")->capture_default_str();
  train->add_option("--bos_id", o.bos_id, "-1 disables")->capture_default_str();
  train->add_option("--eos_id", o.eos_id, "-1 disables")->capture_default_str();
  train->add_option("--pad_id", o.pad_id, "-1 disables")->capture_default_str();
  train
      ->add_option("--input_sentence_size", o.input_sentence_size,
                   "Sample at most this many sentences (0: all)")
      ->capture_default_str();
  train->add_option("--shuffle_input_sentence", o.shuffle_input_sentence, "Shuffle before sampling")
      ->capture_default_str();
  train->add_option("--num_threads", o.num_threads, "Training threads")->capture_default_str();
  train->add_option("--extra", o.extra_flags,
                    "Another SentencePiece trainer flag as name=value (repeatable)");
  train->callback([train_flags] { run_spm_train(*train_flags); });

  struct EncodeFlags {
    std::string model;
    bool pieces = false, add_bos = false, add_eos = false;
  };
  auto encode_flags = std::make_shared<EncodeFlags>();
  auto* encode = spm->add_subcommand("encode", "stdin lines -> ids (or pieces) per line");
  encode->add_option("--model", encode_flags->model, "PREFIX.model")->required();
  encode->add_flag("--pieces", encode_flags->pieces, "Write pieces, not ids");
  encode->add_flag("--add_bos", encode_flags->add_bos, "Prepend BOS");
  encode->add_flag("--add_eos", encode_flags->add_eos, "Append EOS");
  encode->callback([encode_flags] {
    check_input_file(encode_flags->model, "--model");
    if (::isatty(STDIN_FILENO))
      std::cerr << "garden: reading lines from the terminal (Ctrl-D ends)\n";
    cli::spm_encode_stream(encode_flags->model, encode_flags->pieces, encode_flags->add_bos,
                           encode_flags->add_eos, std::cin, std::cout);
  });

  auto model = std::make_shared<std::string>();
  auto* decode = spm->add_subcommand("decode", "stdin lines of ids -> text per line");
  decode->add_option("--model", *model, "PREFIX.model")->required();
  decode->callback([model] {
    check_input_file(*model, "--model");
    if (::isatty(STDIN_FILENO))
      std::cerr << "garden: reading lines of ids from the terminal (Ctrl-D ends)\n";
    cli::spm_decode_stream(*model, std::cin, std::cout);
  });
  return spm;
}

}  // namespace garden
