#include "garden/core/paths.h"

#include <cstdlib>
#include <filesystem>

namespace garden {

std::string bundled_data_path(const std::string& relative) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("GARDEN_DATA_DIR")) roots.emplace_back(env);
  roots.emplace_back(GARDEN_SOURCE_DATA_DIR);
  roots.emplace_back(GARDEN_INSTALL_DATA_DIR);
  for (const auto& root : roots)
    if (fs::exists(root / relative)) return (root / relative).string();
  return (fs::path(GARDEN_SOURCE_DATA_DIR) / relative).string();
}

}  // namespace garden
