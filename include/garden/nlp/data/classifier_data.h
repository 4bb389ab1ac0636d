// Fine-tuning data for sentence prediction, as Model Garden's
// create_finetuning_data.py makes it (official/nlp/data/
// classifier_data_lib.py): GLUE's TSV layouts read into examples, each
// tokenized as [CLS] a [SEP] (b [SEP]) and padded to max_seq_length, then
// written as tf.Examples with Model Garden's feature names.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "garden/base/file_io.h"
#include "garden/nlp/data/finetuning_tokenizer.h"

namespace garden::nlp {

// One example of a GLUE-style file; `where` is "FILE:LINE" for messages.
struct ClassifierExample {
  std::string text_a;
  std::optional<std::string> text_b;
  std::string label;  // as written (a class name, or a number for regression)
  std::string where;
};

// A GLUE task's file layout (a DataProcessor of classifier_data_lib): the
// columns of text_a, text_b (-1: none) and the label (negative: counted from
// the line's end), whether the first line is a header, the label set (empty
// for regression: the label is a number).
struct ClassifierProcessor {
  std::string name;  // COLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE, WNLI, STS-B
  std::vector<std::string> labels;
  std::string train_file = "train.tsv";
  std::string dev_file = "dev.tsv";
  bool header = true;
  int text_a = 0, text_b = -1, label = 1;
  // QQP: lines with too few columns are skipped, as Model Garden's
  // processor skips them; elsewhere they are an error.
  bool skip_short_lines = false;
  bool regression() const { return labels.empty(); }
};

// The processor of a --classification_task_name (case-insensitive); throws
// garden::Error naming the known ones.
const ClassifierProcessor& classifier_processor(const std::string& task_name);
std::vector<std::string> classifier_task_names();

// Every example of `path` in `processor`'s layout. A line with too few
// columns, a label outside the label set or a regression label that is not a
// number throws garden::Error naming the file, the line and the column.
std::vector<ClassifierExample> read_classifier_examples(const ClassifierProcessor& processor,
                                                        const std::string& path);

// The model inputs of one example, each max_seq_length long (Model Garden's
// InputFeatures; `segment_ids` is what the model calls input_type_ids).
struct ClassifierFeatures {
  std::vector<int64_t> input_ids, input_mask, segment_ids;
};

// Model Garden's convert_single_example: [CLS] a [SEP] with types 0, then
// b [SEP] with types 1; a pair longer than max_seq_length - 3 loses tokens
// from the end of the longer side, one at a time; a single text is cut to
// max_seq_length - 2. Zero padding.
ClassifierFeatures encode_classifier_input(const FinetuningTokenizer& tokenizer,
                                           std::string_view text_a,
                                           const std::optional<std::string>& text_b,
                                           int64_t max_seq_length);

// garden create_finetuning_data's flags (Model Garden's names).
struct FinetuningDataOptions {
  // classification, regression, tagging, squad
  std::string fine_tuning_task_type = "classification";
  std::string classification_task_name = "MNLI";
  std::string tagging_task_name = "panx";  // panx, udpos, conll2003, conll
  // tagging, conll: the labels, comma-separated, instead of those of the
  // training file.
  std::string label_list;
  std::string input_data_dir;
  std::string train_data_output_path;
  std::string eval_data_output_path;
  // tagging: records of the test file too.
  std::string test_data_output_path;
  std::string meta_data_file_path;
  std::string vocab_file;
  std::string sp_model_file;
  bool do_lower_case = true;
  int64_t max_seq_length = 128;
  // squad: the SQuAD JSON (instead of input_data_dir), its version and the
  // windows' stride and question length.
  std::string squad_data_file;
  bool version_2_with_negative = false;
  int64_t doc_stride = 128;
  int64_t max_query_length = 64;
};

struct FinetuningDataReport {
  int64_t train_examples = 0, eval_examples = 0, test_examples = 0;
  std::string meta_data;  // the JSON written to meta_data_file_path
};

// The flags every task type needs checked (input_data_dir, the outputs,
// exactly one of vocab_file and sp_model_file, max_seq_length; no output
// naming one of `data_files`, the vocabulary or another output), then the
// tokenizer they name.
std::shared_ptr<const FinetuningTokenizer> open_finetuning_tokenizer(
    const FinetuningDataOptions& options, const std::vector<NamedPath>& data_files);

// Reads the task's train and dev files from input_data_dir and writes the
// records (input_ids, input_mask, segment_ids [max_seq_length] int64;
// label_ids, int64 or float for regression; is_real_example 1) and Model
// Garden's meta data JSON (task_type, processor_type, num_labels, labels,
// train_data_size, eval_data_size, max_seq_length, label_type). Each file is
// written atomically. Throws garden::Error naming the flag, file, line or
// column of what is wrong.
FinetuningDataReport create_finetuning_data(const FinetuningDataOptions& options);

}  // namespace garden::nlp
