#include "garden/nlp/metrics/squad_metrics.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace garden::nlp {

namespace {

bool is_word_byte(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

std::vector<std::string> tokens_of(const std::string& text) {
  std::vector<std::string> tokens;
  std::istringstream in(normalize_squad_answer(text));
  for (std::string token; in >> token;) tokens.push_back(token);
  return tokens;
}

}  // namespace

std::string normalize_squad_answer(const std::string& text) {
  // lower(), then the punctuation removed (the script's order: lower,
  // remove_punc, remove_articles, white_space_fix, applied inside out).
  std::string kept;
  kept.reserve(text.size());
  for (unsigned char c : text) {
    if (c < 0x80 && std::ispunct(c)) continue;
    kept.push_back(static_cast<char>(c < 0x80 ? std::tolower(c) : c));
  }
  // Whole words a, an, the become a space; then whitespace is collapsed.
  std::string out;
  std::size_t i = 0;
  while (i < kept.size()) {
    const unsigned char c = static_cast<unsigned char>(kept[i]);
    if (!is_word_byte(c)) {
      if (!std::isspace(c))
        out.push_back(static_cast<char>(c));
      else if (!out.empty() && out.back() != ' ')
        out.push_back(' ');
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < kept.size() && is_word_byte(static_cast<unsigned char>(kept[end]))) ++end;
    const std::string word = kept.substr(i, end - i);
    if (word == "a" || word == "an" || word == "the") {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
    } else {
      out += word;
    }
    i = end;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

double squad_exact_match(const std::string& prediction, const std::string& ground_truth) {
  return normalize_squad_answer(prediction) == normalize_squad_answer(ground_truth) ? 1.0 : 0.0;
}

double squad_f1(const std::string& prediction, const std::string& ground_truth, bool version_2) {
  std::vector<std::string> predicted = tokens_of(prediction), truth = tokens_of(ground_truth);
  if (version_2 && (predicted.empty() || truth.empty()))
    return predicted.empty() && truth.empty() ? 1.0 : 0.0;
  std::sort(predicted.begin(), predicted.end());
  std::sort(truth.begin(), truth.end());
  std::vector<std::string> common;
  std::set_intersection(predicted.begin(), predicted.end(), truth.begin(), truth.end(),
                        std::back_inserter(common));
  if (common.empty()) return 0.0;
  const double precision = static_cast<double>(common.size()) / predicted.size();
  const double recall = static_cast<double>(common.size()) / truth.size();
  return 2 * precision * recall / (precision + recall);
}

SquadScores evaluate_squad(const std::map<std::string, std::vector<std::string>>& ground_truths,
                           const std::map<std::string, std::string>& predictions, bool version_2) {
  SquadScores scores;
  double exact = 0, f1 = 0;
  for (const auto& [id, answers] : ground_truths) {
    ++scores.total;
    const auto it = predictions.find(id);
    if (it == predictions.end()) continue;
    ++scores.answered;
    // v2.0 scores an unanswerable question against the empty answer.
    std::vector<std::string> golds = answers;
    if (version_2) {
      golds.erase(
          std::remove_if(golds.begin(), golds.end(),
                         [](const std::string& g) { return normalize_squad_answer(g).empty(); }),
          golds.end());
      if (golds.empty()) golds.push_back("");
    }
    double best_exact = 0, best_f1 = 0;
    for (const auto& gold : golds) {
      best_exact = std::max(best_exact, squad_exact_match(it->second, gold));
      best_f1 = std::max(best_f1, squad_f1(it->second, gold, version_2));
    }
    exact += best_exact;
    f1 += best_f1;
  }
  if (scores.total > 0) {
    scores.exact_match = 100.0 * exact / static_cast<double>(scores.total);
    scores.f1 = 100.0 * f1 / static_cast<double>(scores.total);
  }
  return scores;
}

}  // namespace garden::nlp
