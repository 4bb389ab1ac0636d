#include "garden/platform/threads.h"

#include <ATen/Parallel.h>

#include <sched.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace garden {

int parallel_for_threads() {
  const int threads = at::get_num_threads();
  // One slot per thread, each written only by its own thread.
  std::vector<char> took(static_cast<std::size_t>(std::max(threads, 1)), 0);
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    const int thread = at::get_thread_num();
    if (thread >= 0 && thread < threads) took[static_cast<std::size_t>(thread)] = 1;
  });
  return static_cast<int>(std::count(took.begin(), took.end(), 1));
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace garden
