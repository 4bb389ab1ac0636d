#include "garden/base/paths.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace garden {

std::string bundled_data_path(const std::string& relative) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("GARDEN_DATA_DIR")) roots.emplace_back(env);
  // An installed libgarden finds <datadir>/garden/data from its own
  // <libdir>, wherever the prefix was put.
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&bundled_data_path), &info) && info.dli_fname)
    roots.push_back(
        (fs::path(info.dli_fname).parent_path() / GARDEN_LIB_TO_DATA).lexically_normal());
  roots.emplace_back(GARDEN_SOURCE_DATA_DIR);
  roots.emplace_back(GARDEN_INSTALL_DATA_DIR);
  for (const auto& root : roots)
    if (fs::exists(root / relative)) return (root / relative).string();
  return (fs::path(GARDEN_SOURCE_DATA_DIR) / relative).string();
}

}  // namespace garden
