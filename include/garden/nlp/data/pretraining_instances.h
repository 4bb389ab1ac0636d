// The sentence-pair and masking logic of BERT's create_pretraining_data
// (create_instances_from_document, truncate_seq_pair,
// create_masked_lm_predictions) on token ids, without files or threads:
// create_pretraining_data (garden/nlp/data/pretraining_data.h) runs it per
// document on worker threads.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace garden::nlp {

// The random source of one unit of work. BERT draws everything from one
// Python random.Random in document order, so its output depends on the order
// of the work; here each (pass, document) gets a generator of its own derived
// from the seed, so worker threads can take documents in any order and the
// output is the same. The operations are Python's (random(), randint(a, b)
// inclusive, shuffle), each written here so that no standard library's
// distribution (which differ between libstdc++ and libc++) decides a value.
class PretrainingRng {
 public:
  explicit PretrainingRng(uint64_t seed) : engine_(seed) {}
  // The generator of stream `stream` and unit `index` (e.g. pass and
  // document) under `seed`: SplitMix64 mixing, so nearby inputs give
  // unrelated generators.
  static PretrainingRng derive(int64_t seed, uint64_t stream, uint64_t index);

  double random();                             // uniform in [0, 1), 53 bits
  int64_t randint(int64_t low, int64_t high);  // uniform in [low, high], unbiased
  template <class T>
  void shuffle(std::vector<T>& values) {  // Fisher-Yates, as random.shuffle
    for (std::size_t i = values.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(randint(0, static_cast<int64_t>(i) - 1));
      std::swap(values[i - 1], values[j]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

using Sentence = std::vector<int32_t>;  // token ids of one line
using Document = std::vector<Sentence>;

// What the algorithm needs to know of the vocabulary.
struct InstanceVocabulary {
  int32_t cls_id = -1;
  int32_t sep_id = -1;
  int32_t mask_id = -1;
  int64_t size = 0;  // random replacements are drawn from [0, size), as BERT's vocab_words
  // Per id: the piece continues the word of the piece before it (WordPiece
  // "##x"; SentencePiece pieces without the leading "▁"). Used only for
  // whole-word masking.
  std::vector<bool> continues_word;
};

struct InstanceOptions {
  int64_t max_seq_length = 128;
  int64_t max_predictions_per_seq = 20;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  bool do_whole_word_mask = false;
};

// One record: [CLS] A [SEP] B [SEP], some of it masked.
struct TrainingInstance {
  std::vector<int32_t> tokens;               // after masking
  int64_t segment_a_length = 0;              // [CLS] A [SEP]: segment id 0; the rest 1
  std::vector<int64_t> masked_lm_positions;  // increasing
  std::vector<int32_t> masked_lm_ids;        // the original tokens there
  bool is_random_next = false;
};

// BERT's truncate_seq_pair: drops a token from the front or the back (a coin
// flip) of the longer of the two until they fit in max_num_tokens together.
void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, int64_t max_num_tokens,
                       PretrainingRng& rng);

// BERT's create_masked_lm_predictions on instance.tokens: candidates are all
// tokens but [CLS] and [SEP] (with whole-word masking, a word's pieces form
// one candidate), shuffled; min(max_predictions_per_seq, max(1,
// round(len(tokens) * masked_lm_prob))) of them are taken (a whole word that
// would pass that number is skipped); each is [MASK] 80%, kept 10%, a random
// vocabulary id 10%. Fills masked_lm_positions / masked_lm_ids.
void create_masked_lm_predictions(TrainingInstance& instance, const InstanceOptions& options,
                                  const InstanceVocabulary& vocabulary, PretrainingRng& rng);

// BERT's create_instances_from_document for documents[document_index]: fills
// a target length (max_seq_length - 3, or with short_seq_prob a random one
// from 2), splits the chunk at a random sentence, takes B from a random other
// document half the time (then the unused sentences are put back), truncates
// and masks. `documents` must hold no empty document nor empty sentence.
std::vector<TrainingInstance> create_instances_from_document(const std::vector<Document>& documents,
                                                             std::size_t document_index,
                                                             const InstanceOptions& options,
                                                             const InstanceVocabulary& vocabulary,
                                                             PretrainingRng& rng);

// The tf.Example BERT writes for an instance (input_ids, input_mask,
// segment_ids padded with 0 to max_seq_length; masked_lm_positions,
// masked_lm_ids padded with 0 and masked_lm_weights 1.0 / 0.0 to
// max_predictions_per_seq; next_sentence_labels 1 for a random next),
// serialized.
std::string serialize_instance(const TrainingInstance& instance, int64_t max_seq_length,
                               int64_t max_predictions_per_seq);

}  // namespace garden::nlp
