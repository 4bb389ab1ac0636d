#include "garden/cli/files.h"

#include "garden/base/error.h"

namespace garden::cli {

std::unique_ptr<AtomicFile> create_output(const std::string& path, const std::string& flag) {
  try {
    return std::make_unique<AtomicFile>(path);
  } catch (const Error& e) {
    throw Error(flag + ": " + e.what());
  }
}

}  // namespace garden::cli
