// sequence_beam_search against exhaustive search on a toy "model": a fixed
// random table of next-token log-probabilities indexed by example, step and
// previous token, with Model Garden's EOS and length-normalization rules.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/nlp/modeling/beam_search.h"
#include "garden/nlp/modeling/decoding.h"

namespace {

using garden::nlp::BeamSearchResult;
using garden::nlp::BeamSearchRules;
using garden::nlp::BeamSearchState;
using garden::nlp::Cache;
using garden::nlp::greedy_decode;
using garden::nlp::length_normalization;
using garden::nlp::no_repeat_ngram_ban;
using garden::nlp::repeated_ngram_tokens;
using garden::nlp::sequence_beam_search;
using garden::nlp::SymbolsToLogitsFn;

constexpr int64_t kBeamVocab = 5;
constexpr int64_t kEos = 1;

// Log-probabilities [examples, steps, prev token, next token].
at::Tensor random_table(int64_t examples, int64_t steps, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::log_softmax(
      torch::randn({examples, steps, kBeamVocab, kBeamVocab}, torch::kDouble) * 2.0, -1);
}

// The model reads its example index from cache["example"], so a row that
// does not follow its beam's example would read the wrong table.
SymbolsToLogitsFn table_model(const at::Tensor& table, int* calls = nullptr) {
  return [table, calls](const at::Tensor& ids, int64_t step, Cache& cache) {
    if (calls != nullptr) ++*calls;
    const at::Tensor prev = ids.select(1, ids.size(1) - 1);
    return table.select(1, step).index({cache.at("example"), prev});
  };
}

Cache example_cache(const std::vector<int64_t>& examples) {
  return {{"example", torch::tensor(examples, torch::kLong)}};
}

struct Scored {
  double score = -std::numeric_limits<double>::infinity();
  std::vector<int64_t> tokens;  // generated tokens, EOS last
};

// Whether some n-gram of `tokens` occurs twice (a plain set of n-grams);
// never for n 0.
bool has_repeated_ngram(const std::vector<int64_t>& tokens, int64_t n) {
  if (n <= 0) return false;
  std::set<std::vector<int64_t>> seen;
  for (std::size_t i = 0; i + static_cast<std::size_t>(n) <= tokens.size(); ++i)
    if (!seen.insert({tokens.begin() + static_cast<std::ptrdiff_t>(i),
                      tokens.begin() + static_cast<std::ptrdiff_t>(i) + n})
             .second)
      return true;
  return false;
}

// Every sequence that ends with its first EOS within max_length tokens
// (with no_repeat > 0, those with no n-gram of that many tokens twice).
Scored exhaustive_best(const at::Tensor& table, int64_t example, int64_t initial_id,
                       int64_t max_length, double alpha, int64_t no_repeat = 0) {
  auto lp = table.select(0, example);
  Scored best;
  std::vector<int64_t> tokens;
  std::function<void(int64_t, double)> visit = [&](int64_t prev, double log_prob) {
    const int64_t step = static_cast<int64_t>(tokens.size());
    if (step == max_length) return;
    for (int64_t token = 0; token < kBeamVocab; ++token) {
      tokens.push_back(token);
      if (!has_repeated_ngram(tokens, no_repeat)) {
        const double next = log_prob + lp[step][prev][token].item<double>();
        if (token == kEos) {
          const double score = next / length_normalization(alpha, step + 1);
          if (score > best.score) best = {score, tokens};
        } else {
          visit(token, next);
        }
      }
      tokens.pop_back();
    }
  };
  visit(initial_id, 0.0);
  return best;
}

// Log-probability of a decoded row [initial, t1, ..., (EOS, 0, ...)] and the
// number of generated tokens up to and including the first EOS.
std::pair<double, int64_t> row_log_prob(const at::Tensor& table, int64_t example,
                                        const at::Tensor& row) {
  double log_prob = 0.0;
  int64_t prev = row[0].item<int64_t>();
  for (int64_t i = 1; i < row.size(0); ++i) {
    const int64_t token = row[i].item<int64_t>();
    log_prob += table[example][i - 1][prev][token].item<double>();
    if (token == kEos) return {log_prob, i};
    prev = token;
  }
  return {log_prob, row.size(0) - 1};
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

at::Tensor pad_to(const at::Tensor& sequences, int64_t length) {
  return torch::constant_pad_nd(sequences, {0, length - sequences.size(-1)}, 0);
}

TEST(SequenceBeamSearch, FullBeamMatchesExhaustiveSearch) {
  const int64_t max_length = 4;
  // 4 non-EOS tokens, so at most 4^3 alive prefixes: a beam of 64 never drops
  // one and must find the exact optimum.
  const int64_t beam = 64;
  const std::vector<int64_t> initial = {0, 3, 2};
  for (uint64_t seed : {1, 2, 3}) {
    const at::Tensor table = random_table(3, max_length, seed);
    for (double alpha : {0.0, 0.6, 1.5}) {
      const BeamSearchResult result =
          sequence_beam_search(table_model(table), torch::tensor(initial), example_cache({0, 1, 2}),
                               kBeamVocab, beam, alpha, max_length, kEos);
      ASSERT_EQ(result.sequences.size(1), beam);
      for (int64_t e = 0; e < 3; ++e) {
        const Scored best = exhaustive_best(table, e, initial[e], max_length, alpha);
        const at::Tensor top = result.sequences[e][0];
        std::vector<int64_t> expected = {initial[e]};
        expected.insert(expected.end(), best.tokens.begin(), best.tokens.end());
        expected.resize(top.size(0), 0);  // 0 after EOS
        EXPECT_EQ(to_vector(top), expected) << "seed " << seed << " alpha " << alpha;
        EXPECT_NEAR(result.scores[e][0].item<double>(), best.score, 1e-9);
      }
    }
  }
}

TEST(SequenceBeamSearch, ScoresAreSortedAndRecomputable) {
  const int64_t max_length = 5;
  const double alpha = 0.6;
  const at::Tensor table = random_table(2, max_length, 7);
  const BeamSearchResult result =
      sequence_beam_search(table_model(table), torch::tensor(std::vector<int64_t>{0, 4}),
                           example_cache({0, 1}), kBeamVocab, 3, alpha, max_length, kEos);
  for (int64_t e = 0; e < 2; ++e) {
    for (int64_t k = 0; k < 3; ++k) {
      const double score = result.scores[e][k].item<double>();
      if (k > 0) {
        EXPECT_LE(score, result.scores[e][k - 1].item<double>());
      }
      if (score < -1e6) continue;  // an unfilled finished slot
      const auto [log_prob, length] = row_log_prob(table, e, result.sequences[e][k]);
      EXPECT_NEAR(score, log_prob / length_normalization(alpha, length), 1e-9);
    }
  }
}

TEST(SequenceBeamSearch, BeamOneEqualsGreedyArgmax) {
  const int64_t max_length = 6;
  for (uint64_t seed : {11, 12, 13}) {
    for (int64_t eos_step : {2, 100}) {  // EOS wins at step 2, or never
      torch::manual_seed(seed);
      at::Tensor logits = torch::randn({3, max_length, kBeamVocab, kBeamVocab}, torch::kDouble);
      logits.select(3, kEos).fill_(-20.0);
      if (eos_step < max_length) logits.select(1, eos_step).select(2, kEos).fill_(20.0);
      const at::Tensor table = torch::log_softmax(logits, -1);
      const at::Tensor initial = torch::tensor(std::vector<int64_t>{0, 2, 4});
      const BeamSearchResult beam =
          sequence_beam_search(table_model(table), initial, example_cache({0, 1, 2}), kBeamVocab, 1,
                               0.0, max_length, kEos);
      const BeamSearchResult greedy =
          greedy_decode(table_model(table), initial, example_cache({0, 1, 2}), max_length, kEos);
      const int64_t length = std::max(beam.sequences.size(2), greedy.sequences.size(2));
      EXPECT_TRUE(pad_to(beam.sequences, length).equal(pad_to(greedy.sequences, length)));
      EXPECT_TRUE(torch::allclose(beam.scores, greedy.scores, 1e-12, 1e-12));

      // Greedy itself is the step-by-step argmax path.
      for (int64_t e = 0; e < 3; ++e) {
        int64_t prev = initial[e].item<int64_t>();
        double log_prob = 0.0;
        for (int64_t step = 0; step < max_length; ++step) {
          const int64_t token = table[e][step][prev].argmax().item<int64_t>();
          log_prob += table[e][step][prev][token].item<double>();
          EXPECT_EQ(greedy.sequences[e][0][step + 1].item<int64_t>(), token);
          if (token == kEos) break;
          prev = token;
        }
        EXPECT_NEAR(greedy.scores[e][0].item<double>(), log_prob, 1e-12);
      }
    }
  }
}

TEST(SequenceBeamSearch, EosFinishesASequence) {
  const int64_t max_length = 8;
  const double alpha = 0.6;
  torch::manual_seed(41);
  // Make [3, EOS] overwhelmingly likely from initial id 0.
  at::Tensor logits = torch::randn({1, max_length, kBeamVocab, kBeamVocab}, torch::kDouble);
  logits[0][0][0][3] = 12.0;
  logits[0][1][3][kEos] = 12.0;
  const at::Tensor table = torch::log_softmax(logits, -1);
  int calls = 0;
  const BeamSearchResult result =
      sequence_beam_search(table_model(table, &calls), torch::tensor(std::vector<int64_t>{0}),
                           example_cache({0}), kBeamVocab, 2, alpha, max_length, kEos);
  const at::Tensor best = result.sequences[0][0];
  EXPECT_EQ(best[1].item<int64_t>(), 3);
  EXPECT_EQ(best[2].item<int64_t>(), kEos);
  // Tokens after EOS are padding, and the score is the one it finished with.
  EXPECT_EQ(best.slice(0, 3).abs().sum().item<int64_t>(), 0);
  const double log_prob = table[0][0][0][3].item<double>() + table[0][1][3][kEos].item<double>();
  EXPECT_NEAR(result.scores[0][0].item<double>(), log_prob / length_normalization(alpha, 2), 1e-12);
  // The search stops as soon as no alive sequence can beat the worst finished
  // one; with a single beam that is right after [3, EOS] finishes.
  calls = 0;
  const BeamSearchResult single =
      sequence_beam_search(table_model(table, &calls), torch::tensor(std::vector<int64_t>{0}),
                           example_cache({0}), kBeamVocab, 1, alpha, max_length, kEos);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(to_vector(single.sequences[0][0]), (std::vector<int64_t>{0, 3, kEos}));
  for (int64_t k = 0; k < 2; ++k) {
    const std::vector<int64_t> row = to_vector(result.sequences[0][k]);
    bool after_eos = false;
    for (size_t i = 1; i < row.size(); ++i) {
      if (after_eos) {
        EXPECT_EQ(row[i], 0);
      }
      after_eos = after_eos || row[i] == kEos;
    }
  }
}

TEST(SequenceBeamSearch, ALongerHypothesisWinsByItsNormalizedScoreAsInModelGarden) {
  // Hand-set probabilities, from initial id 0: EOS at once has 0.4; token 2
  // has 0.5, then EOS after it 0.78. By log-probability the short one wins
  // (log 0.4 = -0.916 > log 0.5 + log 0.78 = -0.942); Model Garden scores a
  // finished hypothesis by its log-probability over ((5 + length) / 6)^alpha
  // at its own length, so under alpha 0.6 the longer one wins (-0.942 /
  // 1.097 = -0.858), and it must still be searched for after the short one
  // finished (its alive log-probability over the largest normalization,
  // -0.693 / 1.188, beats the finished -0.916).
  const int64_t max_length = 3;
  std::vector<double> probs(3 * kBeamVocab * kBeamVocab, 1.0 / kBeamVocab);
  const auto set = [&](int64_t step, int64_t prev, std::vector<double> next) {
    for (int64_t t = 0; t < kBeamVocab; ++t)
      probs[static_cast<std::size_t>((step * kBeamVocab + prev) * kBeamVocab + t)] =
          next[static_cast<std::size_t>(t)];
  };
  set(0, 0, {0.04, 0.4, 0.5, 0.03, 0.03});    // after the initial id
  set(1, 2, {0.05, 0.78, 0.07, 0.05, 0.05});  // after token 2
  const at::Tensor table =
      torch::tensor(probs, torch::kDouble).log().view({1, max_length, kBeamVocab, kBeamVocab});
  const auto best = [&](double alpha) {
    const BeamSearchResult result =
        sequence_beam_search(table_model(table), torch::tensor(std::vector<int64_t>{0}),
                             example_cache({0}), kBeamVocab, 2, alpha, max_length, kEos);
    const std::vector<int64_t> row = to_vector(result.sequences[0][0]);
    return std::make_pair(std::vector<int64_t>(row.begin(), row.begin() + 3),
                          result.scores[0][0].item<double>());
  };
  const auto [long_row, long_score] = best(0.6);
  EXPECT_EQ(long_row, (std::vector<int64_t>{0, 2, kEos}));
  EXPECT_NEAR(long_score, (std::log(0.5) + std::log(0.78)) / std::pow(7.0 / 6.0, 0.6), 1e-12);
  EXPECT_GT(long_score, std::log(0.4));
  // Without length normalization the short one wins.
  const auto [short_row, short_score] = best(0.0);
  EXPECT_EQ(short_row, (std::vector<int64_t>{0, kEos, 0}));
  EXPECT_NEAR(short_score, std::log(0.4), 1e-12);
}

TEST(SequenceBeamSearch, BatchEqualsEachExampleAlone) {
  const int64_t max_length = 5;
  const int64_t beam = 3;
  const double alpha = 0.6;
  const at::Tensor table = random_table(3, max_length, 21);
  const std::vector<int64_t> initial = {2, 0, 4};
  const BeamSearchResult batch =
      sequence_beam_search(table_model(table), torch::tensor(initial), example_cache({0, 1, 2}),
                           kBeamVocab, beam, alpha, max_length, kEos);
  for (int64_t e = 0; e < 3; ++e) {
    const BeamSearchResult alone =
        sequence_beam_search(table_model(table), torch::tensor(std::vector<int64_t>{initial[e]}),
                             example_cache({e}), kBeamVocab, beam, alpha, max_length, kEos);
    const int64_t length = std::max(batch.sequences.size(2), alone.sequences.size(2));
    for (int64_t k = 0; k < beam; ++k) {
      // A longer batch run may fill finished slots the lone run left empty.
      if (alone.scores[0][k].item<double>() < -1e6) continue;
      EXPECT_TRUE(
          pad_to(alone.sequences[0][k], length).equal(pad_to(batch.sequences[e][k], length)))
          << "example " << e << " beam " << k;
      EXPECT_NEAR(alone.scores[0][k].item<double>(), batch.scores[e][k].item<double>(), 1e-12);
    }
  }
}

TEST(SequenceBeamSearch, CacheRowsFollowTheirBeams) {
  const int64_t max_length = 5;
  const int64_t beam = 3;
  const at::Tensor table = random_table(2, max_length, 31);
  const SymbolsToLogitsFn base = table_model(table);
  int mismatches = 0;
  int calls = 0;
  // The cache holds what this row decoded before the current step, and the
  // initial id of its example; both must match the ids the search passes in.
  SymbolsToLogitsFn model = [&](const at::Tensor& ids, int64_t step, Cache& cache) {
    ++calls;
    EXPECT_EQ(ids.size(0) % beam, 0);  // whole examples; done ones leave
    if (!cache.at("history").equal(ids.slice(1, 0, step))) ++mismatches;
    if (!cache.at("initial").equal(ids.select(1, 0))) ++mismatches;
    cache["history"] = ids.clone();
    return base(ids, step, cache);
  };
  const std::vector<int64_t> initial = {0, 3};
  Cache cache = example_cache({0, 1});
  cache["history"] = torch::zeros({2, 0}, torch::kLong);
  cache["initial"] = torch::tensor(initial);
  sequence_beam_search(model, torch::tensor(initial), cache, kBeamVocab, beam, 0.6, max_length,
                       kEos);
  EXPECT_GT(calls, 1);
  EXPECT_EQ(mismatches, 0);
}

TEST(SequenceBeamSearch, MaxDecodeLengthIsRespected) {
  const int64_t max_length = 3;
  const double alpha = 1.0;
  torch::manual_seed(51);
  at::Tensor logits = torch::randn({2, max_length, kBeamVocab, kBeamVocab}, torch::kDouble);
  logits.select(3, kEos).fill_(-30.0);  // nothing ever finishes
  const at::Tensor table = torch::log_softmax(logits, -1);
  std::vector<int64_t> steps;
  const SymbolsToLogitsFn base = table_model(table);
  SymbolsToLogitsFn model = [&](const at::Tensor& ids, int64_t step, Cache& cache) {
    steps.push_back(step);
    return base(ids, step, cache);
  };
  const BeamSearchResult result =
      sequence_beam_search(model, torch::tensor(std::vector<int64_t>{0, 2}), example_cache({0, 1}),
                           kBeamVocab, 2, alpha, max_length, kEos);
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(result.sequences.sizes(), (std::vector<int64_t>{2, 2, max_length + 1}));
  // Nothing finished: the alive sequences come back with raw log-probabilities.
  for (int64_t e = 0; e < 2; ++e) {
    for (int64_t k = 0; k < 2; ++k) {
      const auto [log_prob, length] = row_log_prob(table, e, result.sequences[e][k]);
      EXPECT_EQ(length, max_length);
      EXPECT_NEAR(result.scores[e][k].item<double>(), log_prob, 1e-12);
    }
  }

  const BeamSearchResult none =
      sequence_beam_search(model, torch::tensor(std::vector<int64_t>{0, 2}), example_cache({0, 1}),
                           kBeamVocab, 2, alpha, 0, kEos);
  EXPECT_EQ(none.sequences.sizes(), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(steps.size(), 3u);
}

// Each example stops at its own limit, and a batch with different limits
// decodes every example as it decodes alone (all beams, not only the best).
TEST(SequenceBeamSearch, EachExampleHasItsOwnLimit) {
  const int64_t longest = 6;
  const std::vector<int64_t> limits = {2, 6, 0, 4};
  torch::manual_seed(61);
  at::Tensor logits = torch::randn({4, longest, kBeamVocab, kBeamVocab}, torch::kDouble);
  // Nothing can finish, so every row runs to its limit, nor decode the padding id.
  logits.select(3, kEos).fill_(-std::numeric_limits<double>::infinity());
  logits.select(3, 0).fill_(-std::numeric_limits<double>::infinity());
  const at::Tensor table = torch::log_softmax(logits, -1);
  const at::Tensor initial = torch::tensor(std::vector<int64_t>{2, 3, 4, 2});
  const at::Tensor max_lengths = torch::tensor(limits);
  const BeamSearchResult beam =
      sequence_beam_search(table_model(table), initial, example_cache({0, 1, 2, 3}), kBeamVocab, 3,
                           0.6, max_lengths, kEos);
  const BeamSearchResult greedy =
      greedy_decode(table_model(table), initial, example_cache({0, 1, 2, 3}), max_lengths, kEos);
  EXPECT_EQ(beam.sequences.size(2), longest + 1);
  EXPECT_EQ(greedy.sequences.size(2), longest + 1);
  for (int64_t e = 0; e < 4; ++e) {
    const int64_t limit = limits[static_cast<std::size_t>(e)];
    for (const BeamSearchResult* result : {&beam, &greedy}) {
      const at::Tensor rows = result->sequences[e];
      // Exactly `limit` tokens after the initial id, then padding.
      EXPECT_EQ(rows.slice(1, 1).ne(0).sum(1).eq(limit).all().item<bool>(), true)
          << "example " << e << " limit " << limit;
    }
    const at::Tensor one = initial.slice(0, e, e + 1);
    const BeamSearchResult beam_alone = sequence_beam_search(
        table_model(table), one, example_cache({e}), kBeamVocab, 3, 0.6, limit, kEos);
    const BeamSearchResult greedy_alone =
        greedy_decode(table_model(table), one, example_cache({e}), limit, kEos);
    EXPECT_TRUE(pad_to(beam_alone.sequences[0], longest + 1).equal(beam.sequences[e]))
        << "example " << e;
    EXPECT_TRUE(torch::allclose(beam_alone.scores[0], beam.scores[e], 1e-12, 0));
    EXPECT_TRUE(pad_to(greedy_alone.sequences[0], longest + 1).equal(greedy.sequences[e]))
        << "example " << e;
    EXPECT_NEAR(greedy_alone.scores[0][0].item<double>(), greedy.scores[e][0].item<double>(),
                1e-12);
  }
  EXPECT_THROW(
      sequence_beam_search(table_model(table), initial, example_cache({0, 1, 2, 3}), kBeamVocab, 3,
                           0.6, torch::tensor(std::vector<int64_t>{1, 2}), kEos),
      garden::Error);
}

// Two examples: example 0 finishes at once, example 1 never does.
at::Tensor one_quick_one_endless(int64_t max_length) {
  torch::manual_seed(71);
  at::Tensor logits = torch::randn({2, max_length, kBeamVocab, kBeamVocab}, torch::kDouble);
  logits[0][0][0][kEos] = 15.0;
  logits[1].select(2, kEos).fill_(-30.0);
  return torch::log_softmax(logits, -1);
}

// An example that is done (its finished set can no longer change) keeps it
// while a longer one goes on: a batch fills no finished slot the example
// would have left empty alone.
TEST(SequenceBeamSearch, ADoneExampleStaysAsItWouldAlone) {
  const int64_t max_length = 8;
  const int64_t beam = 3;
  const at::Tensor table = one_quick_one_endless(max_length);
  const BeamSearchResult batch =
      sequence_beam_search(table_model(table), torch::tensor(std::vector<int64_t>{0, 0}),
                           example_cache({0, 1}), kBeamVocab, beam, 0.6, max_length, kEos);
  const BeamSearchResult alone =
      sequence_beam_search(table_model(table), torch::tensor(std::vector<int64_t>{0}),
                           example_cache({0}), kBeamVocab, beam, 0.6, max_length, kEos);
  ASSERT_LT(alone.sequences.size(2), batch.sequences.size(2));
  EXPECT_TRUE(pad_to(alone.sequences[0], batch.sequences.size(2)).equal(batch.sequences[0]));
  EXPECT_TRUE(torch::equal(alone.scores[0], batch.scores[0]));
}

// Done examples leave the batch: the model sees only the rows still
// searching, and the result is the same as when they stayed.
TEST(SequenceBeamSearch, DoneExamplesLeaveTheBatch) {
  const int64_t max_length = 8;
  const int64_t beam = 3;
  const at::Tensor table = one_quick_one_endless(max_length);
  std::vector<int64_t> rows;
  const SymbolsToLogitsFn base = table_model(table);
  const SymbolsToLogitsFn model = [&](const at::Tensor& ids, int64_t step, Cache& cache) {
    rows.push_back(ids.size(0));
    return base(ids, step, cache);
  };
  const BeamSearchResult batch =
      sequence_beam_search(model, torch::tensor(std::vector<int64_t>{0, 0}), example_cache({0, 1}),
                           kBeamVocab, beam, 0.6, max_length, kEos);
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(max_length));
  EXPECT_EQ(rows.front(), 2 * beam);
  EXPECT_EQ(rows.back(), beam);
  for (int64_t e = 0; e < 2; ++e) {
    const BeamSearchResult alone =
        sequence_beam_search(table_model(table), torch::tensor(std::vector<int64_t>{0}),
                             example_cache({e}), kBeamVocab, beam, 0.6, max_length, kEos);
    EXPECT_TRUE(pad_to(alone.sequences[0], batch.sequences.size(2)).equal(batch.sequences[e]));
    EXPECT_TRUE(torch::equal(alone.scores[0], batch.scores[e]));
  }
  EXPECT_EQ(batch.sequences.size(2), max_length + 1);
}

// "per_example/" entries keep one row per example still searching (its beams
// share it; never repeated or reordered), and "steps/" entries move only their filled
// positions (between two buffers, or in place for a CPU attention cache):
// the model finds in them what its rows wrote at earlier steps, in the order
// of their beams.
TEST(SequenceBeamSearch, StepsAndPerExampleEntriesFollowTheirBeams) {
  const int64_t max_length = 6;
  const int64_t beam = 3;
  const at::Tensor table = random_table(3, max_length, 41);
  int mismatches = 0;
  std::set<const void*> buffers;
  const SymbolsToLogitsFn model = [&](const at::Tensor& ids, int64_t step, Cache& cache) {
    at::Tensor& history = cache.at("steps/history");  // [N, 1, capacity]
    if (!history.narrow(2, 0, step).squeeze(1).equal(ids.slice(1, 0, step))) ++mismatches;
    history.select(2, step).copy_(ids.select(1, step).unsqueeze(1));
    buffers.insert(history.data_ptr());
    // The attention cache's layout [N, H, capacity, Dh], reordered in place
    // on the CPU: every head and channel holds the ids.
    at::Tensor& keys = cache.at("steps/keys");
    const at::Tensor written =
        ids.slice(1, 0, step).to(torch::kFloat).view({ids.size(0), 1, step, 1});
    if (!keys.narrow(2, 0, step).equal(written.expand({ids.size(0), 2, step, 3}))) ++mismatches;
    keys.select(2, step).copy_(
        ids.select(1, step).to(torch::kFloat).view({-1, 1, 1}).expand({-1, 2, 3}));
    const at::Tensor example = cache.at("per_example/example");
    if (ids.size(0) != example.size(0) * beam) ++mismatches;
    const at::Tensor prev = ids.select(1, step);
    return table.select(1, step).index({example.repeat_interleave(beam), prev});
  };
  const std::vector<int64_t> initial = {2, 0, 4};
  Cache cache{{"per_example/example", torch::tensor(std::vector<int64_t>{0, 1, 2})},
              {"steps/history", torch::full({3, 1, max_length}, -1, torch::kLong)},
              {"steps/keys", torch::full({3, 2, max_length, 3}, -1.0f)}};
  const BeamSearchResult got = sequence_beam_search(model, torch::tensor(initial), cache,
                                                    kBeamVocab, beam, 0.6, max_length, kEos);
  EXPECT_EQ(mismatches, 0);
  EXPECT_LE(buffers.size(), 2u + 3u);  // two buffers, new ones only when examples leave
  // The same search through the plain, always reordered, entry.
  const BeamSearchResult plain =
      sequence_beam_search(table_model(table), torch::tensor(initial), example_cache({0, 1, 2}),
                           kBeamVocab, beam, 0.6, max_length, kEos);
  EXPECT_TRUE(got.sequences.equal(plain.sequences));
  EXPECT_TRUE(torch::equal(got.scores, plain.scores));
}

// A model that leaves an entry with the wrong row count is stopped with the
// entry's name and the rows it must have: per beam for plain entries, per
// example for "per_example/" ones.
TEST(SequenceBeamSearch, CacheEntriesWithTheWrongRowsAreNamed) {
  const at::Tensor table = random_table(2, 4, 43);
  const at::Tensor initial = torch::tensor(std::vector<int64_t>{0, 0});
  const auto message = [&](const std::string& entry, bool per_beam) {
    const SymbolsToLogitsFn model = [&](const at::Tensor& ids, int64_t step, Cache& cache) {
      const at::Tensor logits = table_model(table)(ids, step, cache);
      // One row per beam where one per example is due, and the reverse.
      cache[entry] = torch::zeros({per_beam ? 2 : ids.size(0)});
      return logits;
    };
    try {
      sequence_beam_search(model, initial, example_cache({0, 1}), kBeamVocab, 3, 0.6, 4, kEos);
    } catch (const garden::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("extra", true),
            "beam search: cache entry 'extra' returned by symbols_to_logits_fn must have 6 rows "
            "on dim 0");
  EXPECT_EQ(message("per_example/extra", false),
            "beam search: cache entry 'per_example/extra' returned by symbols_to_logits_fn must "
            "have 2 rows on dim 0");
  Cache per_beam{{"per_example/encoder", torch::zeros({6})}};
  EXPECT_THROW(
      sequence_beam_search(table_model(table), initial, per_beam, kBeamVocab, 3, 0.6, 4, kEos),
      garden::Error);
}

// Greedy rows leave as they end (their EOS or their own limit).
TEST(GreedyDecode, FinishedRowsLeaveTheBatch) {
  const int64_t max_length = 5;
  torch::manual_seed(72);
  at::Tensor logits = torch::randn({3, max_length, kBeamVocab, kBeamVocab}, torch::kDouble);
  logits.select(3, kEos).fill_(-30.0);  // no EOS: each row runs to its limit
  const at::Tensor table = torch::log_softmax(logits, -1);
  std::vector<int64_t> rows;
  const SymbolsToLogitsFn base = table_model(table);
  const SymbolsToLogitsFn model = [&](const at::Tensor& ids, int64_t step, Cache& cache) {
    rows.push_back(ids.size(0));
    return base(ids, step, cache);
  };
  const at::Tensor limits = torch::tensor(std::vector<int64_t>{1, 3, 5});
  const BeamSearchResult batch = greedy_decode(model, torch::tensor(std::vector<int64_t>{0, 2, 4}),
                                               example_cache({0, 1, 2}), limits, kEos);
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 2, 2, 1, 1}));
  ASSERT_EQ(batch.sequences.sizes(), (std::vector<int64_t>{3, 1, max_length + 1}));
  const std::vector<int64_t> initial = {0, 2, 4};
  for (int64_t e = 0; e < 3; ++e) {
    const BeamSearchResult alone =
        greedy_decode(table_model(table), torch::tensor(std::vector<int64_t>{initial[e]}),
                      example_cache({e}), limits[e].item<int64_t>(), kEos);
    EXPECT_TRUE(pad_to(alone.sequences[0], max_length + 1).equal(batch.sequences[e]));
    EXPECT_TRUE(torch::equal(alone.scores[0], batch.scores[e]));
  }
}

