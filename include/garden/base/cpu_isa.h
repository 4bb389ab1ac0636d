// Which instructions this CPU and its operating system let Garden run: the
// one place that asks. The checks include the operating system's support for
// the wider registers (libgcc's __builtin_cpu_supports reads XGETBV).
#pragma once

namespace garden {

struct CpuIsa {
  bool sse42 = false;            // CRC32C's instruction
  bool avx2_fma = false;         // AVX2 and FMA: the kernels' AVX2 builds
  bool avx512 = false;           // AVX-512 F and DQ: the kernels' AVX-512 builds
  bool avx512_skylakex = false;  // F, CD, BW, DQ and VL: OpenBLAS's SkylakeX kernels
  bool avx512_vnni = false;      // F, BW and VNNI: the int8 kernels
  bool amx_int8 = false;         // AMX-TILE and AMX-INT8 (see request_amx_tile_data)
};

// Probed once per process.
const CpuIsa& cpu_isa();

// Asks Linux (5.16 and later) to let this process use AMX's 8 KiB of tile
// registers (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA), once; true when
// granted and the CPU has AMX with int8. Every thread's signal frame grows by
// the tiles' state from then on, so only a kernel that runs on AMX asks.
bool request_amx_tile_data();

}  // namespace garden
