// `garden fx train --model NAME <TensorFX arguments>` and `garden fx predict
// --model DIR [--input F] [--output F] [--batch-size N]`: TensorFX's `tfx
// train` and `tfx predict` (docs/tensorfx.md).
#pragma once

#include <functional>

namespace garden {

// argv[1] is "fx". Returns the exit code.
int run_fx(int argc, char** argv, const std::function<void()>& register_extras);

}  // namespace garden
