// The files a command writes, made the same way by every command.
#pragma once

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

}  // namespace garden::cli