// The search keeps its state on the host for ids on the CPU and in tensors
// otherwise (a GPU's); both give the same bits, with per-example limits,
// likely and unlikely EOS, a beam wider than the live candidates (-inf ties)
// and every kind of cache entry: one row per beam, "steps/" positions moved
// in place, and "per_example/" rows.
TEST(SequenceBeamSearch, HostAndTensorStateGiveTheSameBits) {
  using garden::nlp::BeamSearchState;
  struct Case {
    int64_t beam;
    double alpha;
    std::vector<int64_t> limits;
    double eos_boost;
    uint64_t seed;
  };
  std::vector<Case> cases = {
      {4, 0.6, {5, 5, 5, 5, 5}, 0.0, 71},  {4, 0.6, {2, 6, 0, 3, 6}, 2.0, 72},
      {64, 0.0, {4, 4, 4, 4, 4}, 0.0, 73}, {1, 1.5, {6, 3, 5, 1, 2}, 2.0, 74},
      {3, 0.6, {6, 6, 6, 6, 6}, 1.0, 75},  {2, 1.0, {6, 1, 4, 0, 6}, -30.0, 76}};
  // And random ones: examples leave at their limits or when done, while
  // the others go on with finished entries of their own.
  for (uint64_t seed = 80; seed < 100; ++seed) {
    Case c{std::vector<int64_t>{1, 2, 3, 4, 8}[seed % 5],
           0.3 * static_cast<double>(seed % 4),
           {},
           std::vector<double>{0.0, 1.0, 2.0, 3.0}[(seed / 5) % 4],
           seed};
    for (int64_t e = 0; e < 5; ++e)
      c.limits.push_back(static_cast<int64_t>((seed * 7 + e * 3) % 7));
    cases.push_back(c);
  }
  const int64_t longest = 6;
  for (const Case& c : cases) {
    torch::manual_seed(c.seed);
    at::Tensor logits = torch::randn({5, longest, kBeamVocab, kBeamVocab}, torch::kDouble) * 2.0;
    logits.select(3, kEos).add_(c.eos_boost);
    const at::Tensor table = torch::log_softmax(logits, -1);
    const SymbolsToLogitsFn base = table_model(table);
    int mismatches = 0;
    const SymbolsToLogitsFn model = [&](const at::Tensor& ids, int64_t step, Cache& cache) {
      at::Tensor& history = cache.at("steps/history");  // [rows, 1, capacity, 1]
      const int64_t rows = ids.size(0);
      if (!history.narrow(2, 0, step)
               .reshape({rows, step})
               .equal(ids.slice(1, 0, step).to(torch::kFloat)))
        ++mismatches;
      history.narrow(2, step, 1).copy_(ids.select(1, step).to(torch::kFloat).view({rows, 1, 1, 1}));
      const at::Tensor initial = cache.at("per_example/initial");
      if (!initial.repeat_interleave(rows / initial.size(0)).equal(ids.select(1, 0))) ++mismatches;
      return base(ids, step, cache);
    };
    const std::vector<int64_t> initial = {0, 3, 2, 4, 0};
    Cache cache = example_cache({0, 1, 2, 3, 4});
    cache["steps/history"] = torch::zeros({5, 1, longest + 1, 1});
    cache["per_example/initial"] = torch::tensor(initial);
    const at::Tensor limits = torch::tensor(c.limits);
    const BeamSearchResult host =
        sequence_beam_search(model, torch::tensor(initial), cache, kBeamVocab, c.beam, c.alpha,
                             limits, kEos, BeamSearchState::kHost);
    for (auto& [name, tensor] : cache) tensor = tensor.clone();  // the search wrote the history
    cache["steps/history"].zero_();
    const BeamSearchResult tensors =
        sequence_beam_search(model, torch::tensor(initial), cache, kBeamVocab, c.beam, c.alpha,
                             limits, kEos, BeamSearchState::kTensors);
    EXPECT_EQ(mismatches, 0) << "seed " << c.seed;
    EXPECT_TRUE(host.sequences.equal(tensors.sequences)) << "seed " << c.seed;
    EXPECT_TRUE(host.scores.equal(tensors.scores)) << "seed " << c.seed << "\n"
                                                   << host.scores << "\n"
                                                   << tensors.scores;
    // The default is the host search for CPU ids.
    cache["steps/history"].zero_();
    const BeamSearchResult chosen = sequence_beam_search(model, torch::tensor(initial), cache,
                                                         kBeamVocab, c.beam, c.alpha, limits, kEos);
    EXPECT_TRUE(chosen.scores.equal(host.scores)) << "seed " << c.seed;
  }
}

}  // namespace

