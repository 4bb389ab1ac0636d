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

SeqevalScores seqeval_scores(const std::vector<std::vector<std::string>>& labels,
                             const std::vector<std::vector<std::string>>& predictions) {
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
  auto truth = get_entities(labels);
  auto found = get_entities(predictions);
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
