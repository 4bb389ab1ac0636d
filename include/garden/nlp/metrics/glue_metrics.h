// The scores Model Garden's sentence prediction task reports for GLUE, over a
// whole evaluation set's labels and predictions (its aggregate_logs collects
// them, then sklearn's and scipy's functions score them):
//  * accuracy;
//  * matthews_correlation (CoLA): sklearn's matthews_corrcoef, which for K
//    classes is the multiclass form over the confusion matrix;
//  * f1_score of the positive class (MRPC, QQP): sklearn's binary f1_score;
//  * pearson_correlation and spearman_correlation (STS-B, a regression):
//    scipy's pearsonr and spearmanr, Spearman's with tied values given their
//    average rank.
// Each throws garden::Error when the two lists differ in length or are empty.
// A score whose denominator is 0 (one class only, a constant list) is 0, as
// sklearn's is; scipy's correlations are NaN there, and so are these.
#pragma once

#include <cstdint>
#include <vector>

namespace garden::nlp {

double accuracy(const std::vector<int64_t>& labels, const std::vector<int64_t>& predictions);

double matthews_correlation(const std::vector<int64_t>& labels,
                            const std::vector<int64_t>& predictions);

// F1 of class `positive`: 2 * precision * recall / (precision + recall).
double f1_score(const std::vector<int64_t>& labels, const std::vector<int64_t>& predictions,
                int64_t positive = 1);

double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y);

double spearman_correlation(const std::vector<double>& x, const std::vector<double>& y);

// The ranks of `values`, 1-based, ties given their average rank (scipy's
// rankdata(method="average")).
std::vector<double> average_ranks(const std::vector<double>& values);

}  // namespace garden::nlp
