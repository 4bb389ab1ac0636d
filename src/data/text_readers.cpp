#include "garden/data/text_readers.h"

#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace garden::data {

namespace {

std::ifstream open_text(const std::string& path) {
  check_input_file(path, "text file");
  // Binary mode: tellg() is then a plain byte offset we can seek back to.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open text file '" + path + "'");
  return in;
}

// getline without the trailing '\r' of CRLF files.
bool read_line(std::ifstream& in, std::string& line) {
  if (!std::getline(in, line)) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

}  // namespace

std::vector<std::string> split_fields(const std::string& line, char delimiter) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = line.find(delimiter, start);
    if (end == std::string::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, end - start));
    start = end + 1;
  }
}

ParallelTextReader ParallelTextReader::tsv(const std::string& path, int source_column,
                                           int target_column) {
  if (source_column < 0 || target_column < 0 || source_column == target_column)
    throw Error("parallel TSV '" + path + "': source and target columns must be two columns");
  ParallelTextReader reader;
  reader.source_path_ = path;
  reader.source_ = open_text(path);
  reader.is_tsv_ = true;
  reader.source_column_ = source_column;
  reader.target_column_ = target_column;
  return reader;
}

ParallelTextReader ParallelTextReader::aligned(const std::string& source_path,
                                               const std::string& target_path) {
  ParallelTextReader reader;
  reader.source_path_ = source_path;
  reader.target_path_ = target_path;
  reader.source_ = open_text(source_path);
  reader.target_ = open_text(target_path);
  return reader;
}

bool ParallelTextReader::next(std::string& source, std::string& target) {
  if (is_tsv_) {
    std::string line;
    if (!read_line(source_, line)) return false;
    ++line_;
    const auto fields = split_fields(line, '\t');
    const auto needed = static_cast<std::size_t>(std::max(source_column_, target_column_)) + 1;
    if (fields.size() < needed)
      throw Error("parallel TSV '" + source_path_ + "' line " + std::to_string(line_) + ": " +
                  std::to_string(fields.size()) + " columns, need " + std::to_string(needed));
    source = fields[static_cast<std::size_t>(source_column_)];
    target = fields[static_cast<std::size_t>(target_column_)];
    return true;
  }
  const bool has_source = read_line(source_, source);
  const bool has_target = read_line(target_, target);
  if (!has_source && !has_target) return false;
  ++line_;
  if (has_source != has_target) {
    const std::string& shorter = has_source ? target_path_ : source_path_;
    const std::string& longer = has_source ? source_path_ : target_path_;
    throw Error("parallel files differ in length: '" + shorter + "' ends before line " +
                std::to_string(line_) + " of '" + longer + "'");
  }
  return true;
}

DocumentReader::DocumentReader(const std::string& path) : path_(path), in_(open_text(path)) {}

bool DocumentReader::next(std::vector<std::string>& sentences) {
  sentences.clear();
  std::string line;
  while (read_line(in_, line)) {
    const bool blank = line.find_first_not_of(" \t") == std::string::npos;
    if (blank) {
      if (!sentences.empty()) break;  // the blank line ends this document
      continue;                       // blank lines before a document
    }
    sentences.push_back(line);
  }
  // At EOF tellg() fails; the offset is then the file's end, which we reach
  // again by seeking to the end.
  in_.clear();
  const auto pos = in_.tellg();
  offset_ = pos < 0 ? offset_ : static_cast<int64_t>(pos);
  if (sentences.empty()) return false;
  ++documents_;
  return true;
}

void DocumentReader::seek(int64_t offset, int64_t documents) {
  in_.clear();
  in_.seekg(offset);
  if (!in_) throw Error("cannot seek to byte " + std::to_string(offset) + " of '" + path_ + "'");
  offset_ = offset;
  documents_ = documents;
}

}  // namespace garden::data
