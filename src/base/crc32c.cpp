#include "garden/base/crc32c.h"

#include "garden/base/cpu_isa.h"

#include <array>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GARDEN_CRC32C_X86 1
#include <nmmintrin.h>
#endif

namespace garden {
namespace {

// Reflected form of the Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPolynomial = 0x82F63B78u;
constexpr uint32_t kMaskDelta = 0xa282ead8u;

// Slicing-by-8 tables: kTables[k][b] is the CRC register after feeding byte b followed
// by k zero bytes, which lets the portable path consume 8 bytes per step.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

// Assembled byte by byte so the portable path is right on big-endian machines too.
inline uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// `state` is the raw CRC register (already inverted); the public functions invert.
uint32_t update_portable(uint32_t state, const uint8_t* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = load_le32(p) ^ state;
    const uint32_t hi = load_le32(p + 4);
    state = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
            kTables[4][lo >> 24] ^ kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
            kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) state = (state >> 8) ^ kTables[0][(state ^ *p) & 0xff];
  return state;
}

#ifdef GARDEN_CRC32C_X86
// Compiled for SSE4.2 on its own so the rest of the project needs no -msse4.2; only
// called after the runtime check.
__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t state, const uint8_t* p,
                                                        size_t n) {
  uint64_t state64 = state;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof word);  // unaligned-safe; x86 is little-endian
    state64 = _mm_crc32_u64(state64, word);
  }
  uint32_t state32 = static_cast<uint32_t>(state64);
  for (; n > 0; ++p, --n) state32 = _mm_crc32_u8(state32, *p);
  return state32;
}
#endif

bool cpu_has_sse42() {
#ifdef GARDEN_CRC32C_X86
  return cpu_isa().sse42;
#else
  return false;
#endif
}

using UpdateFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

UpdateFn pick_update() {
#ifdef GARDEN_CRC32C_X86
  if (cpu_has_sse42()) return update_sse42;
#endif
  return update_portable;
}

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  static const UpdateFn update = pick_update();
  return ~update(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

namespace detail {

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  return ~update_portable(~crc, static_cast<const uint8_t*>(data), n);
}

bool crc32c_hardware_available() { return cpu_has_sse42(); }

uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n) {
#ifdef GARDEN_CRC32C_X86
  if (cpu_has_sse42()) return ~update_sse42(~crc, static_cast<const uint8_t*>(data), n);
#endif
  (void)crc;
  (void)data;
  (void)n;
  throw std::logic_error("crc32c_extend_hardware: this CPU has no SSE4.2 crc32 instruction");
}

}  // namespace detail
}  // namespace garden
