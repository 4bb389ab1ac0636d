// Applies RuntimeConfig to the process: threads, seeds, device; and checks
// that a fast BLAS is the one in use.
#pragma once

#include <string>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/distribute/process_group.h"

namespace garden {

// Fills in what the config leaves to start-up (runtime.seed and the data
// seeds, drawn once so params.yaml records them), validates every restriction,
// logs one warning naming the Model Garden compatibility keys that are set
// (they have no effect) and locks the config. Over several workers the
// chief draws the seed and every worker takes it.
void finalize_config(config::ExperimentConfig& params,
                     distribute::ProcessGroup* process_group = nullptr);

// Sets LibTorch's thread counts and seeds its generator; checks the device.
void apply_runtime(const config::RuntimeConfig& runtime);

// The path of the BLAS library this process uses, from /proc/self/maps
// ("" when none is loaded yet).
std::string loaded_blas_library();
// The lines of the loud warning for the BLAS library at `blas` (a path as
// loaded_blas_library() gives it): empty for OpenBLAS, MKL, BLIS or none.
std::vector<std::string> slow_blas_warning(const std::string& blas);
// Logs slow_blas_warning(loaded_blas_library()), once per process.
void warn_if_slow_blas();

}  // namespace garden
