// What the question answering tests share (tests/nlp and tests/serving): a
// WordPiece vocabulary, SQuAD JSON of one question, and generated "which
// fruit?" sets that a tiny model learns in seconds.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace squad_fixture {

using json = nlohmann::json;

// ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the words.
inline const std::vector<std::string> kSquadVocab = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat",   "sat",  "on", "mat",
    "(",     ")",     "where", "is",    "?",      "dog", "##s",   "a",    "of", "and",
    "which", "fruit", "apple", "pear",  "plum",   "fig", "green", "tree", "by", "river"};

inline std::string squad_vocab_text() {
  std::string vocab;
  for (const auto& token : kSquadVocab) vocab += token + "\n";
  return vocab;
}

inline json one_question(const std::string& context, const std::string& question,
                         const std::string& answer, int64_t answer_start,
                         const std::string& id = "q1") {
  return {{"version", "1.1"},
          {"data",
           {{{"title", "t"},
             {"paragraphs",
              {{{"context", context},
                {"qas",
                 {{{"id", id},
                   {"question", question},
                   {"answers", {{{"text", answer}, {"answer_start", answer_start}}}}}}}}}}}}}};
}

// Paragraphs of 10 to 17 filler words with one fruit among them, asked
// "which fruit?": a window holding the fruit answers it, the others [CLS].
// With `no_fruit_every` > 0, every such question (the first, then every
// n-th) has no fruit and is SQuAD v2.0's is_impossible.
inline json fruit_questions(int count, uint32_t seed, int no_fruit_every = 0) {
  std::mt19937 rng(seed);
  const std::vector<std::string> filler = {"the", "cat", "sat", "on",    "a",
                                           "mat", "dog", "of",  "green", "tree"};
  const std::vector<std::string> fruit = {"apple", "pear", "plum", "fig"};
  json data = json::array();
  for (int i = 0; i < count; ++i) {
    const bool impossible = no_fruit_every > 0 && i % no_fruit_every == 0;
    const int length = 10 + static_cast<int>(rng() % 8);
    const int at = static_cast<int>(rng() % static_cast<uint32_t>(length));
    std::string context, answer;
    int64_t start = 0;
    for (int w = 0; w < length; ++w) {
      if (!context.empty()) context += " ";
      if (w == at && !impossible) {
        answer = fruit[rng() % fruit.size()];
        start = static_cast<int64_t>(context.size());
        context += answer;
      } else {
        context += filler[rng() % filler.size()];
      }
    }
    json qa = {{"id", "q" + std::to_string(i)}, {"question", "which fruit?"}};
    if (impossible) {
      qa["is_impossible"] = true;
      qa["answers"] = json::array();
    } else {
      qa["answers"] = {{{"text", answer}, {"answer_start", start}}};
    }
    data.push_back({{"title", "fruit"}, {"paragraphs", {{{"context", context}, {"qas", {qa}}}}}});
  }
  return {{"version", no_fruit_every > 0 ? "v2.0" : "1.1"}, {"data", data}};
}

}  // namespace squad_fixture
