#include "garden/platform/process.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "garden/base/error.h"
#include "garden/platform/allocator.h"
#include "garden/platform/blas.h"
#include "garden/platform/stop_signals.h"

namespace garden {

namespace {
// OpenBLAS's threads wait 2^14 TSC ticks (about 8 us) for the next product,
// then sleep; its default, 2^28 (about 0.1 s at 2 GHz), keeps them spinning
// through the work between products.
constexpr const char* kOpenBlasThreadTimeout = "14";
// libgomp's spins before a waiting thread sleeps (each a pause instruction;
// libgomp counts 100,000 as about a millisecond) when Garden's products run
// on oneDNN, whose threads are libgomp's own: a step's parallel regions
// follow each other within microseconds, and a thread that slept is woken
// through the kernel for the next one. Set with OMP_WAIT_POLICY=PASSIVE,
// whose own count is 0.
constexpr const char* kGompSpinCount = "100000";
// Set with it, so that the log can say garden chose the count, not the
// user.
constexpr const char* kGompSpinCountByGarden = "GARDEN_SET_GOMP_SPINCOUNT";

// Whether Garden's own products run on oneDNN (libgomp's threads), not on
// the BLAS: a bad GARDEN_GEMM is reported later, by apply_runtime.
bool products_on_onednn() {
  try {
    return gemm_library().rfind("oneDNN", 0) == 0;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

void restart_with_fast_settings(char** argv, bool passive_openmp_waits) {
  std::vector<const char*> set;  // what this call set, undone if execv fails
  if (passive_openmp_waits && std::getenv("OMP_WAIT_POLICY") == nullptr &&
      setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0) {
    set.push_back("OMP_WAIT_POLICY");
    if (std::getenv("GOMP_SPINCOUNT") == nullptr && products_on_onednn() &&
        setenv("GOMP_SPINCOUNT", kGompSpinCount, 1) == 0 &&
        setenv(kGompSpinCountByGarden, "1", 1) == 0) {
      set.push_back("GOMP_SPINCOUNT");
      set.push_back(kGompSpinCountByGarden);
    }
  }
  // Empty when the BLAS is not OpenBLAS: then neither variable is set.
  const std::string own = openblas_kernels();
  if (passive_openmp_waits && !own.empty() && std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr &&
      std::getenv("GOTO_THREAD_TIMEOUT") == nullptr &&
      setenv("OPENBLAS_THREAD_TIMEOUT", kOpenBlasThreadTimeout, 1) == 0)
    set.push_back("OPENBLAS_THREAD_TIMEOUT");
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const std::string force = openblas_kernels_to_force(own, best_openblas_kernels_for_cpu());
    if (!force.empty() && setenv("OPENBLAS_CORETYPE", force.c_str(), 1) == 0) {
      set.push_back("OPENBLAS_CORETYPE");
      if (setenv(kOpenBlasOwnChoiceVariable, own.c_str(), 1) == 0) set.push_back(kOpenBlasOwnChoiceVariable);
    }
  }
  if (set.empty()) return;
  execv("/proc/self/exe", argv);
  for (const char* name : set) unsetenv(name);  // no /proc, or not allowed: go on as started
}

std::string openmp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy ? policy : "";
}

std::string openmp_spin_setting() {
  const char* count = std::getenv("GOMP_SPINCOUNT");
  if (count == nullptr) return "";
  return std::string("GOMP_SPINCOUNT=") + count +
         (std::getenv(kGompSpinCountByGarden) != nullptr
              ? " (set by garden: Garden's products run on oneDNN)"
              : "");
}


void set_up_process(const ProcessSetup& setup, char** argv) {
  // Before any thread starts (and before the restart, which keeps the
  // blocked signals): every thread leaves SIGTERM and SIGINT to the signal
  // thread.
  install_stop_signals();
  if (setup.keep_freed_memory) keep_freed_memory_in_the_heap();
  if (setup.restart_with_fast_settings)
    restart_with_fast_settings(argv, setup.passive_openmp_waits && sysconf(_SC_NPROCESSORS_ONLN) > 1);
}

}  // namespace garden
