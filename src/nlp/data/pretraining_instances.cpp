#include "garden/nlp/data/pretraining_instances.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "garden/base/error.h"
#include "garden/data/example.h"

namespace garden::nlp {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

PretrainingRng PretrainingRng::derive(int64_t seed, uint64_t stream, uint64_t index) {
  uint64_t state = splitmix64(static_cast<uint64_t>(seed));
  state = splitmix64(state ^ stream);
  state = splitmix64(state ^ index);
  return PretrainingRng(state);
}

double PretrainingRng::random() {
  return static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

int64_t PretrainingRng::randint(int64_t low, int64_t high) {
  if (high < low)
    throw Error("randint(" + std::to_string(low) + ", " + std::to_string(high) + "): empty range");
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low) + 1;
  if (range == 0) return static_cast<int64_t>(engine_());  // the whole int64 range
  // Rejection of the top partial block keeps every value equally likely.
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % range;
  uint64_t draw = engine_();
  while (draw >= limit) draw = engine_();
  return static_cast<int64_t>(static_cast<uint64_t>(low) + draw % range);
}

void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, int64_t max_num_tokens,
                       PretrainingRng& rng) {
  while (static_cast<int64_t>(a.size() + b.size()) > max_num_tokens) {
    auto& longer = a.size() > b.size() ? a : b;
    // From the front or the back, so that neither end is always the one cut.
    if (rng.random() < 0.5)
      longer.erase(longer.begin());
    else
      longer.pop_back();
  }
}

void create_masked_lm_predictions(TrainingInstance& instance, const InstanceOptions& options,
                                  const InstanceVocabulary& vocabulary, PretrainingRng& rng) {
  auto& tokens = instance.tokens;
  std::vector<std::vector<int64_t>> candidates;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int32_t token = tokens[i];
    if (token == vocabulary.cls_id || token == vocabulary.sep_id) continue;
    const bool continues = options.do_whole_word_mask && !candidates.empty() && token >= 0 &&
                           static_cast<std::size_t>(token) < vocabulary.continues_word.size() &&
                           vocabulary.continues_word[static_cast<std::size_t>(token)];
    if (continues)
      candidates.back().push_back(static_cast<int64_t>(i));
    else
      candidates.push_back({static_cast<int64_t>(i)});
  }
  rng.shuffle(candidates);

  // Python's round(): halves to even, which nearbyint does in the default
  // rounding mode.
  const auto rounded = static_cast<int64_t>(
      std::nearbyint(static_cast<double>(tokens.size()) * options.masked_lm_prob));
  const int64_t num_to_predict =
      std::min(options.max_predictions_per_seq, std::max<int64_t>(1, rounded));

  const std::vector<int32_t> original = tokens;
  std::vector<bool> covered(tokens.size(), false);
  std::vector<int64_t> positions;
  for (const auto& word : candidates) {
    const auto predicted = static_cast<int64_t>(positions.size());
    if (predicted >= num_to_predict) break;
    // A whole word that would pass the number is skipped, as BERT does.
    if (predicted + static_cast<int64_t>(word.size()) > num_to_predict) continue;
    bool any_covered = false;
    for (int64_t index : word)
      any_covered = any_covered || covered[static_cast<std::size_t>(index)];
    if (any_covered) continue;
    for (int64_t index : word) {
      const auto at = static_cast<std::size_t>(index);
      covered[at] = true;
      if (rng.random() < 0.8) {
        tokens[at] = vocabulary.mask_id;
      } else if (rng.random() >= 0.5) {  // else (< 0.5): the token stays itself
        tokens[at] = static_cast<int32_t>(rng.randint(0, vocabulary.size - 1));
      }
      positions.push_back(index);
    }
  }
  std::sort(positions.begin(), positions.end());
  instance.masked_lm_positions = positions;
  instance.masked_lm_ids.clear();
  for (int64_t index : positions)
    instance.masked_lm_ids.push_back(original[static_cast<std::size_t>(index)]);
}

