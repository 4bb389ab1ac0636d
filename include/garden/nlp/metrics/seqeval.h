// seqeval's scores of tag sequences (what Model Garden's TaggingTask reports):
// entity chunks found as seqeval's default (conlleval-style) get_entities
// finds them — B-/I-/E-/S- prefixes, O outside, a chunk also ending where
// the type changes — and precision, recall and F1 over the chunks of all
// sequences, plus token accuracy; or, in strict mode, as seqeval's IOB2
// scheme finds them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace garden::nlp {

struct Chunk {
  std::string type;
  int64_t begin = 0, end = 0;  // inclusive, in the sequences joined with an O between them
  bool operator==(const Chunk& o) const {
    return type == o.type && begin == o.begin && end == o.end;
  }
  bool operator<(const Chunk& o) const;
};

// seqeval.metrics.sequence_labeling.get_entities of the sequences joined.
std::vector<Chunk> get_entities(const std::vector<std::vector<std::string>>& sequences);

// seqeval's two ways of finding entities: kDefault is get_entities above
// (conlleval's: an I- after O starts an entity); kStrict is
// classification_report(mode='strict', scheme=IOB2): per sequence, an entity
// starts only at B-, continues over I- of its type and is kept only where
// it ends properly; a tag whose first letter is not B, I or O is refused.
enum class SeqevalMode { kDefault, kStrict };

// seqeval.scheme's Tokens(tags, IOB2).entities of each sequence, as chunks
// over the sequences joined with an O between them (so that they compare
// with get_entities' positions); end inclusive. Throws
// std::invalid_argument naming a tag whose first letter is not B, I or O.
std::vector<Chunk> get_strict_iob2_entities(const std::vector<std::vector<std::string>>& sequences);

struct SeqevalScores {
  double precision = 0, recall = 0, f1 = 0, accuracy = 0;
};

// seqeval's precision_score, recall_score, f1_score (micro) and
// accuracy_score; 0 where a denominator is 0. The sequences must pair up
// and have equal lengths.
SeqevalScores seqeval_scores(const std::vector<std::vector<std::string>>& labels,
                             const std::vector<std::vector<std::string>>& predictions,
                             SeqevalMode mode = SeqevalMode::kDefault);

}  // namespace garden::nlp
