// sacreBLEU's corpus BLEU and Model Garden's BLEU; see include/garden/nlp/metrics/bleu.h.
#include "garden/nlp/metrics/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "garden/base/error.h"

namespace garden::nlp {

namespace {

// n-gram -> count for n = 1..max_order. Tokens never contain whitespace, so joining
// them with a space gives a unique key (and n-grams of different orders differ).
using NgramCounts = std::unordered_map<std::string, int64_t>;

NgramCounts count_ngrams(const std::vector<std::string>& tokens, int max_order) {
  NgramCounts counts;
  for (int n = 1; n <= max_order; ++n) {
    for (std::size_t i = 0; i + n <= tokens.size(); ++i) {
      std::string key = tokens[i];
      for (int k = 1; k < n; ++k) key += ' ' + tokens[i + k];
      ++counts[key];
    }
  }
  return counts;
}

int order_of(const std::string& ngram) {
  return 1 + static_cast<int>(std::count(ngram.begin(), ngram.end(), ' '));
}

// The reference length closest to the hypothesis length; the shorter one on ties.
int64_t closest_ref_len(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t best_diff = -1, best_len = -1;
  for (int64_t len : ref_lens) {
    const int64_t diff = std::llabs(hyp_len - len);
    if (best_diff == -1 || diff < best_diff) {
      best_diff = diff;
      best_len = len;
    } else if (diff == best_diff && len < best_len) {
      best_len = len;
    }
  }
  return best_len;
}

// sacreBLEU's my_log: log, with log(0) floored so exp() of the mean gives 0.
double floored_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace

std::string BleuScore::format() const {
  std::string precision_text;
  for (std::size_t i = 0; i < precisions.size(); ++i)
    precision_text += (i ? "/" : "") + fixed(precisions[i], 1);
  return "BLEU = " + fixed(score, 2) + " " + precision_text + " (BP = " + fixed(bp, 3) +
         " ratio = " + fixed(ratio, 3) + " hyp_len = " + std::to_string(hyp_len) +
         " ref_len = " + std::to_string(ref_len) + ")";
}

BleuScore compute_bleu(const std::vector<int64_t>& correct, const std::vector<int64_t>& total,
                       int64_t hyp_len, int64_t ref_len, const BleuOptions& options) {
  const int max_order = options.max_ngram_order;
  if (max_order < 1) throw Error("BLEU max_ngram_order must be >= 1");
  if (correct.size() != static_cast<std::size_t>(max_order) || total.size() != correct.size())
    throw Error("BLEU statistics need one correct and one total count per n-gram order");

  BleuScore result;
  result.counts = correct;
  result.totals = total;
  result.hyp_len = hyp_len;
  result.ref_len = ref_len;
  result.ratio = ref_len ? static_cast<double>(hyp_len) / static_cast<double>(ref_len) : 0.0;
  result.precisions.assign(max_order, 0.0);
  if (hyp_len < ref_len)
    result.bp = hyp_len > 0
                    ? std::exp(1.0 - static_cast<double>(ref_len) / static_cast<double>(hyp_len))
                    : 0.0;

  // No matched n-gram of any order: 0, whatever the smoothing (sacreBLEU #141).
  if (std::all_of(correct.begin(), correct.end(), [](int64_t c) { return c == 0; })) return result;

  double smooth_value = 0;
  if (options.smooth_method == BleuSmoothing::kFloor)
    smooth_value = options.smooth_value.value_or(0.1);
  if (options.smooth_method == BleuSmoothing::kAddK)
    smooth_value = options.smooth_value.value_or(1.0);

  double smooth_exp = 1.0;
  int effective_order = max_order;
  for (int n = 1; n <= max_order; ++n) {
    double matched = static_cast<double>(correct[n - 1]);
    double possible = static_cast<double>(total[n - 1]);
    if (options.smooth_method == BleuSmoothing::kAddK && n > 1) {
      matched += smooth_value;
      possible += smooth_value;
    }
    if (possible == 0) break;
    // Effective order drops the orders the hypothesis is too short to have.
    if (options.use_effective_order) effective_order = n;
    if (matched == 0) {
      if (options.smooth_method == BleuSmoothing::kExp) {
        smooth_exp *= 2;  // NIST: halve the pseudo-count at each further empty order
        result.precisions[n - 1] = 100.0 / (smooth_exp * possible);
      } else if (options.smooth_method == BleuSmoothing::kFloor) {
        result.precisions[n - 1] = 100.0 * smooth_value / possible;
      }
    } else {
      result.precisions[n - 1] = 100.0 * matched / possible;
    }
  }
  double log_sum = 0;
  for (int n = 0; n < effective_order; ++n) log_sum += floored_log(result.precisions[n]);
  result.score = result.bp * std::exp(log_sum / effective_order);
  return result;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& reference_streams,
                      const BleuOptions& options) {
  if (reference_streams.empty()) throw Error("BLEU needs at least one reference stream");
  for (std::size_t r = 0; r < reference_streams.size(); ++r) {
    if (reference_streams[r].size() != hypotheses.size())
      throw Error("BLEU reference stream " + std::to_string(r + 1) + " has " +
                  std::to_string(reference_streams[r].size()) + " segments but there are " +
                  std::to_string(hypotheses.size()) + " hypotheses");
  }
  const int max_order = options.max_ngram_order;
  if (max_order < 1) throw Error("BLEU max_ngram_order must be >= 1");
  std::vector<int64_t> correct(max_order, 0), total(max_order, 0);
  int64_t hyp_len = 0, ref_len = 0;
  for (std::size_t i = 0; i < hypotheses.size(); ++i) {
    // A hypothesis n-gram is credited up to its largest count in any one reference.
    NgramCounts ref_ngrams;
    std::vector<int64_t> ref_lens;
    for (const auto& stream : reference_streams) {
      const auto ref_tokens = bleu_segment_tokens(stream[i], options.tokenize, options.lowercase);
      ref_lens.push_back(static_cast<int64_t>(ref_tokens.size()));
      for (const auto& [ngram, count] : count_ngrams(ref_tokens, max_order)) {
        int64_t& best = ref_ngrams[ngram];
        best = std::max(best, count);
      }
    }
    const auto hyp_tokens = bleu_segment_tokens(hypotheses[i], options.tokenize, options.lowercase);
    const auto segment_len = static_cast<int64_t>(hyp_tokens.size());
    for (const auto& [ngram, count] : count_ngrams(hyp_tokens, max_order)) {
      const int n = order_of(ngram);
      total[n - 1] += count;
      const auto found = ref_ngrams.find(ngram);
      if (found != ref_ngrams.end()) correct[n - 1] += std::min(count, found->second);
    }
    hyp_len += segment_len;
    ref_len += closest_ref_len(segment_len, ref_lens);
  }
  return compute_bleu(correct, total, hyp_len, ref_len, options);
}

float model_garden_bleu(const std::vector<std::string>& references,
                        const std::vector<std::string>& hypotheses, bool case_sensitive) {
  if (references.size() != hypotheses.size())
    throw Error("reference and translation have different numbers of lines (" +
                std::to_string(references.size()) + " vs " + std::to_string(hypotheses.size()) +
                ")");
  constexpr int kMaxOrder = 4;
  std::vector<int64_t> matches(kMaxOrder, 0), possible(kMaxOrder, 0);
  int64_t reference_length = 0, translation_length = 0;
  for (std::size_t i = 0; i < references.size(); ++i) {
    const auto ref = model_garden_bleu_tokenize(case_sensitive ? references[i]
                                                               : unicode_lowercase(references[i]));
    const auto hyp = model_garden_bleu_tokenize(case_sensitive ? hypotheses[i]
                                                               : unicode_lowercase(hypotheses[i]));
    reference_length += static_cast<int64_t>(ref.size());
    translation_length += static_cast<int64_t>(hyp.size());
    const NgramCounts hyp_counts = count_ngrams(hyp, kMaxOrder);
    for (const auto& [ngram, count] : count_ngrams(ref, kMaxOrder)) {
      const auto found = hyp_counts.find(ngram);
      if (found != hyp_counts.end()) matches[order_of(ngram) - 1] += std::min(count, found->second);
    }
    for (const auto& [ngram, count] : hyp_counts) possible[order_of(ngram) - 1] += count;
  }

  // compute_bleu: an order with no match gets 1 / (2^k * possible), k counting such
  // orders so far; an order with nothing possible contributes nothing to the log sum
  // but still counts in the divisor.
  std::vector<double> precisions(kMaxOrder, 0.0);
  double smooth = 1.0;
  for (int i = 0; i < kMaxOrder; ++i) {
    if (possible[i] == 0) continue;
    if (matches[i] > 0) {
      precisions[i] = static_cast<double>(matches[i]) / static_cast<double>(possible[i]);
    } else {
      smooth *= 2;
      precisions[i] = 1.0 / (smooth * static_cast<double>(possible[i]));
    }
  }
  double geo_mean = 0;
  if (*std::max_element(precisions.begin(), precisions.end()) > 0) {
    double log_sum = 0;
    for (double p : precisions)
      if (p > 0) log_sum += std::log(p);
    geo_mean = std::exp(log_sum / kMaxOrder);
  }
  // Python divides by zero here; say so instead.
  if (reference_length == 0) throw Error("model_garden_bleu: the references have no tokens");
  const double ratio =
      static_cast<double>(translation_length) / static_cast<double>(reference_length);
  const double bp = ratio < 1e-6 ? 0.0 : ratio < 1.0 ? std::exp(1.0 - 1.0 / ratio) : 1.0;
  // np.float32(bleu) * 100 stays float32.
  return static_cast<float>(geo_mean * bp) * 100.0f;
}

}  // namespace garden::nlp
