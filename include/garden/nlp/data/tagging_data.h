// Fine-tuning data for tagging, as Model Garden's create_finetuning_data.py
// makes it (official/nlp/data/tagging_data_lib.py): files of one
// `word<TAB>label` a line, a blank line between sentences, tokenized into
// sub-words whose first piece carries the word's label (the others -1), cut
// into sub-sentences that fit, and written as tf.Examples.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/dataset.h"
#include "garden/config/definitions.h"
#include "garden/nlp/data/classifier_data.h"

namespace garden::nlp {

// The label id of sub-words after a word's first, and of padding: no loss,
// no metric (Model Garden's _PADDING_LABEL_ID).
constexpr int64_t kPaddingLabelId = -1;

struct TaggingExample {
  std::vector<std::string> words;
  std::vector<int64_t> label_ids;
  int64_t sentence_id = 0;
  std::string where;  // FILE:LINE of its first word
};

// The fixed label lists: Model Garden's panx (PAN-X named entities, BIO)
// and udpos (Universal Dependencies part-of-speech tags), and conll2003
// (Hugging Face's order, conll_data.h); throws naming the known names (conll:
// any tag set, so no fixed list).
const std::vector<std::string>& tagging_labels(const std::string& tagging_task_name);

// The sentences of `path`. A line that is not `word<TAB>label`, or whose
// label is not in `labels`, throws garden::Error naming the file, the line
// and (for the label) the column.
std::vector<TaggingExample> read_tagging_examples(const std::string& path,
                                                  const std::vector<std::string>& labels);

// One record: input_ids, input_mask, segment_ids, label_ids (max_seq_length),
// and the sentence it came from.
struct TaggingFeatures {
  std::vector<int64_t> input_ids, input_mask, segment_ids, label_ids;
  int64_t sentence_id = 0, sub_sentence_id = 0;
};

// Model Garden's _tokenize_example then convert_single_example: each word's
// pieces (unknown or empty: the tokenizer's [UNK]) added in order, a new
// sub-sentence started when the next word's pieces would not fit in
// max_seq_length - 2; each sub-sentence as [CLS] pieces [SEP], labels -1 on
// [CLS], [SEP], continuation pieces and padding.
std::vector<TaggingFeatures> encode_tagging_example(const FinetuningTokenizer& tokenizer,
                                                    const TaggingExample& example,
                                                    int64_t max_seq_length);

// create_finetuning_data --fine_tuning_task_type=tagging: the training,
// dev and test files of input_data_dir into the records and the meta data
// (task_type bert_tagging, label_list, sizes). panx and udpos read
// train-en.tsv, dev-en.tsv, test-en.tsv (Model Garden's file names);
// conll2003 and conll CoNLL's column files (conll_data.h).
FinetuningDataReport create_tagging_data(const FinetuningDataOptions& options,
                                         const std::string& tagging_task_name);

// The meta data create_finetuning_data wrote beside tagging records.
struct TaggingMetaData {
  std::string path;
  std::vector<std::string> label_list;
  // More tagging meta data in the same folder whose label_list differs.
  std::vector<TaggingMetaData> others;
};

// Meta data files are small: larger files are not read when looking for one.
constexpr std::uintmax_t kMaxMetaDataBytes = 1 << 20;

// The meta data create_finetuning_data wrote in the folder of
// `input_path`'s first file (a comma-separated list or a pattern in the file
// name): each file there, by name, of at most kMaxMetaDataBytes that is a
// JSON object with this `task_type` (bert_tagging, bert_squad), with its
// path; none when the folder is a pattern or not a directory.
std::vector<std::pair<std::string, nlohmann::json>> meta_data_beside(const std::string& input_path,
                                                                     const std::string& task_type);

// The tagging meta data in the folder of `input_path`'s first file (a
// comma-separated list or a pattern in the file name): the first file, by
// name, of at most kMaxMetaDataBytes that is a JSON object with task_type
// bert_tagging and a label_list of strings; nullopt when there is none (or
// the folder is a pattern).
std::optional<TaggingMetaData> find_tagging_meta_data(const std::string& input_path);

// Model Garden's TaggingDataConfig (data/tagging_dataloader.py).
struct TaggingDataConfig : config::DataConfig {
  TaggingDataConfig() {
    global_batch_size = 32;
    is_training = true;
  }
  int64_t seq_length = 128;
  bool include_sentence_id = false;  // refused when true: nothing reads it yet
  // Garden: the tokenizer the records were made with, for serving raw text
  // (as SentencePredictionDataConfig's).
  std::string vocab_file;
  std::string tokenization = "WordPiece";
  bool lower_case = true;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

// Batches of input_word_ids, input_mask, input_type_ids, label_ids
// [B, seq_length] int64. Bad records are one garden::Error naming the file,
// the record and the feature.
// `class_names` (when not empty): the model's classes; a label id outside
// them (other than kPaddingLabelId) is an error naming the record.
DatasetPtr build_tagging_inputs(const TaggingDataConfig& params,
                                const InputContext& input_context = {}, int64_t vocab_size = 0,
                                std::vector<std::string> class_names = {});

}  // namespace garden::nlp
