// What the peer benchmarks share: finding a peer script in ../shared/bench/,
// running it for its JSON line, and the statistics of alternating rounds.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace garden_bench {

// `given` (--peer), else shared/bench/<script> in the nearest ancestor of the
// source tree (then of the working directory) that has one: ../shared from
// the main checkout, ../../shared from a worktree.
inline std::string find_peer(const std::string& given, const std::string& script,
                             const std::string& source_dir) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  for (fs::path base : {fs::path(source_dir), fs::current_path()}) {
    for (base = fs::absolute(base); base.has_relative_path(); base = base.parent_path()) {
      const fs::path candidate = base.parent_path() / "shared" / "bench" / script;
      if (fs::exists(candidate)) return fs::canonical(candidate).string();
    }
  }
  throw std::runtime_error(script + " not found: pass --peer PATH");
}

// Runs `command` (a peer) and returns the first line of its output that is a
// JSON object.
inline nlohmann::json run_peer(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot start: " + command);
  std::string out;
  std::array<char, 4096> buffer;
  while (std::fgets(buffer.data(), buffer.size(), pipe.get())) out += buffer.data();
  for (std::size_t start = 0; start < out.size();) {
    const std::size_t end = std::min(out.find('\n', start), out.size());
    const std::string line = out.substr(start, end - start);
    if (!line.empty() && line.front() == '{') return nlohmann::json::parse(line);
    start = end + 1;
  }
  throw std::runtime_error("the peer printed no JSON line; command: " + command + "\n" + out);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// x to `digits` decimals, as the nearest double (so JSON prints it short).
inline double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

}  // namespace garden_bench
