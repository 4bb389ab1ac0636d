#include "garden/base/cpu_isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace garden {

const CpuIsa& cpu_isa() {
  static const CpuIsa isa = [] {
    CpuIsa found;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    // (__builtin_cpu_supports takes string literals only.)
    found.sse42 = __builtin_cpu_supports("sse4.2");
    found.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    found.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    found.avx512_skylakex = found.avx512 && __builtin_cpu_supports("avx512cd") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    found.avx512_vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vnni");
    // CPUID leaf 7: AMX-TILE is EDX bit 24, AMX-INT8 bit 25.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    found.amx_int8 = found.avx512_vnni && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
                     ((edx >> 24) & 1u) && ((edx >> 25) & 1u);
#endif
    return found;
  }();
  return isa;
}

bool request_amx_tile_data() {
  static const bool granted = [] {
#if defined(__x86_64__)
    if (!cpu_isa().amx_int8) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return granted;
}

}  // namespace garden
