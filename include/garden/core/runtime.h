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

// Called first thing in main() by the commands that compute for long (train,
// fx, serve) on a machine with more than one core: when OMP_WAIT_POLICY is
// not set, sets it to PASSIVE and starts the program again in place (execv of
// /proc/self/exe, same arguments), because libgomp reads it only when it is
// loaded. Its default spins each OpenMP thread after every parallel region,
// and with as many threads as cores those threads took the cores OpenBLAS's
// own threads need for the next matrix product: two LibTorch threads were 1.5
// to 2.5x slower than one (docs/PERFORMANCE.md). A value the user set is
// kept. The restart costs one more start of the program (about 0.7 s here).
// Returns only when no restart is needed or execv failed (then nothing is set).
void restart_with_passive_openmp_waits(char** argv);
// The OMP_WAIT_POLICY this process runs with ("" when unset, libgomp's
// default, which spins).
std::string openmp_wait_policy();

// Called first thing in main(): glibc's malloc serves blocks above 128 KiB
// (up to 32 MiB as it adapts) with mmap, unmaps them when freed and trims
// the heap, so every step's activations, logits and gradients are
// page-faulted in again. On this project's virtual machine that was half of a
// translation step and three quarters of beam search. This makes malloc use
// the heap for every size and keep what is freed (mallopt M_MMAP_MAX 0,
// M_TRIM_THRESHOLD 2 GiB, as MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...
// would): the resident memory stays at its peak instead of going back to the
// system. LibTorch's CPU tensors then come from malloc (64-byte aligned inside
// a block 71 bytes larger, which also keeps the block's address) instead of
// posix_memalign, whose leftover chunks
// kept freed blocks from serving the next request of the same size (each
// such request page-faulted fresh memory and the heap grew). Nothing
// changes when the user set any of glibc's malloc variables
// (MALLOC_MMAP_MAX_, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
// MALLOC_TOP_PAD_, GLIBC_TUNABLES).
void keep_freed_memory_in_the_heap();
// How malloc runs, for the log: "heap only, freed memory kept", "as the user
// set (NAME=value)" or "glibc's default".
std::string malloc_setting();

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

// Sets the threads of the loaded OpenBLAS's own pool (openblas_set_num_threads,
// the runtime form of OPENBLAS_NUM_THREADS); false when the BLAS is not
// OpenBLAS. For code that runs several products at once on threads of its own.
bool set_blas_threads(int threads);

}  // namespace garden
