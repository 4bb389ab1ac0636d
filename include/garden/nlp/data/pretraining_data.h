// BERT's create_pretraining_data (google-research/bert, also in Model
// Garden's official/nlp/data): documents of one sentence a line, a blank line
// between documents, into BERT pretraining tf.Examples (sentence pairs with
// random next sentences, 80/10/10 masking).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace garden::nlp {

struct PretrainingDataOptions {
  std::vector<std::string> input_files;  // files or glob patterns; each file starts a document
  std::string output_file;               // comma-separated: the records are spread over these files
  std::string vocab_file;                // a WordPiece vocabulary, or
  std::string sp_model_file;             // a SentencePiece model (exactly one of the two)
  bool do_lower_case = true;
  bool do_whole_word_mask = false;
  int64_t max_seq_length = 128;
  int64_t max_predictions_per_seq = 20;
  int64_t random_seed = 12345;
  int64_t dupe_factor = 10;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  int64_t num_threads = 0;  // 0: all cores; the output does not depend on it
};

struct PretrainingDataReport {
  int64_t documents = 0;
  int64_t instances = 0;  // records written
  std::vector<std::string> output_files;
};

// Writes the records atomically (no partial file survives an error) and
// shows progress on stderr. The same random_seed gives the same bytes
// whatever num_threads is: each (pass, document) draws from a generator of
// its own derived from the seed (see PretrainingRng), where BERT's script
// draws from one stream in document order; the records have BERT's
// distribution but are not BERT's bytes. Throws garden::Error naming the
// file and line of bad input (an empty input, invalid UTF-8) or a bad option.
PretrainingDataReport create_pretraining_data(const PretrainingDataOptions& options);

}  // namespace garden::nlp