namespace {

TEST(RepeatedNgramTokens, NamesTheTokensThatWouldCompleteARepeat) {
  const std::vector<int64_t> tokens = {5, 6, 7, 5, 6};
  const auto banned = [&](int64_t length, int64_t n) {
    return repeated_ngram_tokens(tokens.data(), length, n);
  };
  // The next trigram starts "5 6", as the first did: 7 would repeat it.
  EXPECT_EQ(banned(5, 3), (std::vector<int64_t>{7}));
  // Bigrams starting with 6: "6 7".
  EXPECT_EQ(banned(5, 2), (std::vector<int64_t>{7}));
  // After "5 6 7 5" the bigram "5 6" is taken.
  EXPECT_EQ(banned(4, 2), (std::vector<int64_t>{6}));
  // Unigrams: every token so far, each occurrence once.
  EXPECT_EQ(banned(5, 1), (std::vector<int64_t>{5, 6, 7, 5, 6}));
  // No earlier 4-gram starts "6 7 5"; none fits in 2 tokens; 0 is off.
  EXPECT_TRUE(banned(5, 4).empty());
  EXPECT_TRUE(banned(2, 4).empty());
  EXPECT_TRUE(banned(5, 0).empty());
  EXPECT_TRUE(repeated_ngram_tokens(tokens.data(), 0, 2).empty());
}

TEST(BlockRepeatedNgrams, FullBeamMatchesExhaustiveSearchWithoutRepeats) {
  // Vocabulary 5, up to 6 tokens: the unconstrained best repeats n-grams
  // often; a beam of 1,024 keeps every alive prefix (4^5), so the search
  // must find the best sequence with no n-gram twice.
  const int64_t max_length = 6;
  const int64_t beam = 1024;
  const std::vector<int64_t> initial = {0, 3};
  int repeats_without_blocking = 0;
  for (uint64_t seed : {4, 5, 6}) {
    // EOS made rarer, so that the best sequences run long enough to repeat.
    torch::manual_seed(seed);
    at::Tensor logits = torch::randn({2, max_length, kBeamVocab, kBeamVocab}, torch::kDouble) * 2.0;
    logits.select(3, kEos).sub_(2.0);
    const at::Tensor table = torch::log_softmax(logits, -1);
    for (int64_t n : {1, 2, 3}) {
      for (double alpha : {0.6, 2.0}) {
        for (BeamSearchState state : {BeamSearchState::kHost, BeamSearchState::kTensors}) {
          const BeamSearchResult result = sequence_beam_search(
              table_model(table), torch::tensor(initial), example_cache({0, 1}), kBeamVocab, beam,
              alpha, torch::full({2}, max_length, torch::kLong), kEos, state,
              BeamSearchRules::kModelGarden, no_repeat_ngram_ban(n));
          for (int64_t e = 0; e < 2; ++e) {
            const Scored best = exhaustive_best(table, e, initial[e], max_length, alpha, n);
            const Scored free = exhaustive_best(table, e, initial[e], max_length, alpha);
            if (state == BeamSearchState::kHost)
              repeats_without_blocking += has_repeated_ngram(free.tokens, n) ? 1 : 0;
            std::vector<int64_t> expected = {initial[e]};
            expected.insert(expected.end(), best.tokens.begin(), best.tokens.end());
            const at::Tensor top = result.sequences[e][0];
            expected.resize(top.size(0), 0);
            EXPECT_EQ(to_vector(top), expected)
                << "seed " << seed << " n " << n << " alpha " << alpha;
            EXPECT_NEAR(result.scores[e][0].item<double>(), best.score, 1e-9);
          }
        }
      }
    }
  }
  // Several of the 36 cases must be ones where blocking changes the answer.
  EXPECT_GE(repeats_without_blocking, 5);
}

TEST(BlockRepeatedNgrams, GreedyTakesTheBestTokenThatRepeatsNoNgram) {
  const int64_t max_length = 6;
  const at::Tensor table = random_table(1, max_length, 9);
  for (int64_t n : {1, 2}) {
    const BeamSearchResult result = greedy_decode(
        table_model(table), torch::tensor(std::vector<int64_t>{0}), example_cache({0}),
        torch::full({1}, max_length, torch::kLong), kEos, no_repeat_ngram_ban(n));
    // The argmax at each step over the tokens that repeat no n-gram,
    // computed here from the table.
    std::vector<int64_t> tokens;
    int64_t prev = 0;
    for (int64_t step = 0; step < max_length; ++step) {
      int64_t pick = -1;
      for (int64_t t = 0; t < kBeamVocab; ++t) {
        tokens.push_back(t);
        const bool allowed = !has_repeated_ngram(tokens, n);
        tokens.pop_back();
        if (allowed && (pick < 0 || table[0][step][prev][t].item<double>() >
                                        table[0][step][prev][pick].item<double>()))
          pick = t;
      }
      tokens.push_back(pick);
      if (pick == kEos) break;
      prev = pick;
    }
    std::vector<int64_t> expected = {0};
    expected.insert(expected.end(), tokens.begin(), tokens.end());
    const at::Tensor row = result.sequences[0][0];
    expected.resize(row.size(0), 0);
    EXPECT_EQ(to_vector(row), expected) << "n " << n;
    // Its score is the tokens' log-probabilities as the model gave them,
    // not renormalized over the tokens left.
    double log_prob = 0.0;
    prev = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      log_prob += table[0][static_cast<int64_t>(i)][prev][tokens[i]].item<double>();
      prev = tokens[i];
    }
    EXPECT_NEAR(result.scores[0][0].item<double>(), log_prob, 1e-12) << "n " << n;
  }
}

}  // namespace
