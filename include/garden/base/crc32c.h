// CRC-32C (Castagnoli), the checksum of TFRecord files, and the "masking" TensorFlow
// applies to checksums it stores next to the data they cover.
#pragma once

#include <cstddef>
#include <cstdint>

namespace garden {

// CRC-32C of n bytes.
uint32_t crc32c(const void* data, size_t n);

// CRC-32C of the concatenation A + data, given crc = crc32c(A). crc32c_extend(0, d, n)
// equals crc32c(d, n).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

// A CRC computed over data that itself contains CRCs is weak, so stored CRCs are
// rotated and offset first: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc(uint32_t crc);
uint32_t unmask_crc(uint32_t masked);

namespace detail {
// Both implementations behind crc32c_extend, exposed so tests can check each one even
// on a machine where the dispatcher would always pick the same one.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
// True when the CPU has the SSE4.2 crc32 instruction.
bool crc32c_hardware_available();
// Precondition: crc32c_hardware_available().
uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n);
}  // namespace detail

}  // namespace garden
