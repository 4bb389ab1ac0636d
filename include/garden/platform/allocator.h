// How the process's memory is served: glibc's malloc and LibTorch's CPU
// allocator.
#pragma once

#include <string>

namespace garden {

// Called first thing in main(). glibc's malloc serves large blocks with mmap,
// unmaps them when freed and trims the heap, so every step's activations,
// logits and gradients would be page-faulted in again. This makes malloc use
// the heap for every size and keep what is freed (mallopt M_MMAP_MAX 0,
// M_TRIM_THRESHOLD at its maximum): the resident memory stays at its peak
// instead of going back to the system. LibTorch's CPU tensors then come from
// malloc, 64-byte aligned inside a slightly larger block whose address is
// kept before the data, instead of from posix_memalign, whose leftover
// chunks keep a freed block from serving the next request of its size.
// Nothing changes when the user set any of glibc's malloc variables
// (MALLOC_MMAP_MAX_, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
// MALLOC_TOP_PAD_, GLIBC_TUNABLES). docs/runtime.md lists them.
void keep_freed_memory_in_the_heap();

// How malloc runs, for the log: "heap only, freed memory kept", "as the user
// set (NAME=value)" or "glibc's default".
std::string malloc_setting();

}  // namespace garden
