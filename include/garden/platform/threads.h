// The threads this process computes on.
#pragma once

namespace garden {

// How many threads an at::parallel_for in Garden's own code runs on now,
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

}  // namespace garden
