// A directory that appears whole or not at all.
#pragma once

#include <filesystem>
#include <functional>

namespace garden {

// Makes `target` (which must not exist, or be an empty directory): `fill`
// writes into a staging directory beside it (".<name>.tmp-<pid>"), which is
// then synced and renamed to `target`. If `fill` or the rename throws, the
// staging directory is removed and `target` is left as it was.
void write_directory_whole(const std::filesystem::path& target,
                           const std::function<void(const std::filesystem::path&)>& fill);

}  // namespace garden
