#include "garden/cli/pretraining_data_command.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "garden/base/error.h"
#include "garden/nlp/data/pretraining_data.h"

namespace garden {

namespace {

struct PretrainingDataFlags {
  nlp::PretrainingDataOptions options;
  std::string input_file;
};

void run(PretrainingDataFlags& flags) {
  auto& options = flags.options;
  options.input_files.clear();
  // Comma-separated, each a file or a glob pattern, as BERT's flag.
  std::size_t begin = 0;
  while (true) {
    const auto comma = flags.input_file.find(',', begin);
    options.input_files.push_back(flags.input_file.substr(begin, comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  for (const auto& file : options.input_files)
    if (file.empty()) throw Error("--input_file '" + flags.input_file + "' names an empty file");
  const auto report = nlp::create_pretraining_data(options);
  std::cout << "documents: " << report.documents << "\n"
            << "records:   " << report.instances << "\n";
  for (const auto& file : report.output_files) std::cout << "output:    " << file << "\n";
}

}  // namespace

CLI::App* add_create_pretraining_data_command(CLI::App& app) {
  auto flags = std::make_shared<PretrainingDataFlags>();
  auto& o = flags->options;
  auto* command = app.add_subcommand(
      "create_pretraining_data",
      "Text (a sentence a line, blank lines between documents) -> BERT/ELECTRA pretraining "
      "tf.Example TFRecords, as BERT's create_pretraining_data.py");
  command
      ->add_option("--input_file", flags->input_file,
                   "Text file(s): FILE[,FILE...], each may be a glob pattern")
      ->required();
  command
      ->add_option("--output_file", o.output_file,
                   "TFRecord file(s): FILE[,FILE...]; records are dealt round-robin")
      ->required();
  command->add_option("--vocab_file", o.vocab_file, "WordPiece vocabulary (one token a line)");
  command->add_option("--sp_model_file", o.sp_model_file,
                      "SentencePiece model instead of --vocab_file; needs the pieces [CLS], "
                      "[SEP], [MASK] (user_defined_symbols)");
  command->add_flag("--do_lower_case,!--nodo_lower_case", o.do_lower_case,
                    "Lower-case and strip accents, WordPiece only (default true; "
                    "--do_lower_case=false or --nodo_lower_case turns it off)");
  command->add_flag("--do_whole_word_mask,!--nodo_whole_word_mask", o.do_whole_word_mask,
                    "Mask all pieces of a word together (default false)");
  command->add_option("--max_seq_length", o.max_seq_length, "Tokens a record, padded")
      ->capture_default_str();
  command
      ->add_option("--max_predictions_per_seq", o.max_predictions_per_seq,
                   "Masked positions a record at most")
      ->capture_default_str();
  command->add_option("--random_seed", o.random_seed, "Seed of every random choice")
      ->capture_default_str();
  command
      ->add_option("--dupe_factor", o.dupe_factor,
                   "Passes over the documents (each with other pairs and masks)")
      ->capture_default_str();
  command->add_option("--masked_lm_prob", o.masked_lm_prob, "Fraction of tokens masked")
      ->capture_default_str();
  command
      ->add_option("--short_seq_prob", o.short_seq_prob, "Probability of a shorter target length")
      ->capture_default_str();
  command
      ->add_option("--num_threads", o.num_threads,
                   "Worker threads, 0: all cores (the output does not depend on it)")
      ->capture_default_str();
  command->callback([flags] { run(*flags); });
  return command;
}

}  // namespace garden
