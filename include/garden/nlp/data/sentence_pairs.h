// Sentence pairs of the translation task's data: TSV lines, aligned files
// (train.en + train.de) or tf.Example records with src_lang / tgt_lang string
// features, each with Model Garden's unique id.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "garden/nlp/data/translation_data_config.h"

namespace garden::data {
struct RecordLocation;
}

namespace garden::nlp {

// One sentence pair and where it came from: unique_id is
// (file index << 32) | record index, over the sorted files of input_path.
struct SentencePair {
  int64_t unique_id = 0;
  std::string source;
  std::string target;
};

// Every pair of `data`, in file order (no shuffle, no length filter).
std::vector<SentencePair> read_sentence_pairs(const TranslationDataConfig& data);

// Model Garden's unique id of record `index` of file `file_index`.
inline int64_t pair_unique_id(int64_t file_index, int64_t index) {
  return (file_index << 32) | index;
}

// The record reader's file type for `data` (tsv reads lines; aligned carries
// the target extension).
std::string pair_reader_file_type(const TranslationDataConfig& data);

// Splits one record of `data` into its source and target text; errors name
// the file and the record.
class PairDecoder {
 public:
  explicit PairDecoder(const TranslationDataConfig& data);
  ~PairDecoder();
  void operator()(const std::string& record, const data::RecordLocation& where, std::string& source,
                  std::string& target) const;
  // Empty when the source and the target of the pair read at `where` are
  // UTF-8; otherwise one line naming the file, the line (or record) and the
  // column (or feature) that is not.
  std::string utf8_error(const std::string& source, const std::string& target,
                         const data::RecordLocation& where) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Calls fn(unique_id, source, target) for every pair of `data`, in file order.
// A pair that is not UTF-8 is an error naming its file and line.
void for_each_pair(const TranslationDataConfig& data,
                   const std::function<void(int64_t, const std::string&, const std::string&)>& fn);

}  // namespace garden::nlp
