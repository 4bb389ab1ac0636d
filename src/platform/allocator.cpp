#include "garden/platform/allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/alignment.h>

#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "garden/base/torch_features.h"

namespace garden {

namespace {
constexpr const char* kMallocVariables[] = {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
                                            "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                                            "GLIBC_TUNABLES"};
bool heap_kept = false;

// LibTorch's CPU allocator with malloc in place of posix_memalign. With
// every size on the heap, glibc's memalign leaves a small chunk after each
// large block it carves (the rest of its over-allocation, kept in the
// thread's cache and so never merged with its neighbours); a freed block is
// then too small for the next request of the same size, which takes fresh
// pages from the top of the heap instead. A loop that makes a new
// [2048, 32000] softmax before freeing the last one page-faulted all 250 MB
// of it on every pass, and the heap grew by as much each time. Asking malloc
// for a little more and aligning inside the block lets a freed block serve
// the next request of its size exactly. The block's address is kept just
// before the data, so the data pointer alone frees it (LibTorch's raw
// allocations need that).
void free_aligned(void* data) {
  if (data != nullptr) std::free(static_cast<void**>(data)[-1]);
}

class HeapCpuAllocator final : public c10::Allocator {
 public:
#if GARDEN_HAS_ALLOCATOR_COPY_DATA
  c10::DataPtr allocate(size_t bytes) override { return make(bytes); }
  void copy_data(void* destination, const void* source, size_t count) const override {
    std::memcpy(destination, source, count);
  }
#else
  c10::DataPtr allocate(size_t bytes) const override { return make(bytes); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &free_aligned; }

 private:
  static c10::DataPtr make(size_t bytes) {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (bytes == 0) return {nullptr, nullptr, &free_aligned, cpu};
    constexpr size_t kAlignment = c10::gAlignment;
    void* block = std::malloc(bytes + sizeof(void*) + kAlignment - 1);
    TORCH_CHECK(block != nullptr, "DefaultCPUAllocator: not enough memory: you tried to allocate ",
                bytes, " bytes.");
    const auto first = reinterpret_cast<std::uintptr_t>(block) + sizeof(void*);
    void* data = reinterpret_cast<void*>((first + kAlignment - 1) &
                                         ~static_cast<std::uintptr_t>(kAlignment - 1));
    static_cast<void**>(data)[-1] = block;
    return {data, data, &free_aligned, cpu};
  }
};
}  // namespace

void keep_freed_memory_in_the_heap() {
  for (const char* name : kMallocVariables)
    if (std::getenv(name) != nullptr) return;
  heap_kept = mallopt(M_MMAP_MAX, 0) == 1 &&
              mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
  if (heap_kept) {
    static HeapCpuAllocator allocator;
    c10::SetAllocator(c10::DeviceType::CPU, &allocator, /*priority=*/1);
  }
}

std::string malloc_setting() {
  if (heap_kept) return "heap only, freed memory kept";
  for (const char* name : kMallocVariables)
    if (const char* value = std::getenv(name))
      return std::string("as the user set (") + name + "=" + value + ")";
  return "glibc's default";
}

}  // namespace garden
