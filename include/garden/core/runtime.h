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

// Called first thing in main() by the commands that compute: sets what
// LibTorch's libraries read only when they are loaded, then starts the
// program again in place (execv of /proc/self/exe, same arguments) when it
// set anything. A value the user set is kept. The restart costs one more
// start of the program (about 0.7 s here). Returns only when nothing was
// set or execv failed (then nothing stays set).
// - OMP_WAIT_POLICY=PASSIVE, when `passive_openmp_waits` (the commands that
//   compute for long, on more than one core): libgomp's default spins each
//   OpenMP thread after every parallel region, and with as many threads as
//   cores those threads took the cores OpenBLAS's own threads need for the
//   next matrix product: two LibTorch threads were 1.5 to 2.5x slower than
//   one (docs/PERFORMANCE.md).
//   With it, GOMP_SPINCOUNT=100000 when Garden's own products run on oneDNN
//   (gemm.h) and the user set neither variable: oneDNN's threads are
//   libgomp's, a step's parallel regions (products and Garden's kernels)
//   follow each other within microseconds, and a thread that slept is woken
//   through the kernel each time; spinning about a millisecond first made
//   most alternated training steps 5 to 20 % faster (docs/PERFORMANCE.md,
//   "OpenMP threads spin a millisecond"). With the BLAS, 0 as before.
// - OPENBLAS_THREAD_TIMEOUT=14, also with `passive_openmp_waits`, when the
//   loaded BLAS is OpenBLAS: OpenBLAS's
//   own threads spin (sched_yield) for 2^28 TSC ticks, about 0.1 s, after
//   each matrix product before they sleep, so between products they held the
//   cores that LibTorch's second OpenMP thread runs Garden's kernels on: two
//   threads then ran the fused attention no faster than one. 2^14 ticks
//   (about 8 us) still catches a product that follows at once.
// - OPENBLAS_CORETYPE, when OpenBLAS chose kernels older than the CPU can run
//   (openblas_kernels_to_force). OpenBLAS built for many CPUs, as Debian's
//   is, picks its kernels by the CPU's model number and gives a model it does
//   not know its generic SSE3 kernels ("Prescott"): Debian 12's 0.3.21 does
//   on 5th-generation Xeons, whose matrix products then ran 4 to 5x slower
//   than with its AVX-512 ("SkylakeX") kernels.
void restart_with_fast_settings(char** argv, bool passive_openmp_waits);
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

// How many threads an at::parallel_for in Garden's own code runs on now
// (Garden's CPU kernels: attention, layer norm, GELU, dropout, the loss),
// found by running one over at::get_num_threads() items and counting the
// threads that took a part. LibTorch's parallel_for is inline: it uses
// LibTorch's OpenMP threads only in code compiled with OpenMP, and runs on
// the calling thread otherwise, whatever at::set_num_threads says. Garden
// compiles with OpenMP where LibTorch uses it (CMakeLists.txt,
// GARDEN_OPENMP), so this is at::get_num_threads() there and 1 in a build
// without it (clang's sanitizer builds).
int parallel_for_threads();

// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

// Sets LibTorch's thread counts and seeds its generator; checks the device.
// runtime.intra_op_parallelism_threads 0 is, as TensorFlow's 0, every core
// this process may run on, unless OMP_NUM_THREADS is set (torchrun and
// garden launch give each process its share so): then LibTorch's default,
// which follows it. LibTorch's own default counts physical cores as its
// cpuinfo sees them, which on this project's virtual machine is 1 of 2.
// Every core needs OMP_WAIT_POLICY=PASSIVE (restart_with_fast_settings):
// without it 0 gives one thread, and train.log says why.
void apply_runtime(const config::RuntimeConfig& runtime);

// The path of the BLAS library this process uses, from /proc/self/maps
// ("" when none is loaded yet); a LibTorch with MKL linked into it (Python
// PyTorch's wheel) gives "<its libtorch_cpu> (its own mkl)".
std::string loaded_blas_library();
// The lines of the loud warning for the BLAS library at `blas` (a path as
// loaded_blas_library() gives it): empty for OpenBLAS, MKL, BLIS or none.
std::vector<std::string> slow_blas_warning(const std::string& blas);
// Logs slow_blas_warning(loaded_blas_library()), once per process, and a
// warning when OpenBLAS runs kernels older than the CPU can run and the user
// did not choose them (OPENBLAS_CORETYPE unset): a program of the user's that
// does not call restart_with_fast_settings.
void warn_if_slow_blas();

// The kernels the loaded OpenBLAS runs (openblas_get_corename: "SkylakeX",
// "Haswell", "Prescott", ...); "" when the BLAS is not OpenBLAS.
std::string openblas_kernels();
// The fastest of OpenBLAS's x86 kernel families this CPU and its operating
// system can run: "SkylakeX" (AVX-512 F, CD, BW, DQ and VL), "Haswell" (AVX2
// and FMA), or "" (neither, or not x86). OpenBLAS's Cooperlake and
// SapphireRapids kernels add bfloat16 products, which LibTorch does not ask
// OpenBLAS for; their float32 products are SkylakeX's.
std::string best_openblas_kernels_for_cpu();
// `best` when the kernels named `loaded` use narrower vectors than `best`
// (SSE or AVX against AVX2, AVX2 against AVX-512), else "": the
// OPENBLAS_CORETYPE to start with. A name it does not know (another
// architecture, a newer family) is never replaced.
std::string openblas_kernels_to_force(const std::string& loaded, const std::string& best);
// The loaded OpenBLAS's kernels for the log: "SkylakeX kernels (OPENBLAS_CORETYPE
// set by garden: OpenBLAS chose Prescott for this CPU)", "Haswell kernels
// (OPENBLAS_CORETYPE=Haswell as the user set)" or "Haswell kernels"; "" when
// the BLAS is not OpenBLAS.
std::string openblas_setting();

// Sets the threads of the loaded OpenBLAS's own pool (openblas_set_num_threads,
// the runtime form of OPENBLAS_NUM_THREADS); false when the BLAS is not
// OpenBLAS. For code that runs several products at once on threads of its own.
bool set_blas_threads(int threads);

}  // namespace garden
