// Corpus BLEU two ways:
//  * corpus_bleu(): sacreBLEU-compatible (sacrebleu 2.x `BLEU.corpus_score`), with its
//    `13a`, `intl` and `none` tokenizers, optional lowercasing, smoothing and effective
//    order; BleuScore::format() prints sacreBLEU's one-line summary.
//  * model_garden_bleu(): Model Garden's official/nlp/metrics/bleu.py `bleu_on_list`
//    (what `bleu_wrapper` computes from two files): uncased, its own Unicode tokenizer,
//    its own compute_bleu; the value the Transformer translation task reports.
//
// The tokenizers, and the Unicode properties they follow, are in
// garden/nlp/metrics/bleu_tokenizers.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "garden/nlp/metrics/bleu_tokenizers.h"

namespace garden::nlp {

enum class BleuSmoothing { kNone, kFloor, kAddK, kExp };

struct BleuOptions {
  BleuTokenizer tokenize = BleuTokenizer::k13a;
  bool lowercase = false;
  BleuSmoothing smooth_method = BleuSmoothing::kExp;
  // For kFloor (default 0.1) and kAddK (default 1); unset means sacreBLEU's default.
  std::optional<double> smooth_value;
  int max_ngram_order = 4;
  bool use_effective_order = false;
};

struct BleuScore {
  double score = 0;                // in [0, 100]
  std::vector<int64_t> counts;     // matched n-grams, n = 1..max_ngram_order
  std::vector<int64_t> totals;     // hypothesis n-grams, n = 1..max_ngram_order
  std::vector<double> precisions;  // in [0, 100], after smoothing
  double bp = 1;                   // brevity penalty
  double ratio = 0;                // hyp_len / ref_len (0 when ref_len is 0)
  int64_t hyp_len = 0;
  int64_t ref_len = 0;

  // sacreBLEU's line, e.g.
  // "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)"
  std::string format() const;
};

// sacreBLEU's BLEU.compute_bleu from sufficient statistics (correct/total per order).
BleuScore compute_bleu(const std::vector<int64_t>& correct, const std::vector<int64_t>& total,
                       int64_t hyp_len, int64_t ref_len, const BleuOptions& options = {});

// Corpus BLEU of `hypotheses` against one or more reference streams, each with one
// line per hypothesis (throws garden::Error on a length mismatch or no streams).
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& reference_streams,
                      const BleuOptions& options = {});

// Model Garden's `bleu_on_list(ref_lines, hyp_lines, case_sensitive)`: BLEU in
// [0, 100] as the float32 it returns. Throws garden::Error when the line counts differ.
float model_garden_bleu(const std::vector<std::string>& references,
                        const std::vector<std::string>& hypotheses, bool case_sensitive = false);

}  // namespace garden::nlp
