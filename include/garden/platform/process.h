// What Garden does to its own process before a command runs: the stop
// signals, the malloc settings, and the restart that sets what LibTorch's
// libraries read only when they load. Each command of the `garden` program
// declares the set-up it needs (cli/commands.h); docs/runtime.md lists every
// variable set here and how to turn it off.
#pragma once

#include <string>

namespace garden {

struct ProcessSetup {
  // keep_freed_memory_in_the_heap (platform/allocator.h).
  bool keep_freed_memory = true;
  // restart_with_fast_settings: commands that compute.
  bool restart_with_fast_settings = false;
  // Its passive_openmp_waits: commands that compute for long (on more than
  // one core).
  bool passive_openmp_waits = false;
};

// Called first thing in main(): install_stop_signals(), then what `setup`
// asks for. Returns only when the process goes on (the restart replaces it).
void set_up_process(const ProcessSetup& setup, char** argv);

// Sets what LibTorch's libraries read only when they are loaded, then starts
// the program again in place (execv of /proc/self/exe, same arguments) when
// it set anything. A value the user set is kept. Returns only when nothing
// was set or execv failed (then nothing stays set).
// - OMP_WAIT_POLICY=PASSIVE, when `passive_openmp_waits`: libgomp's default
//   spins each OpenMP thread after every parallel region, on the cores
//   OpenBLAS's own threads need for the next matrix product.
//   With it, GOMP_SPINCOUNT=100000 (about a millisecond) when Garden's own
//   products run on oneDNN (platform/blas.h) and the user set neither
//   variable: oneDNN's threads are libgomp's, a step's parallel regions
//   follow each other within microseconds, and a thread that slept would be
//   woken through the kernel each time.
// - OPENBLAS_THREAD_TIMEOUT=14, also with `passive_openmp_waits`, when the
//   loaded BLAS is OpenBLAS: its threads spin 2^28 TSC ticks after each
//   product before they sleep, holding the cores Garden's kernels run on
//   between products; 2^14 ticks still catches a product that follows at
//   once.
// - OPENBLAS_CORETYPE, when OpenBLAS chose kernels older than the CPU can run
//   (openblas_kernels_to_force): OpenBLAS built for many CPUs, as Debian's
//   is, gives a CPU model it does not know its generic SSE3 kernels.
void restart_with_fast_settings(char** argv, bool passive_openmp_waits);

// The OMP_WAIT_POLICY this process runs with ("" when unset, libgomp's
// default, which spins).
std::string openmp_wait_policy();
// For the log: "GOMP_SPINCOUNT=N", naming garden where it set it; "" when
// unset.
std::string openmp_spin_setting();

}  // namespace garden
