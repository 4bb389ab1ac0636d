// GLUE's and SQuAD's scores against values computed independently: the
// examples of sklearn's and scipy's documentation, a one-hot covariance form
// of the multiclass Matthews correlation, and SQuAD answers scored by hand
// with the official scripts' rules.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/nlp/metrics/glue_metrics.h"
#include "garden/nlp/metrics/squad_metrics.h"

namespace {

using namespace garden::nlp;

TEST(GlueMetricsTest, MatthewsCorrelationMatchesSklearnBinaryAndMulticlass) {
  // sklearn's matthews_corrcoef example: [+1, +1, +1, -1] against [+1, -1, +1, +1].
  EXPECT_DOUBLE_EQ(matthews_correlation({1, 1, 1, -1}, {1, -1, 1, 1}), -1.0 / 3.0);
  // Three classes; the covariance of the one-hot label and prediction
  // matrices over the product of their variances, computed separately.
  EXPECT_NEAR(matthews_correlation({0, 1, 2, 0, 1, 2}, {0, 1, 1, 0, 0, 2}), 0.5222329678670935,
              1e-15);
  EXPECT_DOUBLE_EQ(matthews_correlation({0, 1, 0, 1}, {0, 1, 0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(matthews_correlation({0, 1, 0, 1}, {1, 0, 1, 0}), -1.0);
  // One class predicted throughout: sklearn's 0, not NaN.
  EXPECT_EQ(matthews_correlation({0, 1, 0, 1}, {1, 1, 1, 1}), 0.0);
}

TEST(GlueMetricsTest, AccuracyAndF1OfThePositiveClass) {
  const std::vector<int64_t> labels = {1, 0, 1, 1, 0, 0, 1};
  const std::vector<int64_t> predictions = {1, 1, 0, 1, 0, 0, 1};
  EXPECT_DOUBLE_EQ(accuracy(labels, predictions), 5.0 / 7.0);
  // tp 3, fp 1, fn 1: precision 3/4, recall 3/4.
  EXPECT_DOUBLE_EQ(f1_score(labels, predictions), 0.75);
  // Class 0: tp 2, fp 1, fn 1.
  EXPECT_DOUBLE_EQ(f1_score(labels, predictions, 0), 2.0 / 3.0);
  EXPECT_EQ(f1_score({0, 0}, {0, 0}), 0.0);  // no positive anywhere: sklearn's 0
}

TEST(GlueMetricsTest, PearsonAndSpearmanMatchScipysExamples) {
  // scipy.stats.pearsonr([1, 2, 3, 4, 5], [10, 9, 2.5, 6, 4]).
  EXPECT_NEAR(pearson_correlation({1, 2, 3, 4, 5}, {10, 9, 2.5, 6, 4}), -0.7426106572325057, 1e-15);
  // scipy.stats.spearmanr([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]): the tied 7s
  // share rank 3.5.
  EXPECT_EQ(average_ranks({5, 6, 7, 8, 7}), (std::vector<double>{1, 2, 3.5, 5, 3.5}));
  EXPECT_NEAR(spearman_correlation({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}), 0.8207826816681233, 1e-15);
  // Monotonic but not linear: Spearman 1, Pearson less.
  EXPECT_DOUBLE_EQ(spearman_correlation({1, 2, 3, 4}, {1, 8, 27, 64}), 1.0);
  EXPECT_LT(pearson_correlation({1, 2, 3, 4}, {1, 8, 27, 64}), 1.0);
  EXPECT_TRUE(std::isnan(pearson_correlation({1, 2, 3}, {4, 4, 4})));  // scipy's NaN
}

TEST(GlueMetricsTest, ListsOfDifferentLengthsOrNoneAreErrors) {
  EXPECT_THROW(accuracy({1, 0}, {1}), garden::Error);
  EXPECT_THROW(matthews_correlation({}, {}), garden::Error);
  EXPECT_THROW(pearson_correlation({1.0}, {1.0, 2.0}), garden::Error);
  try {
    f1_score({1, 0, 1}, {1});
    FAIL();
  } catch (const garden::Error& e) {
    EXPECT_STREQ(e.what(), "f1_score: 3 labels but 1 predictions");
  }
}

TEST(SquadMetricsTest, NormalizationIsTheOfficialScripts) {
  EXPECT_EQ(normalize_squad_answer("The Denver Broncos!"), "denver broncos");
  EXPECT_EQ(normalize_squad_answer("  a  cat, an apple;   THE end. "), "cat apple end");
  // Articles only as whole words; punctuation removed before they are looked for.
  EXPECT_EQ(normalize_squad_answer("theatre anthem a.b"), "theatre anthem ab");
  EXPECT_EQ(normalize_squad_answer("the-end"), "theend");
  EXPECT_EQ(normalize_squad_answer("Théâtre the"), "théâtre");
  EXPECT_EQ(normalize_squad_answer("the a an"), "");
}

TEST(SquadMetricsTest, ExactMatchAndTokenF1ByHand) {
  EXPECT_EQ(squad_exact_match("the Denver Broncos", "Denver Broncos"), 1.0);
  EXPECT_EQ(squad_exact_match("Denver", "Denver Broncos"), 0.0);
  // Precision 1, recall 1/2.
  EXPECT_DOUBLE_EQ(squad_f1("Denver", "Denver Broncos"), 2.0 / 3.0);
  // Tokens count with multiplicity: "x x y" against "x y y" shares {x, y}.
  EXPECT_DOUBLE_EQ(squad_f1("x x y", "x y y"), 2.0 / 3.0);
  EXPECT_EQ(squad_f1("Broncos won", "Panthers lost"), 0.0);
  // An empty side: v1.1 scores 0, v2.0 scores 1 when both are empty.
  EXPECT_EQ(squad_f1("", ""), 0.0);
  EXPECT_EQ(squad_f1("", "", true), 1.0);
  EXPECT_EQ(squad_f1("the", "", true), 1.0);  // "the" normalizes to nothing
  EXPECT_EQ(squad_f1("Denver", "", true), 0.0);
}

TEST(SquadMetricsTest, ASetScoresTheBestGroundTruthPerQuestionAndMissingAsZero) {
  const std::map<std::string, std::vector<std::string>> truths = {
      {"q1", {"Denver Broncos", "The Broncos"}},
      {"q2", {"Santa Clara, California", "Levi's Stadium"}},
      {"q3", {"February 7, 2016"}},
      {"q4", {"gold"}}};
  const std::map<std::string, std::string> predictions = {
      {"q1", "Broncos"},  // best: "The Broncos", exact
      {"q2", "Levi's Stadium in Santa Clara"},
      {"q3", "February 7"}};  // q4 unanswered
  const SquadScores scores = evaluate_squad(truths, predictions);
  EXPECT_EQ(scores.total, 4u);
  EXPECT_EQ(scores.answered, 3u);
  EXPECT_DOUBLE_EQ(scores.exact_match, 100.0 * 1 / 4);
  // q2: against "santa clara california" 2 common of 5 and 3: P 2/5, R 2/3 ->
  // 1/2; against "levis stadium" 2 common of 5 and 2: P 2/5, R 1 -> 4/7.
  // q3: "february 7" in "february 7 2016": P 1, R 2/3 -> 4/5.
  EXPECT_NEAR(scores.f1, 100.0 * (1.0 + 4.0 / 7.0 + 4.0 / 5.0 + 0.0) / 4, 1e-12);

  // Version 2.0: an unanswerable question is matched by the empty answer.
  const std::map<std::string, std::vector<std::string>> v2_truths = {
      {"a", {}}, {"b", {""}}, {"c", {"Paris"}}};
  const SquadScores v2 =
      evaluate_squad(v2_truths, {{"a", ""}, {"b", "Paris"}, {"c", "paris"}}, true);
  EXPECT_DOUBLE_EQ(v2.exact_match, 100.0 * 2 / 3);
  EXPECT_DOUBLE_EQ(v2.f1, 100.0 * 2 / 3);
}

}  // namespace
