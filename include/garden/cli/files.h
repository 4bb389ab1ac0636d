// The files a command writes, made the same way by every command.
#pragma once

#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "garden/base/file_io.h"

namespace garden::cli {

// The output file of flag `flag` (e.g. "--to"), written atomically: content
// goes to temporary_path(), commit() renames it over `path` on success; an
// error before that leaves `path` as it was. Fails now, naming the flag and
// the path, when it cannot be created (an empty name, a directory, a missing
// directory, no permission).
std::unique_ptr<AtomicFile> create_output(const std::string& path, const std::string& flag);

// The streams of a command that reads lines from --input (or stdin, with a
// hint when it is a terminal) and writes lines to --output (atomically, see
// create_output) or stdout.
class LineStreams {
 public:
  // `output`: from create_output, or null for stdout. `items`: what a line
  // holds, for the terminal hint ("sentences").
  LineStreams(const std::string& input, std::unique_ptr<AtomicFile> output,
              const std::string& output_path, const std::string& items);
  std::istream& in() { return input_path_.empty() ? std::cin : input_; }
  std::ostream& out() { return output_ ? output_file_ : std::cout; }
  // Checks the input was read to its end without error, then commits the
  // output file (or flushes stdout). Throws naming the flag.
  void finish();

 private:
  std::string input_path_, output_path_;
  std::ifstream input_;
  std::unique_ptr<AtomicFile> output_;
  std::ofstream output_file_;
};

}  // namespace garden::cli
