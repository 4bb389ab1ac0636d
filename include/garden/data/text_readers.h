// Streaming readers of text corpora: parallel text (TSV or two aligned files)
// and documents (one sentence a line, blank lines between documents). They
// read a line at a time, never the whole file.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace garden::data {

// Splits one line on `delimiter` (no quoting: TSV as written by most tools).
std::vector<std::string> split_fields(const std::string& line, char delimiter = '\t');

// Pairs of (source, target) sentences.
class ParallelTextReader {
 public:
  // A TSV file whose columns source_column and target_column (0-based) hold
  // the pair.
  static ParallelTextReader tsv(const std::string& path, int source_column = 0,
                                int target_column = 1);
  // Two files whose line i is a pair. A file that ends before the other is an
  // error naming both files and the line.
  static ParallelTextReader aligned(const std::string& source_path, const std::string& target_path);

  // The next pair; false at the end. A TSV line with too few columns is an
  // error naming the file and the line.
  bool next(std::string& source, std::string& target);
  // The line of the last pair (1-based).
  int64_t line() const { return line_; }

 private:
  ParallelTextReader() = default;

  std::string source_path_, target_path_;
  std::ifstream source_, target_;
  bool is_tsv_ = false;
  int source_column_ = 0, target_column_ = 1;
  int64_t line_ = 0;
};

// Documents as lists of sentences.
class DocumentReader {
 public:
  // Throws garden::Error naming the file if it cannot be opened.
  explicit DocumentReader(const std::string& path);
  // The next non-empty document; false at the end.
  bool next(std::vector<std::string>& sentences);
  // Byte offset of the next line, and documents read so far.
  int64_t offset() const { return offset_; }
  int64_t documents() const { return documents_; }
  // Continues from a byte offset returned by offset() (with the count of
  // documents read until then).
  void seek(int64_t offset, int64_t documents);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t offset_ = 0;
  int64_t documents_ = 0;
};

}  // namespace garden::data
