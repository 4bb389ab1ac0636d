#include "garden/nlp/metrics/glue_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "garden/base/error.h"

namespace garden::nlp {

namespace {

template <class A, class B>
void check_pair(const std::vector<A>& a, const std::vector<B>& b, const char* what) {
  if (a.size() != b.size())
    throw Error(std::string(what) + ": " + std::to_string(a.size()) + " labels but " +
                std::to_string(b.size()) + " predictions");
  if (a.empty()) throw Error(std::string(what) + ": no examples");
}

}  // namespace

double accuracy(const std::vector<int64_t>& labels, const std::vector<int64_t>& predictions) {
  check_pair(labels, predictions, "accuracy");
  std::size_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) correct += labels[i] == predictions[i];
  return static_cast<double>(correct) / static_cast<double>(labels.size());
}

double matthews_correlation(const std::vector<int64_t>& labels,
                            const std::vector<int64_t>& predictions) {
  check_pair(labels, predictions, "matthews_correlation");
  // sklearn's form: with t_k and p_k the true and predicted counts of class
  // k, c the correct count and s the total,
  // (c s - sum t_k p_k) / sqrt((s^2 - sum p_k^2) (s^2 - sum t_k^2)).
  std::map<int64_t, double> truth, predicted;
  double correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    truth[labels[i]] += 1;
    predicted[predictions[i]] += 1;
    correct += labels[i] == predictions[i];
  }
  const double s = static_cast<double>(labels.size());
  double tp = 0, pp = 0, tt = 0;
  for (const auto& [k, t] : truth) {
    tt += t * t;
    const auto it = predicted.find(k);
    if (it != predicted.end()) tp += t * it->second;
  }
  for (const auto& [k, p] : predicted) pp += p * p;
  const double denominator = (s * s - pp) * (s * s - tt);
  if (denominator == 0) return 0.0;
  return (correct * s - tp) / std::sqrt(denominator);
}

double f1_score(const std::vector<int64_t>& labels, const std::vector<int64_t>& predictions,
                int64_t positive) {
  check_pair(labels, predictions, "f1_score");
  double true_positive = 0, predicted_positive = 0, actual_positive = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    predicted_positive += predictions[i] == positive;
    actual_positive += labels[i] == positive;
    true_positive += predictions[i] == positive && labels[i] == positive;
  }
  // 2 tp / (2 tp + fp + fn), which is 2 P R / (P + R) where both are defined.
  const double denominator = predicted_positive + actual_positive;
  return denominator == 0 ? 0.0 : 2.0 * true_positive / denominator;
}

double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y) {
  check_pair(x, y, "pearson_correlation");
  const double n = static_cast<double>(x.size());
  const double mean_x = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double mean_y = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double dx = x[i] - mean_x, dy = y[i] - mean_y;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  const double r = sxy / std::sqrt(sxx * syy);
  return std::max(-1.0, std::min(1.0, r));
}

std::vector<double> average_ranks(const std::vector<double>& values) {
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (std::size_t begin = 0; begin < order.size();) {
    std::size_t end = begin + 1;
    while (end < order.size() && values[order[end]] == values[order[begin]]) ++end;
    // Positions begin..end-1 hold one value: ranks begin+1..end, averaged.
    const double rank = (static_cast<double>(begin + 1) + static_cast<double>(end)) / 2.0;
    for (std::size_t i = begin; i < end; ++i) ranks[order[i]] = rank;
    begin = end;
  }
  return ranks;
}

double spearman_correlation(const std::vector<double>& x, const std::vector<double>& y) {
  check_pair(x, y, "spearman_correlation");
  return pearson_correlation(average_ranks(x), average_ranks(y));
}

}  // namespace garden::nlp
