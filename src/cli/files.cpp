#include "garden/cli/files.h"

#include <unistd.h>

#include <iostream>

#include "garden/base/error.h"

namespace garden::cli {

std::unique_ptr<AtomicFile> create_output(const std::string& path, const std::string& flag) {
  try {
    return std::make_unique<AtomicFile>(path);
  } catch (const Error& e) {
    throw Error(flag + ": " + e.what());
  }
}

LineStreams::LineStreams(const std::string& input, std::unique_ptr<AtomicFile> output,
                         const std::string& output_path, const std::string& items)
    : input_path_(input), output_path_(output_path), output_(std::move(output)) {
  if (!input_path_.empty()) {
    input_.open(input_path_, std::ios::binary);
    if (!input_) throw Error("--input '" + input_path_ + "' cannot be read");
  } else if (::isatty(STDIN_FILENO)) {
    std::cerr << "garden: reading " << items << " from the terminal, one a line (Ctrl-D ends)\n";
  }
  if (output_) {
    output_file_.open(output_->temporary_path(), std::ios::binary | std::ios::trunc);
    if (!output_file_) throw Error("--output '" + output_path_ + "' cannot be written");
  }
}

void LineStreams::finish() {
  if (input_.is_open() && input_.bad()) throw Error("--input '" + input_path_ + "' cannot be read");
  if (output_) {
    output_file_.close();
    if (!output_file_) throw Error("--output '" + output_path_ + "' cannot be written");
    output_->commit();
  } else if (!std::cout.flush()) {
    throw Error("writing to standard output failed");
  }
}

}  // namespace garden::cli
