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

// Called first thing in main(): when OMP_WAIT_POLICY is not set, sets it to
// PASSIVE and starts the program again in place (execv of /proc/self/exe
// with the same arguments), because libgomp reads it only when it is loaded.
// Its default spins each OpenMP thread after every parallel region, and on a
// machine with as many cores as threads those spinning threads take the cores
// OpenBLAS's own threads need for the next matrix product: two LibTorch
// threads were 1.4x slower than one (docs/PERFORMANCE.md). A value the user
// set is kept. Returns only when no restart is needed or execv failed.
void restart_with_passive_openmp_waits(char** argv);
// The OMP_WAIT_POLICY this process runs with ("" when unset, libgomp's
// default, which spins).
std::string openmp_wait_policy();

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
