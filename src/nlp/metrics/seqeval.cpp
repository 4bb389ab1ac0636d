#include "garden/nlp/metrics/seqeval.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>

namespace garden::nlp {

bool Chunk::operator<(const Chunk& o) const {
  return std::tie(begin, end, type) < std::tie(o.begin, o.end, o.type);
}

namespace {

bool end_of_chunk(char prev_tag, char tag, const std::string& prev_type, const std::string& type) {
  if (prev_tag == 'E' || prev_tag == 'S') return true;
  if ((prev_tag == 'B' || prev_tag == 'I') && (tag == 'B' || tag == 'S' || tag == 'O')) return true;
  return prev_tag != 'O' && prev_tag != '.' && prev_type != type;
}

bool start_of_chunk(char prev_tag, char tag, const std::string& prev_type,
                    const std::string& type) {
  if (tag == 'B' || tag == 'S') return true;
  if ((prev_tag == 'E' || prev_tag == 'S' || prev_tag == 'O') && (tag == 'E' || tag == 'I'))
    return true;
  return tag != 'O' && tag != '.' && prev_type != type;
}

}  // namespace

std::vector<Chunk> get_entities(const std::vector<std::vector<std::string>>& sequences) {
  std::vector<std::string> seq;
  for (const auto& sequence : sequences) {
    seq.insert(seq.end(), sequence.begin(), sequence.end());
    seq.push_back("O");
  }
  seq.push_back("O");
  std::vector<Chunk> chunks;
  char prev_tag = 'O';
  std::string prev_type;
  int64_t begin = 0;
  for (std::size_t i = 0; i < seq.size(); ++i) {
    const std::string& chunk = seq[i];
    const char tag = chunk.empty() ? 'O' : chunk[0];
    // seqeval: chunk[1:].split('-', maxsplit=1)[-1] or '_'.
    std::string rest = chunk.size() > 1 ? chunk.substr(1) : "";
    const auto dash = rest.find('-');
    std::string type = dash == std::string::npos ? rest : rest.substr(dash + 1);
    if (type.empty()) type = "_";
    if (end_of_chunk(prev_tag, tag, prev_type, type))
      chunks.push_back({prev_type, begin, static_cast<int64_t>(i) - 1});
    if (start_of_chunk(prev_tag, tag, prev_type, type)) begin = static_cast<int64_t>(i);
    prev_tag = tag;
    prev_type = type;
  }
  return chunks;
}

namespace {

// seqeval.scheme.Token: the prefix is the first letter, the type the rest
// with the dashes at either end stripped ('_' when nothing is left).
struct StrictToken {
  char prefix = 'O';
  std::string type;
};

StrictToken strict_token(const std::string& tag) {
  if (tag.empty() || (tag[0] != 'B' && tag[0] != 'I' && tag[0] != 'O'))
    throw std::invalid_argument("seqeval strict mode (IOB2): tag '" + tag +
                                "' does not start with B, I or O");
  const auto begin = tag.find_first_not_of('-', 1);
  const auto end = tag.find_last_not_of('-');
  StrictToken t;
  t.prefix = tag[0];
  t.type = begin == std::string::npos || end < begin ? "_" : tag.substr(begin, end - begin + 1);
  return t;
}

}  // namespace

std::vector<Chunk> get_strict_iob2_entities(
    const std::vector<std::vector<std::string>>& sequences) {
  std::vector<Chunk> chunks;
  int64_t offset = 0;
  for (const auto& sequence : sequences) {
    std::vector<StrictToken> tokens;
    for (const auto& tag : sequence) tokens.push_back(strict_token(tag));
    tokens.push_back(StrictToken{'O', "_"});
    std::size_t i = 0;
    while (i < tokens.size()) {
      if (tokens[i].prefix != 'B') {
        ++i;
        continue;
      }
      // An I- of the same type continues the entity; whatever else follows
      // (O, B-, an I- of another type) ends it, and under IOB2 every such
      // end is a proper one, so the entity is kept.
      std::size_t end = i + 1;
      while (tokens[end].prefix == 'I' && tokens[end].type == tokens[i].type) ++end;
      chunks.push_back({tokens[i].type, offset + static_cast<int64_t>(i),
                        offset + static_cast<int64_t>(end) - 1});
      i = end;
    }
    offset += static_cast<int64_t>(sequence.size()) + 1;
  }
  return chunks;
}

SeqevalScores seqeval_scores(const std::vector<std::vector<std::string>>& labels,
                             const std::vector<std::vector<std::string>>& predictions,
                             SeqevalMode mode) {
  if (labels.size() != predictions.size())
    throw std::invalid_argument("seqeval_scores: label and prediction sequences differ in number");
  int64_t tokens = 0, equal = 0;
  for (std::size_t s = 0; s < labels.size(); ++s) {
    if (labels[s].size() != predictions[s].size())
      throw std::invalid_argument("seqeval_scores: sequence " + std::to_string(s) +
                                  " differs in length");
    for (std::size_t t = 0; t < labels[s].size(); ++t, ++tokens)
      equal += labels[s][t] == predictions[s][t];
  }
  const bool strict = mode == SeqevalMode::kStrict;
  auto truth = strict ? get_strict_iob2_entities(labels) : get_entities(labels);
  auto found = strict ? get_strict_iob2_entities(predictions) : get_entities(predictions);
  std::sort(truth.begin(), truth.end());
  std::sort(found.begin(), found.end());
  truth.erase(std::unique(truth.begin(), truth.end()), truth.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  std::vector<Chunk> both;
  std::set_intersection(truth.begin(), truth.end(), found.begin(), found.end(),
                        std::back_inserter(both));
  SeqevalScores s;
  const auto correct = static_cast<double>(both.size());
  s.precision = found.empty() ? 0.0 : correct / static_cast<double>(found.size());
  s.recall = truth.empty() ? 0.0 : correct / static_cast<double>(truth.size());
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  s.accuracy = tokens ? static_cast<double>(equal) / static_cast<double>(tokens) : 0.0;
  return s;
}

}  // namespace garden::nlp
