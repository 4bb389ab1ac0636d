// BLEU's tokenizers (sacreBLEU's 13a, intl, none; Model Garden's) and corpus
// BLEU on arbitrary bytes: lines split at '\n', hypotheses before the first
// NUL, the reference after it.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "fuzz_util.h"
#include "garden/nlp/metrics/bleu.h"
#include "garden/nlp/metrics/bleu_tokenizers.h"

using namespace garden::nlp;

namespace {

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> lines;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = garden_fuzz::as_view(data, size);
  const std::string text(bytes);
  // Text that is not UTF-8 is refused with one line naming the byte.
  try {
    for (BleuTokenizer tokenizer :
         {BleuTokenizer::k13a, BleuTokenizer::kIntl, BleuTokenizer::kNone}) {
      const std::string tokens = bleu_tokenize(text, tokenizer);
      GARDEN_FUZZ_CHECK(tokens.find("  ") == std::string::npos);
      for (bool lowercase : {false, true}) bleu_segment_tokens(text, tokenizer, lowercase);
    }
    unicode_lowercase(text);
    model_garden_bleu_tokenize(text);
  } catch (const garden::Error&) {
  }

  const size_t split = std::min(bytes.find('\0'), bytes.size());
  auto hypotheses = lines_of(bytes.substr(0, split));
  auto references = lines_of(bytes.substr(std::min(split + 1, bytes.size())));
  references.resize(hypotheses.size());
  try {
    const BleuScore score = corpus_bleu(hypotheses, {references});
    GARDEN_FUZZ_CHECK(std::isfinite(score.score) && score.score >= 0 && score.score <= 100);
  } catch (const garden::Error&) {
  }
  try {
    const float mg = model_garden_bleu(references, hypotheses);
    GARDEN_FUZZ_CHECK(std::isfinite(mg) && mg >= 0 && mg <= 100);
  } catch (const garden::Error&) {
    // References without a token, or not UTF-8: refused with one line.
  }
  return 0;
}
