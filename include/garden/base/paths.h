// Where the data bundled with Garden is found at run time.
#pragma once

#include <string>

namespace garden {

// The path of `relative` (e.g. "iris/iris.csv") in the bundled data: under
// $GARDEN_DATA_DIR when set, else the source tree's data/ (a build tree),
// else the installed share/garden/data. Returns the first that exists, or the
// source-tree path when none does (so errors name a sensible place).
std::string bundled_data_path(const std::string& relative);

}  // namespace garden
