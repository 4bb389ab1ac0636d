// A streaming CSV reader (RFC 4180: quoted fields, doubled quotes, CRLF).
// Errors name the file and the line.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace garden::data {

class CsvReader {
 public:
  // Opens `path` and reads the header row. Throws garden::Error when the file
  // cannot be opened or has no header.
  explicit CsvReader(const std::string& path, char delimiter = ',');
  const std::vector<std::string>& header() const { return header_; }
  // The index of column `name`; throws naming the file and the columns.
  std::size_t column(const std::string& name) const;
  // The next row; false at the end. A row whose field count differs from the
  // header's is an error naming the line.
  bool next(std::vector<std::string>& fields);
  // The line the last row started on (1-based; the header is line 1).
  int64_t line() const { return row_line_; }
  const std::string& path() const { return path_; }

 private:
  bool read_record(std::vector<std::string>& fields);

  std::string path_;
  char delimiter_;
  std::ifstream in_;
  std::vector<std::string> header_;
  int64_t line_ = 0;
  int64_t row_line_ = 0;
};

// Parses a whole field as a finite double; false if it is not one.
bool parse_double(const std::string& text, double& value);

}  // namespace garden::data