std::vector<TrainingInstance> create_instances_from_document(const std::vector<Document>& documents,
                                                             std::size_t document_index,
                                                             const InstanceOptions& options,
                                                             const InstanceVocabulary& vocabulary,
                                                             PretrainingRng& rng) {
  const Document& document = documents.at(document_index);
  const int64_t max_num_tokens = options.max_seq_length - 3;  // [CLS] A [SEP] B [SEP]

  // Usually the whole sequence is filled (padding is wasted work); sometimes a
  // shorter target, so that pretraining also sees the short inputs of
  // fine-tuning. The target is a rough one; max_num_tokens is the limit.
  int64_t target_seq_length = max_num_tokens;
  if (rng.random() < options.short_seq_prob) target_seq_length = rng.randint(2, max_num_tokens);

  std::vector<TrainingInstance> instances;
  std::vector<const Sentence*> chunk;
  int64_t chunk_length = 0;
  const auto sentences = static_cast<int64_t>(document.size());
  for (int64_t i = 0; i < sentences; ++i) {
    chunk.push_back(&document[static_cast<std::size_t>(i)]);
    chunk_length += static_cast<int64_t>(chunk.back()->size());
    if (i != sentences - 1 && chunk_length < target_seq_length) continue;

    // A and B split at a sentence boundary: a_end sentences go into A.
    const auto chunk_size = static_cast<int64_t>(chunk.size());
    const int64_t a_end = chunk_size >= 2 ? rng.randint(1, chunk_size - 1) : 1;
    std::vector<int32_t> tokens_a, tokens_b;
    for (int64_t j = 0; j < a_end; ++j)
      tokens_a.insert(tokens_a.end(), chunk[static_cast<std::size_t>(j)]->begin(),
                      chunk[static_cast<std::size_t>(j)]->end());

    bool is_random_next = false;
    if (chunk_size == 1 || rng.random() < 0.5) {
      is_random_next = true;
      const int64_t target_b_length = target_seq_length - static_cast<int64_t>(tokens_a.size());
      // Another document, tried ten times (a corpus of one document has no other).
      const auto last_document = static_cast<int64_t>(documents.size()) - 1;
      int64_t random_index = 0;
      for (int attempt = 0; attempt < 10; ++attempt) {
        random_index = rng.randint(0, last_document);
        if (random_index != static_cast<int64_t>(document_index)) break;
      }
      const Document& random_document = documents[static_cast<std::size_t>(random_index)];
      const int64_t start = rng.randint(0, static_cast<int64_t>(random_document.size()) - 1);
      for (auto j = static_cast<std::size_t>(start); j < random_document.size(); ++j) {
        tokens_b.insert(tokens_b.end(), random_document[j].begin(), random_document[j].end());
        if (static_cast<int64_t>(tokens_b.size()) >= target_b_length) break;
      }
      // The sentences of the chunk that B did not use are taken again.
      i -= chunk_size - a_end;
    } else {
      for (int64_t j = a_end; j < chunk_size; ++j)
        tokens_b.insert(tokens_b.end(), chunk[static_cast<std::size_t>(j)]->begin(),
                        chunk[static_cast<std::size_t>(j)]->end());
    }
    truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng);

    TrainingInstance instance;
    instance.is_random_next = is_random_next;
    instance.tokens.reserve(tokens_a.size() + tokens_b.size() + 3);
    instance.tokens.push_back(vocabulary.cls_id);
    instance.tokens.insert(instance.tokens.end(), tokens_a.begin(), tokens_a.end());
    instance.tokens.push_back(vocabulary.sep_id);
    instance.segment_a_length = static_cast<int64_t>(instance.tokens.size());
    instance.tokens.insert(instance.tokens.end(), tokens_b.begin(), tokens_b.end());
    instance.tokens.push_back(vocabulary.sep_id);
    create_masked_lm_predictions(instance, options, vocabulary, rng);
    instances.push_back(std::move(instance));
    chunk.clear();
    chunk_length = 0;
  }
  return instances;
}

std::string serialize_instance(const TrainingInstance& instance, int64_t max_seq_length,
                               int64_t max_predictions_per_seq) {
  const auto length = static_cast<std::size_t>(max_seq_length);
  const auto predictions = static_cast<std::size_t>(max_predictions_per_seq);
  std::vector<int64_t> input_ids(length, 0), input_mask(length, 0), segment_ids(length, 0);
  for (std::size_t i = 0; i < instance.tokens.size() && i < length; ++i) {
    input_ids[i] = instance.tokens[i];
    input_mask[i] = 1;
    segment_ids[i] = static_cast<int64_t>(i) < instance.segment_a_length ? 0 : 1;
  }
  std::vector<int64_t> positions(predictions, 0), ids(predictions, 0);
  std::vector<float> weights(predictions, 0.0f);
  for (std::size_t i = 0; i < instance.masked_lm_positions.size() && i < predictions; ++i) {
    positions[i] = instance.masked_lm_positions[i];
    ids[i] = instance.masked_lm_ids[i];
    weights[i] = 1.0f;
  }
  using data::FeatureValue;
  data::Example example;
  example["input_ids"] = FeatureValue::of_ints(std::move(input_ids));
  example["input_mask"] = FeatureValue::of_ints(std::move(input_mask));
  example["segment_ids"] = FeatureValue::of_ints(std::move(segment_ids));
  example["masked_lm_positions"] = FeatureValue::of_ints(std::move(positions));
  example["masked_lm_ids"] = FeatureValue::of_ints(std::move(ids));
  example["masked_lm_weights"] = FeatureValue::of_floats(std::move(weights));
  example["next_sentence_labels"] = FeatureValue::of_ints({instance.is_random_next ? 1 : 0});
  return data::serialize_example(example);
}

}  // namespace garden::nlp
