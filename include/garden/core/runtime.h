// Applies RuntimeConfig to the process: threads, seeds, device; and checks
// that a fast BLAS is the one in use.
#pragma once

#include <string>

#include "garden/core/config/definitions.h"

namespace garden {

// Fills in what the config leaves to start-up (runtime.seed and the data
// seeds, drawn once so params.yaml records them), validates every restriction,
// logs one warning naming the Model Garden compatibility keys that are set
// (they have no effect) and locks the config.
void finalize_config(config::ExperimentConfig& params);

// Sets LibTorch's thread counts and seeds its generator; checks the device.
void apply_runtime(const config::RuntimeConfig& runtime);

// The path of the BLAS library this process uses, from /proc/self/maps
// ("" when none is loaded yet).
std::string loaded_blas_library();
// Logs a loud warning when the reference BLAS (not OpenBLAS) is loaded.
void warn_if_slow_blas();

}  // namespace garden
