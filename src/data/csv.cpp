#include "garden/data/csv.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace garden::data {

namespace {
const std::string& checked_csv(const std::string& path) {
  check_input_file(path, "CSV file");
  return path;
}
}  // namespace

CsvReader::CsvReader(const std::string& path, char delimiter)
    : path_(path), delimiter_(delimiter), in_(checked_csv(path)) {
  if (!in_) throw Error("cannot open CSV file '" + path + "': " + std::strerror(errno));
  if (!read_record(header_) || (header_.size() == 1 && header_[0].empty()))
    throw Error("CSV file '" + path + "' is empty: expected a header row");
}

std::size_t CsvReader::column(const std::string& name) const {
  for (std::size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] != name) continue;
    for (std::size_t j = i + 1; j < header_.size(); ++j)
      if (header_[j] == name)
        throw Error("CSV file '" + path_ + "' has two columns named '" + name + "' (columns " +
                    std::to_string(i + 1) + " and " + std::to_string(j + 1) +
                    "); rename one in the header");
    return i;
  }
  std::string columns;
  for (const auto& h : header_) columns += (columns.empty() ? "" : ", ") + h;
  throw Error("CSV file '" + path_ + "' has no column '" + name + "'; its columns: " + columns);
}

bool CsvReader::read_record(std::vector<std::string>& fields) {
  fields.clear();
  std::string line;
  // Skip blank lines between records.
  do {
    if (!std::getline(in_, line)) return false;
    ++line_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A byte order mark (Excel's "CSV UTF-8") is not part of the first name.
    if (line_ == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
  } while (line.empty());
  row_line_ = line_;
  std::string field;
  bool quoted = false;
  std::size_t i = 0;
  while (true) {
    if (i == line.size()) {
      if (!quoted) break;
      // A quoted field runs over the line break.
      std::string more;
      if (!std::getline(in_, more))
        throw Error("CSV file '" + path_ + "' line " + std::to_string(row_line_) +
                    ": unterminated quoted field");
      ++line_;
      if (!more.empty() && more.back() == '\r') more.pop_back();
      field += '\n';
      line = more;
      i = 0;
      continue;
    }
    const char c = line[i++];
    if (quoted) {
      if (c == '"') {
        if (i < line.size() && line[i] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
    } else if (c == '"' && field.empty()) {
      quoted = true;
    } else if (c == delimiter_) {
      fields.push_back(std::move(field));
      field.clear();
    } else {
      field += c;
    }
  }
  fields.push_back(std::move(field));
  return true;
}

bool CsvReader::next(std::vector<std::string>& fields) {
  if (!read_record(fields)) return false;
  if (fields.size() != header_.size())
    throw Error("CSV file '" + path_ + "' line " + std::to_string(row_line_) + ": " +
                std::to_string(fields.size()) + " fields, the header has " +
                std::to_string(header_.size()));
  return true;
}

bool parse_double(const std::string& text, double& value) {
  if (text.empty()) return false;
  // strtod also reads hexadecimal ("0x10"), which a CSV number is not.
  if (text.find_first_of("xXpP") != std::string::npos) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  // ERANGE also flags underflow (1e-320, a subnormal, or 1e-400, zero): still
  // numbers; an overflow comes back infinite and is refused below.
  return end == text.c_str() + text.size() && std::isfinite(value);
}

}  // namespace garden::data
