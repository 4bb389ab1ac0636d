// BLEU against sacreBLEU's published scores (README and test/test_bleu.py of
// github.com/mjpost/sacrebleu), hand-computed cases, the tokenizers, and Model
// Garden's official/nlp/metrics/bleu.py.
#include "garden/nlp/metrics/bleu.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "garden/base/error.h"

namespace {

using garden::nlp::bleu_tokenize;
using garden::nlp::BleuOptions;
using garden::nlp::BleuSmoothing;
using garden::nlp::BleuTokenizer;
using garden::nlp::compute_bleu;
using garden::nlp::corpus_bleu;
using garden::nlp::model_garden_bleu;
using garden::nlp::model_garden_bleu_tokenize;
using garden::nlp::unicode_lowercase;

constexpr double kEpsilon = 1e-8;  // sacreBLEU's own test tolerance (on score / 100)

// sacreBLEU README example, also test_bleu.py's _hyps/_refs.
const std::vector<std::string> kReadmeHyps = {"The dog bit the man.", "It wasn't surprising.",
                                              "The man had just bitten him."};
const std::vector<std::vector<std::string>> kReadmeRefs = {
    {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
    {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};

// sacrebleu.raw_corpus_bleu: no tokenization, floor smoothing, effective order.
BleuOptions raw_options(std::optional<double> floor_value) {
  BleuOptions options;
  options.tokenize = BleuTokenizer::kNone;
  options.smooth_method = BleuSmoothing::kFloor;
  options.smooth_value = floor_value;
  options.use_effective_order = true;
  return options;
}

TEST(SacrebleuTest, ReadmeExamplePrintsPublishedLine) {
  const auto score = corpus_bleu(kReadmeHyps, kReadmeRefs);
  EXPECT_EQ(
      score.format(),
      "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
  EXPECT_NEAR(score.score, 48.530827, 1e-6);
  EXPECT_EQ(score.counts, (std::vector<int64_t>{14, 7, 5, 3}));
  EXPECT_EQ(score.totals, (std::vector<int64_t>{17, 14, 11, 8}));
}

TEST(SacrebleuTest, PublishedCorpusScoresPerOption) {
  BleuOptions none_tok;
  none_tok.tokenize = BleuTokenizer::kNone;
  EXPECT_NEAR(corpus_bleu(kReadmeHyps, kReadmeRefs, none_tok).score, 49.1919566, 1e-6);
  BleuOptions intl;
  intl.tokenize = BleuTokenizer::kIntl;
  EXPECT_NEAR(corpus_bleu(kReadmeHyps, kReadmeRefs, intl).score, 43.91623493, 1e-6);
  BleuOptions no_smoothing;
  no_smoothing.smooth_method = BleuSmoothing::kNone;
  EXPECT_NEAR(corpus_bleu(kReadmeHyps, kReadmeRefs, no_smoothing).score, 48.530827, 1e-6);
  // Empty hypotheses are kept and score 0.
  EXPECT_EQ(corpus_bleu({"", "", ""}, kReadmeRefs).score, 0.0);
}

TEST(SacrebleuTest, PublishedRawCorpusScores) {
  EXPECT_EQ(
      corpus_bleu({"this is a test", "another test"}, {{"ref1", "ref2"}}, raw_options(.01)).score,
      0.0);
  EXPECT_NEAR(corpus_bleu({"this is a test"}, {{"this is a test"}}, raw_options(.01)).score / 100,
              1.0, kEpsilon);
  EXPECT_NEAR(corpus_bleu({"this is a fest"}, {{"this is a test"}}, raw_options(.01)).score / 100,
              0.223606797749979, kEpsilon);
  // test_effective_order
  EXPECT_NEAR(corpus_bleu({"test"}, {{"a test"}}, raw_options(.01)).score / 100, 0.3678794411714425,
              kEpsilon);
  EXPECT_NEAR(corpus_bleu({"a test"}, {{"a test"}}, raw_options(.01)).score / 100, 1.0, kEpsilon);
  EXPECT_NEAR(corpus_bleu({"a little test"}, {{"a test"}}, raw_options(.01)).score / 100,
              0.03218297948685433, kEpsilon);
}

TEST(SacrebleuTest, PublishedStatisticsAndOffset) {
  const std::vector<std::string> hyp = {"am I am a character sequence"};
  const std::vector<std::vector<std::string>> ref = {{"I am a symbol string sequence a a"}};
  const auto stats = corpus_bleu(hyp, ref, raw_options(.01));
  EXPECT_EQ(stats.counts, (std::vector<int64_t>{4, 2, 1, 0}));
  EXPECT_EQ(stats.totals, (std::vector<int64_t>{6, 5, 4, 3}));
  EXPECT_NEAR(corpus_bleu(hyp, ref, raw_options(0.0)).score / 100, 0.0, kEpsilon);
  // Unset floor value: sacreBLEU's default 0.1.
  EXPECT_NEAR(corpus_bleu(hyp, ref, raw_options(std::nullopt)).score / 100, 0.1555722182, kEpsilon);
}

TEST(SacrebleuTest, PublishedScoringFromStatistics) {
  BleuOptions options;
  options.smooth_method = BleuSmoothing::kNone;
  EXPECT_NEAR(compute_bleu({9, 7, 5, 3}, {10, 8, 6, 4}, 11, 11, options).score / 100, 0.8375922397,
              kEpsilon);
  // test_case_degenerate_stats: (correct, total, hyp_len, ref_len, floor) -> 0.
  struct Degenerate {
    std::vector<int64_t> correct, total;
    int64_t hyp_len, ref_len;
    double floor;
  };
  const std::vector<Degenerate> cases = {
      {{0, 0, 0, 0}, {4, 4, 2, 1}, 0, 1, 0.0}, {{0, 0, 0, 0}, {10, 11, 12, 0}, 14, 10, 0.0},
      {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.0}, {{6, 5, 4, 0}, {6, 5, 4, 3}, 6, 6, 0.0},
      {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.1}, {{0, 0, 0, 0}, {0, 0, 0, 0}, 1, 5, 0.01}};
  for (const auto& c : cases) {
    BleuOptions floor;
    floor.smooth_method = BleuSmoothing::kFloor;
    floor.smooth_value = c.floor;
    EXPECT_EQ(compute_bleu(c.correct, c.total, c.hyp_len, c.ref_len, floor).score, 0.0);
  }
}

TEST(SacrebleuTest, PerfectMatchIs100) {
  const auto score = corpus_bleu({"the cat sat down"}, {{"the cat sat down"}});
  EXPECT_EQ(
      score.format(),
      "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 4 ref_len = 4)");
}

TEST(SacrebleuTest, NoOverlapIsZeroEvenWithExpSmoothing) {
  // exp smoothing would give every order a pseudo-count; sacreBLEU returns 0 first.
  const auto score = corpus_bleu({"a b c d"}, {{"e f g h"}});
  EXPECT_EQ(score.format(),
            "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 4 ref_len = 4)");
}

TEST(SacrebleuTest, ExpSmoothingHalvesPseudoCountPerEmptyOrder) {
  // 1-grams 4/5, 2-grams 2/4, 3-grams 0/3 -> 100/(2*3), 4-grams 0/2 -> 100/(4*2).
  const auto score = corpus_bleu({"a b c d e"}, {{"a b x d e"}});
  EXPECT_NEAR(score.precisions[2], 100.0 / 6, 1e-12);
  EXPECT_NEAR(score.precisions[3], 12.5, 1e-12);
  EXPECT_NEAR(score.score, 30.213753973567677, 1e-9);  // (80*50*16.67*12.5)^(1/4)
  EXPECT_EQ(score.format(),
            "BLEU = 30.21 80.0/50.0/16.7/12.5 (BP = 1.000 ratio = 1.000 hyp_len = 5 ref_len = 5)");
}

TEST(SacrebleuTest, BrevityPenalty) {
  // All precisions 100; BP = exp(1 - 6/4).
  const auto score = corpus_bleu({"a b c d"}, {{"a b c d e f"}});
  EXPECT_NEAR(score.bp, 0.6065306597126334, 1e-12);
  EXPECT_EQ(
      score.format(),
      "BLEU = 60.65 100.0/100.0/100.0/100.0 (BP = 0.607 ratio = 0.667 hyp_len = 4 ref_len = 6)");
  // Too short for 4-grams: 0 unless the effective order drops that order.
  EXPECT_EQ(corpus_bleu({"a b c"}, {{"a b c d e"}}).score, 0.0);
  BleuOptions effective;
  effective.use_effective_order = true;
  EXPECT_NEAR(corpus_bleu({"a b c"}, {{"a b c d e"}}, effective).score, 51.3417119032592, 1e-9);
}

TEST(SacrebleuTest, MultipleReferencesClipAndPickClosestLength) {
  // "the" is credited up to its count in the reference where it is most frequent.
  const auto clipped = corpus_bleu({"the the the"}, {{"the cat"}, {"the the dog"}});
  EXPECT_EQ(clipped.counts[0], 2);
  EXPECT_EQ(clipped.totals[0], 3);
  EXPECT_EQ(clipped.ref_len, 3);
  // Lengths 3 and 5 are equally close to 4: the shorter wins.
  EXPECT_EQ(corpus_bleu({"a b c d"}, {{"a b c"}, {"a b c d e"}}).ref_len, 3);
  EXPECT_THROW(corpus_bleu({"a", "b"}, {{"a"}}), garden::Error);
}

TEST(SacrebleuTest, LowercaseOption) {
  EXPECT_EQ(corpus_bleu({"THE CAT SAT DOWN"}, {{"the cat sat down"}}).score, 0.0);
  BleuOptions lower;
  lower.lowercase = true;
  EXPECT_NEAR(corpus_bleu({"THE CAT SAT DOWN"}, {{"the cat sat down"}}, lower).score, 100.0, 1e-9);
  EXPECT_EQ(unicode_lowercase("ÀÉÎ ΣΑΣ İ Ω"), "àéî σας i\u0307 ω");
}

TEST(Tokenizer13aTest, PunctuationNumbersDashesEntities) {
  EXPECT_EQ(bleu_tokenize("Hello, world!", BleuTokenizer::k13a), "Hello , world !");
  EXPECT_EQ(bleu_tokenize("It costs $1,000.50.", BleuTokenizer::k13a), "It costs $ 1,000.50 .");
  EXPECT_EQ(bleu_tokenize("3.14 and 5.", BleuTokenizer::k13a), "3.14 and 5 .");
  EXPECT_EQ(bleu_tokenize("U.S.A.", BleuTokenizer::k13a), "U . S . A .");
  EXPECT_EQ(bleu_tokenize("well-known 1990-2000", BleuTokenizer::k13a), "well-known 1990 - 2000");
  EXPECT_EQ(bleu_tokenize("don't (maybe) a+b=c", BleuTokenizer::k13a), "don't ( maybe ) a + b = c");
  EXPECT_EQ(bleu_tokenize("&quot;Tom &amp; Jerry&quot; &lt;3 &gt;", BleuTokenizer::k13a),
            "\" Tom & Jerry \" < 3 >");
  EXPECT_EQ(bleu_tokenize("a <skipped> b", BleuTokenizer::k13a), "a b");
  // Non-ASCII punctuation is not 13a's business.
  EXPECT_EQ(bleu_tokenize("Hello, “world”!", BleuTokenizer::k13a), "Hello , “world” !");
  EXPECT_EQ(bleu_tokenize("  spaced\tout  ", BleuTokenizer::kNone), "spaced out");
}

TEST(TokenizerIntlTest, UnicodePunctuationAndSymbols) {
  // Expected strings checked with Python's `regex` module and sacreBLEU's patterns.
  EXPECT_EQ(bleu_tokenize("Hello, “world”!", BleuTokenizer::kIntl), "Hello , “ world ” !");
  EXPECT_EQ(bleu_tokenize("价格：100元。", BleuTokenizer::kIntl), "价格 ： 100元 。");
  EXPECT_EQ(bleu_tokenize("3€ and ¿Qué? a+b=c", BleuTokenizer::kIntl), "3 € and ¿ Qué ? a + b = c");
  EXPECT_EQ(bleu_tokenize("1,000.5", BleuTokenizer::kIntl), "1,000.5");
  EXPECT_THROW(bleu_tokenize("bad \xff byte", BleuTokenizer::kIntl), garden::Error);
}

TEST(ModelGardenBleuTest, TokenizerKeepsNumbersTogether) {
  EXPECT_EQ(model_garden_bleu_tokenize("Hello, world! 1,000.5 $5"),
            (std::vector<std::string>{"Hello", ",", "world", "!", "1,000.5", "$", "5"}));
}

TEST(ModelGardenBleuTest, HandComputedScores) {
  // Uncased; 1-grams 6/7, 2-grams 4/6, 3-grams 2/5, 4-grams 1/4, BP 1.
  EXPECT_FLOAT_EQ(model_garden_bleu({"The cat sat on the mat."}, {"the cat sat on a mat."}),
                  48.89229965209961f);
  // 3-grams 0/2 -> 1/(2*2), 4-grams 0/1 -> 1/(4*1).
  EXPECT_FLOAT_EQ(model_garden_bleu({"a b c d"}, {"a b x d"}), 35.35533905029297f);
  EXPECT_FLOAT_EQ(model_garden_bleu({"The Cat Sat Down"}, {"the cat sat down"}), 100.0f);
  EXPECT_THROW(model_garden_bleu({"a"}, {"a", "b"}), garden::Error);
}

}  // namespace
