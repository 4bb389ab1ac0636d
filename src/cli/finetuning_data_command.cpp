#include "garden/cli/finetuning_data_command.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "garden/nlp/data/classifier_data.h"

namespace garden {

CLI::App* add_create_finetuning_data_command(CLI::App& app) {
  auto options = std::make_shared<nlp::FinetuningDataOptions>();
  auto& o = *options;
  auto* command = app.add_subcommand(
      "create_finetuning_data",
      "GLUE-style TSV files, tagging files or SQuAD JSON -> tf.Example TFRecords and their meta "
      "data, as Model Garden's create_finetuning_data.py");
  command
      ->add_option("--fine_tuning_task_type", o.fine_tuning_task_type,
                   "classification, regression, tagging or squad (retrieval: not implemented yet)")
      ->capture_default_str();
  command
      ->add_option("--classification_task_name", o.classification_task_name,
                   "The file layout: COLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE, WNLI or STS-B")
      ->capture_default_str();
  command
      ->add_option("--tagging_task_name", o.tagging_task_name,
                   "Tagging data: panx (named entities, BIO) or udpos in word<TAB>label files; "
                   "conll2003 (word POS chunk NER, IOB1 or IOB2, read as IOB2); conll (columns, "
                   "the tag last, any tag set)")
      ->capture_default_str();
  command->add_option("--label_list", o.label_list,
                      "tagging, conll: the labels, comma-separated (default: the training "
                      "file's, sorted, O first)");
  command->add_option("--input_data_dir", o.input_data_dir,
                      "Folder of train.tsv and dev.tsv (tagging: train-en.tsv, dev-en.tsv, "
                      "test-en.tsv; conll2003 and conll: train.txt, valid.txt, test.txt or "
                      "eng.train, eng.testa, eng.testb); not for squad");
  command->add_option("--squad_data_file", o.squad_data_file,
                      "squad: the SQuAD JSON file of the training questions");
  command->add_flag("--version_2_with_negative,!--noversion_2_with_negative",
                    o.version_2_with_negative,
                    "squad: SQuAD v2.0, with unanswerable questions (default false)");
  command
      ->add_option("--doc_stride", o.doc_stride,
                   "squad: pieces between the starts of two windows of a long paragraph")
      ->capture_default_str();
  command
      ->add_option("--max_query_length", o.max_query_length,
                   "squad: the question's pieces kept at most")
      ->capture_default_str();
  command->add_option("--train_data_output_path", o.train_data_output_path, "Training TFRecord")
      ->required();
  command->add_option("--eval_data_output_path", o.eval_data_output_path,
                      "Evaluation TFRecord (from dev.tsv; dev_matched.tsv for MNLI)");
  command->add_option("--test_data_output_path", o.test_data_output_path,
                      "tagging: test TFRecord (from the test file)");
  command->add_option("--meta_data_file_path", o.meta_data_file_path, "Meta data JSON")->required();
  command->add_option("--vocab_file", o.vocab_file, "WordPiece vocabulary (one token a line)");
  command->add_option("--sp_model_file", o.sp_model_file,
                      "SentencePiece model instead of --vocab_file; needs [CLS] and [SEP]");
  command->add_flag("--do_lower_case,!--nodo_lower_case", o.do_lower_case,
                    "Lower-case and strip accents (default true; --nodo_lower_case turns it off)");
  command->add_option("--max_seq_length", o.max_seq_length, "Tokens a record, padded")
      ->capture_default_str();
  command->callback([options] {
    const auto report = nlp::create_finetuning_data(*options);
    std::cout << "train records: " << report.train_examples << "\n";
    if (!options->eval_data_output_path.empty())
      std::cout << "eval records:  " << report.eval_examples << "\n";
    if (!options->test_data_output_path.empty())
      std::cout << "test records:  " << report.test_examples << "\n";
    std::cout << "meta data:     " << options->meta_data_file_path << "\n" << report.meta_data;
  });
  return command;
}

}  // namespace garden
