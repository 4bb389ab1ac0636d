// SQuAD data as Model Garden's question answering reads it
// (official/nlp/data/squad_lib.py): the JSON's questions over paragraphs,
// paragraphs split into whitespace words, words into sub-words, documents
// longer than the sequence cut into windows `doc_stride` apart, each window
// [CLS] question [SEP] window [SEP]; and back: the start and end logits of
// every window merged into one answer per question (n-best spans, the
// window where a token has most context, v2.0's no-answer score).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "garden/base/dataset.h"
#include "garden/config/definitions.h"
#include "garden/nlp/data/classifier_data.h"

namespace garden::nlp {

struct SquadExample {
  std::string qas_id;
  std::string question_text;
  std::vector<std::string> doc_tokens;  // the paragraph split on whitespace
  // Each word's first character in the paragraph (Unicode characters, as
  // answer_start counts them).
  std::vector<int64_t> doc_token_offsets;
  // The first answer (training reads exactly one): its text and the words it
  // starts and ends in; -1 when unanswerable or not found in the words.
  std::string orig_answer_text;
  int64_t start_position = -1, end_position = -1;
  bool is_impossible = false;
  std::vector<std::string> answers;  // every ground truth, for scoring
  std::string where;                 // FILE: data[i].paragraphs[j].qas[k]
};

struct SquadReadReport {
  std::vector<SquadExample> examples;
  // Training questions whose answer text is not at its answer_start (Model
  // Garden logs and skips them).
  int64_t skipped = 0;
};

// The questions of a SQuAD JSON file. `is_training`: each answerable
// question must have exactly one answer, found where answer_start says, or
// it is skipped; otherwise every answer is kept for scoring. A file that is
// not JSON names its line and column; a missing or mistyped field names
// the file and its path in the JSON (data[i].paragraphs[j].qas[k].answers).
SquadReadReport read_squad_examples(const std::string& path, bool is_training,
                                    bool version_2_with_negative);

// A question over raw text (what a served instance asks), its context split
// into words as read_squad_examples splits a paragraph; no answer.
SquadExample squad_question(std::string qas_id, std::string question, const std::string& context);

struct SquadConversionOptions {
  int64_t max_seq_length = 384;
  int64_t doc_stride = 128;
  int64_t max_query_length = 64;
  bool is_training = false;
};

// One window of one question (Model Garden's InputFeatures).
struct SquadFeature {
  int64_t unique_id = 0;  // from 1000000000, in order
  int64_t example_index = 0, doc_span_index = 0;
  std::vector<int64_t> tokens;                              // unpadded: [CLS] q [SEP] window [SEP]
  std::map<int64_t, int64_t> token_to_orig_map;             // position -> doc word
  std::map<int64_t, bool> token_is_max_context;             // position -> this window is its best
  std::vector<int64_t> input_ids, input_mask, segment_ids;  // max_seq_length
  // The answer's first and last token in this window; 0 and 0 ([CLS]) when
  // unanswerable or outside the window, or when unknown (no answer read).
  int64_t start_position = 0, end_position = 0;
  bool is_impossible = false;
};

// Model Garden's convert_examples_to_features: the question's pieces cut to
// max_query_length; each word tokenized alone; windows of at most
// max_seq_length - query - 3 pieces, each starting doc_stride after the
// last (or where the last ended); the answer narrowed to the pieces of its
// text (_improve_answer_span).
std::vector<SquadFeature> convert_squad_examples(const FinetuningTokenizer& tokenizer,
                                                 const std::vector<SquadExample>& examples,
                                                 const SquadConversionOptions& options);

// Model Garden's get_final_text: the span of `orig_text` (a run of doc
// words) that the tokenized prediction `pred_text` came from, found by
// aligning BERT's basic tokenization of orig_text with it; orig_text itself
// when they cannot be aligned.
std::string squad_final_text(const std::string& pred_text, const std::string& orig_text,
                             bool do_lower_case);

struct SquadRawResult {
  int64_t unique_id = 0;
  std::vector<float> start_logits, end_logits;
};

struct SquadPostprocessOptions {
  int64_t n_best_size = 20;
  int64_t max_answer_length = 30;
  bool do_lower_case = true;
  bool version_2_with_negative = false;
  double null_score_diff_threshold = 0.0;
};

struct SquadNbestEntry {
  std::string text;
  double start_logit = 0, end_logit = 0, probability = 0;
  // Where `text` lies in the paragraph: characters [start_char, end_char),
  // whitespace between its words as the paragraph has it; -1 for an entry
  // that is no span (v2.0's "", or "empty" when no span qualified).
  int64_t start_char = -1, end_char = -1;
};

struct SquadPredictions {
  std::map<std::string, std::string> answers;  // question id -> answer text
  std::map<std::string, std::vector<SquadNbestEntry>> nbest;
  // v2.0: the no-answer score minus the best span's (Model Garden's
  // scores_diff); the answer is empty when it exceeds the threshold.
  std::map<std::string, double> scores_diff;
};

// Model Garden's postprocess_output: for each question, the n_best_size
// highest start and end logits of each of its windows paired into spans
// (inside the window's text, start <= end, at most max_answer_length
// tokens, the start being the window where that token has most context),
// ranked by start + end logit; the best span's text mapped back to the
// paragraph (WordPiece: squad_final_text; SentencePiece: the paragraph's
// words it covers). A window without a result is skipped.
SquadPredictions postprocess_squad(const FinetuningTokenizer& tokenizer,
                                   const std::vector<SquadExample>& examples,
                                   const std::vector<SquadFeature>& features,
                                   const std::vector<SquadRawResult>& results,
                                   const SquadPostprocessOptions& options);

// create_finetuning_data --fine_tuning_task_type=squad: the questions of
// `squad_data_file` into training records (unique_ids, input_ids,
// input_mask, segment_ids, start_positions, end_positions, is_impossible)
// and the meta data (task_type bert_squad, train_data_size,
// max_seq_length, max_query_length, doc_stride, version_2_with_negative).
// --eval_data_output_path is refused: the evaluation reads the JSON.
FinetuningDataReport create_squad_data(const FinetuningDataOptions& options);

// Writes `features` as records (with start_positions and end_positions, so
// that an evaluation also reports its loss); returns how many.
int64_t write_squad_records(const std::vector<SquadFeature>& features, bool is_training,
                            const std::string& path);

// Model Garden's QADataConfig (data/question_answering_dataloader.py).
// Training reads the records create_finetuning_data wrote; evaluation reads
// the SQuAD JSON itself (input_path) and converts it with vocab_file.
struct QADataConfig : config::DataConfig {
  QADataConfig() {
    global_batch_size = 48;
    is_training = true;
  }
  int64_t seq_length = 384;
  bool version_2_with_negative = false;
  // Evaluation: where the converted records go (empty: a temporary folder
  // removed with the task).
  std::string input_preprocessed_data_path;
  int64_t doc_stride = 128;
  int64_t query_length = 64;
  std::string vocab_file;
  std::string tokenization = "WordPiece";
  bool do_lower_case = true;
  void visit(config::Visitor& v) override;
  void validate() const override;
  // Training data (is_training): the records' windows were made by
  // create_finetuning_data's flags, so doc_stride, query_length and
  // input_preprocessed_data_path do nothing; set, they are named.
  std::vector<config::IgnoredKey> ignored_keys() const override;
};

// Batches of input_word_ids, input_mask, input_type_ids [B, seq_length],
// start_positions, end_positions, unique_ids [B] (int64) from the records
// of `params.input_path` (a comma-separated list or pattern). Bad records
// are one garden::Error naming the file, the record and the feature.
DatasetPtr build_squad_inputs(const QADataConfig& params, const InputContext& input_context = {},
                              int64_t vocab_size = 0);

}  // namespace garden::nlp
