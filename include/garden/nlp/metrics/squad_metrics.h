// SQuAD's scores as its official evaluation scripts compute them
// (evaluate-v1.1.py and evaluate-v2.0.py), which Model Garden's question
// answering task reports:
//  * an answer is normalized: lower-cased, ASCII punctuation removed, the
//    words "a", "an" and "the" removed, whitespace collapsed;
//  * exact match is 1 when the normalized prediction equals the normalized
//    ground truth; F1 is over their whitespace tokens, counted with
//    multiplicity;
//  * a question scores the best over its ground truths; the set scores the
//    mean, times 100. A question without a prediction scores 0.
// Version 2.0 adds unanswerable questions (no ground truth, or an empty
// one): a prediction scores 1 on them exactly when it is empty too.
//
// Normalization is byte-wise: ASCII letters are lower-cased, ASCII
// punctuation removed, and any byte of a multi-byte UTF-8 character counts
// as a letter (Python's \w, which the script's \b uses, holds letters of
// every script), so "théâtre" keeps its article-like prefix as Python does.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace garden::nlp {

std::string normalize_squad_answer(const std::string& text);

double squad_exact_match(const std::string& prediction, const std::string& ground_truth);

// With `version_2`, an empty side scores 1 when both are empty (v2.0's
// rule); otherwise such a pair scores 0 (v1.1's).
double squad_f1(const std::string& prediction, const std::string& ground_truth,
                bool version_2 = false);

struct SquadScores {
  double exact_match = 0;    // in [0, 100]
  double f1 = 0;             // in [0, 100]
  std::size_t total = 0;     // questions scored
  std::size_t answered = 0;  // of them, with a prediction
};

// Scores `predictions` (question id -> answer text) against `ground_truths`
// (question id -> its answers; empty for an unanswerable one).
SquadScores evaluate_squad(const std::map<std::string, std::vector<std::string>>& ground_truths,
                           const std::map<std::string, std::string>& predictions,
                           bool version_2 = false);

}  // namespace garden::nlp
