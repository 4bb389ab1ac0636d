// `garden export`, `garden predict` and `garden serve` (garden/serving).
#pragma once

namespace CLI {
class App;
}

namespace garden {

void add_serving_commands(CLI::App& app);

}  // namespace garden
