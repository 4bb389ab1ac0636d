#include "garden/cli/bleu_command.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/nlp/metrics/bleu.h"

namespace garden {

namespace {

struct BleuFlags {
  std::string hypothesis;
  std::vector<std::string> references;
  std::string tokenize = "13a";
  bool lowercase = false;
};

// One segment per line. A final newline ends the last line rather than starting an
// empty one, as when Python iterates a file; "\r" is left to BLEU's rstrip.
// `flag` names the file in errors ("--reference 'x' is a directory, not a file").
std::vector<std::string> read_lines(const std::string& path, const std::string& flag) {
  const std::string text = read_file(path, flag);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    // Python (sacrebleu) fails to decode such a file: say where.
    if (const std::string bad = unicode::utf8_error(lines.back()); !bad.empty())
      throw Error(flag + " '" + path + "', line " + std::to_string(lines.size()) + ": " + bad);
    start = end + 1;
  }
  return lines;
}

void run_bleu(const BleuFlags& flags) {
  // Every file checked before any is read.
  check_input_file(flags.hypothesis, "--hypothesis");
  for (const auto& path : flags.references) check_input_file(path, "--reference");
  const auto hypotheses = read_lines(flags.hypothesis, "--hypothesis");
  std::vector<std::vector<std::string>> references;
  for (const auto& path : flags.references) {
    references.push_back(read_lines(path, "--reference"));
    if (references.back().size() != hypotheses.size())
      throw Error("hypothesis '" + flags.hypothesis + "' has " + std::to_string(hypotheses.size()) +
                  " lines but reference '" + path + "' has " +
                  std::to_string(references.back().size()));
  }
  nlp::BleuOptions options;
  options.tokenize = nlp::parse_bleu_tokenizer(flags.tokenize);
  options.lowercase = flags.lowercase;
  std::cout << nlp::corpus_bleu(hypotheses, references, options).format() << "\n";
  std::cout.flush();
}

}  // namespace

CLI::App* add_bleu_command(CLI::App& app) {
  auto flags = std::make_shared<BleuFlags>();
  auto* bleu = app.add_subcommand(
      "bleu", "sacreBLEU-compatible corpus BLEU of a hypothesis file against reference files");
  bleu->add_option("--hypothesis", flags->hypothesis, "System output, one sentence per line")
      ->required();
  bleu->add_option("--reference", flags->references,
                   "Reference translations, one sentence per line (repeatable)")
      ->required();
  bleu->add_option("--tokenize", flags->tokenize, "Tokenizer: 13a, intl or none")
      ->check(CLI::IsMember({"13a", "intl", "none"}))
      ->capture_default_str();
  bleu->add_flag("--lowercase", flags->lowercase, "Lowercase before tokenizing (uncased BLEU)");
  bleu->callback([flags] { run_bleu(*flags); });
  return bleu;
}

}  // namespace garden
