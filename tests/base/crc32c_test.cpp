// Tests of CRC-32C (the library's table-driven and SSE4.2 paths) against a
// bitwise CRC written in the test and published test vectors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "garden/base/crc32c.h"
#include "reference_formats.h"

namespace {

using namespace garden_test::reference;

TEST(Crc32cTest, ReferenceAndLibraryMatchPublishedVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(ref_crc32c(check), 0xE3069283u);
  EXPECT_EQ(garden::crc32c(check.data(), check.size()), 0xE3069283u);

  // RFC 3720 (iSCSI), appendix B.4.
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  const std::pair<std::string, uint32_t> vectors[] = {
      {std::string(32, '\0'), 0x8A9136AAu},
      {std::string(32, '\xFF'), 0x62A8AB43u},
      {ascending, 0x46DD794Eu},
      {descending, 0x113FDB5Cu},
  };
  for (const auto& [bytes, expected] : vectors) {
    EXPECT_EQ(ref_crc32c(bytes), expected);
    EXPECT_EQ(garden::crc32c(bytes.data(), bytes.size()), expected);
  }
  EXPECT_EQ(garden::crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, BothImplementationsMatchReferenceAtEveryLengthAndAlignment) {
  const std::string buffer = random_bytes(256, 1);
  const bool hardware = garden::detail::crc32c_hardware_available();
  for (size_t start = 0; start < 16; ++start) {
    for (size_t length = 0; start + length <= 200; ++length) {
      const std::string_view piece(buffer.data() + start, length);
      const uint32_t expected = ref_crc32c(piece);
      ASSERT_EQ(garden::crc32c(piece.data(), length), expected) << start << "+" << length;
      ASSERT_EQ(garden::detail::crc32c_extend_portable(0, piece.data(), length), expected)
          << start << "+" << length;
      if (hardware) {
        ASSERT_EQ(garden::detail::crc32c_extend_hardware(0, piece.data(), length), expected)
            << start << "+" << length;
      }
    }
  }
}

TEST(Crc32cTest, ExtendEqualsCrcOfConcatenation) {
  const std::string data = random_bytes(100, 2);
  const uint32_t whole = ref_crc32c(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t head = garden::crc32c(data.data(), split);
    EXPECT_EQ(garden::crc32c_extend(head, data.data() + split, data.size() - split), whole)
        << split;
    EXPECT_EQ(
        garden::detail::crc32c_extend_portable(head, data.data() + split, data.size() - split),
        whole)
        << split;
  }
}

TEST(Crc32cTest, MaskMatchesKnownValuesAndInverts) {
  EXPECT_EQ(garden::mask_crc(0), 0xa282ead8u);
  EXPECT_EQ(garden::mask_crc(0xE3069283u), 0xc78ab0e5u);
  // The length CRC of an empty record (eight zero bytes).
  EXPECT_EQ(garden::mask_crc(ref_crc32c(std::string(8, '\0'))), 0x07980329u);
  // The length CRC of a 24-byte record: bytes a3 7f 4b 22 at offset 8 of every
  // TensorBoard event file, whose first record (wall_time + "brain.Event:2") has 24 bytes.
  std::string length24;
  append_le(length24, 24, 8);
  EXPECT_EQ(garden::mask_crc(ref_crc32c(length24)), 0x224b7fa3u);

  for (uint32_t crc : {0u, 1u, 0x80000000u, 0xFFFFFFFFu, 0xE3069283u, 0x12345678u}) {
    EXPECT_EQ(garden::mask_crc(crc), ref_mask(crc)) << crc;
    EXPECT_NE(garden::mask_crc(crc), crc) << crc;
    EXPECT_EQ(garden::unmask_crc(garden::mask_crc(crc)), crc) << crc;
  }
}

}  // namespace
