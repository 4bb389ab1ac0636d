// The cells of TensorFX's CSV lines: what data.cpp and data_set.cpp share.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace garden::fx::cells {

inline std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const auto end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

inline std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string current;
  for (const char c : text) {
    if (c == separator) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  return parts;
}

// A CSV line's cells as tf.io.decode_csv reads them: a cell in double
// quotes may hold the separator, and "" inside it is one quote.
inline std::vector<std::string> split_csv(const std::string& line, char separator = ',') {
  std::vector<std::string> parts;
  std::string current;
  bool quoted = false, cell_start = true;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        current += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        current += c;
      }
    } else if (c == '"' && cell_start) {
      quoted = true;
      cell_start = false;
    } else if (c == separator) {
      parts.push_back(current);
      current.clear();
      cell_start = true;
    } else {
      current += c;
      cell_start = false;
    }
  }
  parts.push_back(current);
  return parts;
}

// A whole cell as a number, or nullopt.
inline std::optional<double> to_number(const std::string& cell, bool integer) {
  const std::string text = trim(cell);
  if (text.empty()) return 0.0;
  char* end = nullptr;
  if (integer) {
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (end != text.c_str() + text.size()) return std::nullopt;
    return static_cast<double>(value);
  }
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || std::isnan(value)) return std::nullopt;
  return value;
}

}  // namespace garden::fx::cells
