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

#include "garden/data/tokenizer.h"

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
// export's asset once prepare_serving gave it. Opened on first use.
class TaskTextTokenizer {
 public:
  TaskTextTokenizer(std::string vocab_file, std::string tokenization, bool lower_case);
  bool configured() const { return !vocab_file_.empty(); }
  // The file export copies: {"vocab.txt" or "sp.model": vocab_file}, or
  // none when no vocab_file is set.
  std::map<std::string, std::string> assets() const;
  // The export's copy, opened at once (so that serving threads only read
  // it); throws garden::Error when the export lacks it.
  void use_assets(const std::map<std::string, std::string>& assets);
  const FinetuningTokenizer& get();

 private:
  std::string vocab_file_, tokenization_;
  bool lower_case_;
  std::string asset_path_;
  std::shared_ptr<const FinetuningTokenizer> tokenizer_;
};

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
  std::string tagging_task_name = "panx";  // panx, udpos
  std::string input_data_dir;
  std::string train_data_output_path;
  std::string eval_data_output_path;
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
  int64_t train_examples = 0, eval_examples = 0;
  std::string meta_data;  // the JSON written to meta_data_file_path
};

// The flags every task type needs checked (input_data_dir, the outputs,
// exactly one of vocab_file and sp_model_file, max_seq_length), then the
// tokenizer they name.
std::shared_ptr<const FinetuningTokenizer> open_finetuning_tokenizer(
    const FinetuningDataOptions& options);

// Reads the task's train and dev files from input_data_dir and writes the
// records (input_ids, input_mask, segment_ids [max_seq_length] int64;
// label_ids, int64 or float for regression; is_real_example 1) and Model
// Garden's meta data JSON (task_type, processor_type, num_labels, labels,
// train_data_size, eval_data_size, max_seq_length, label_type). Each file is
// written atomically. Throws garden::Error naming the flag, file, line or
// column of what is wrong.
FinetuningDataReport create_finetuning_data(const FinetuningDataOptions& options);

}  // namespace garden::nlp
