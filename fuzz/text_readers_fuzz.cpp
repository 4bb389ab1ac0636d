// Parallel text as TSV and as two aligned files (the input split at its
// first NUL), and documents (blank-line separated) read whole and resumed
// from every offset the reader reported.
#include <algorithm>
#include <vector>

#include "fuzz_util.h"
#include "garden/data/text_readers.h"

using namespace garden::data;

namespace {

void read_pairs(ParallelTextReader reader) {
  std::string source, target;
  int64_t line = 0;
  while (reader.next(source, target)) {
    GARDEN_FUZZ_CHECK(reader.line() > line);
    line = reader.line();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = garden_fuzz::as_view(data, size);
  const std::string tsv = garden_fuzz::write_file("pairs.tsv", bytes);
  try {
    read_pairs(ParallelTextReader::tsv(tsv));
  } catch (const garden::Error&) {
  }
  try {
    read_pairs(ParallelTextReader::tsv(tsv, 2, 0));
  } catch (const garden::Error&) {
  }
  const size_t split = std::min(bytes.find('\0'), bytes.size());
  const std::string source = garden_fuzz::write_file("source.txt", bytes.substr(0, split));
  const std::string target =
      garden_fuzz::write_file("target.txt", bytes.substr(std::min(split + 1, bytes.size())));
  try {
    read_pairs(ParallelTextReader::aligned(source, target));
  } catch (const garden::Error&) {
  }

  // Documents: resuming from a reported offset reads what follows it.
  DocumentReader reader(tsv);
  std::vector<std::vector<std::string>> documents;
  std::vector<int64_t> offsets{reader.offset()};
  std::vector<std::string> sentences;
  while (reader.next(sentences)) {
    GARDEN_FUZZ_CHECK(!sentences.empty());
    documents.push_back(sentences);
    offsets.push_back(reader.offset());
  }
  for (size_t i = 0; i < documents.size() && i < 16; ++i) {
    DocumentReader resumed(tsv);
    resumed.seek(offsets[i], static_cast<int64_t>(i));
    GARDEN_FUZZ_CHECK(resumed.next(sentences));
    GARDEN_FUZZ_CHECK(sentences == documents[i]);
    GARDEN_FUZZ_CHECK(resumed.documents() == static_cast<int64_t>(i + 1));
  }
  return 0;
}
