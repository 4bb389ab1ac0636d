// Tests of the TFRecord framing. Every expected value comes from code
// written here (a bitwise CRC, a hand-made record encoder and parser) or from published
// test vectors, never from the library under test.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "garden/data/record_source.h"
#include "garden/data/tfrecord.h"
#include "reference_formats.h"

namespace {

namespace fs = std::filesystem;
using garden::data::DataError;
using namespace garden_test::reference;
using garden::data::Compression;
using garden::data::TFRecordReader;
using garden::data::TFRecordWriter;

// Parses a whole well-formed TFRecord file; any framing or CRC problem fails the test.
std::vector<std::string> ref_parse_records(const std::string& file) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < file.size()) {
    if (file.size() - pos < 12) {
      ADD_FAILURE() << "truncated header at " << pos;
      break;
    }
    const uint64_t length = read_le(file, pos, 8);
    EXPECT_EQ(read_le(file, pos + 8, 4), ref_mask(ref_crc32c(file.substr(pos, 8))))
        << "length CRC at " << pos;
    if (file.size() - pos - 12 < length + 4) {
      ADD_FAILURE() << "truncated record at " << pos;
      break;
    }
    std::string data = file.substr(pos + 12, length);
    EXPECT_EQ(read_le(file, pos + 12 + length, 4), ref_mask(ref_crc32c(data)))
        << "data CRC at " << pos;
    records.push_back(std::move(data));
    pos += 12 + length + 4;
  }
  return records;
}

// ---- files

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void spit(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// ---- zlib, called directly (not through the library) to make and check compressed
// files. The test executable is not linked against zlib itself (the library links it
// privately), so its functions are looked up in the libz.so.1 the library loaded.

struct ZlibApi {
  decltype(&::deflateInit2_) deflate_init2;
  decltype(&::deflate) deflate;
  decltype(&::deflateEnd) deflate_end;
  decltype(&::inflateInit2_) inflate_init2;
  decltype(&::inflate) inflate;
  decltype(&::inflateEnd) inflate_end;
};

const ZlibApi& zlib_api() {
  static const ZlibApi api = [] {
    void* lib = ::dlopen("libz.so.1", RTLD_NOW);
    if (lib == nullptr) throw std::runtime_error(std::string("dlopen libz.so.1: ") + ::dlerror());
    auto get = [lib](const char* name) {
      void* f = ::dlsym(lib, name);
      if (f == nullptr) throw std::runtime_error(std::string("dlsym ") + name);
      return f;
    };
    ZlibApi a;
    a.deflate_init2 = reinterpret_cast<decltype(a.deflate_init2)>(get("deflateInit2_"));
    a.deflate = reinterpret_cast<decltype(a.deflate)>(get("deflate"));
    a.deflate_end = reinterpret_cast<decltype(a.deflate_end)>(get("deflateEnd"));
    a.inflate_init2 = reinterpret_cast<decltype(a.inflate_init2)>(get("inflateInit2_"));
    a.inflate = reinterpret_cast<decltype(a.inflate)>(get("inflate"));
    a.inflate_end = reinterpret_cast<decltype(a.inflate_end)>(get("inflateEnd"));
    return a;
  }();
  return api;
}

// windowBits: 15 + 16 is a gzip wrapper (RFC 1952), 15 a zlib wrapper (RFC 1950).
int bits_for(Compression c) { return c == Compression::kGzip ? 31 : 15; }

std::string zlib_compress(const std::string& data, int window_bits) {
  const ZlibApi& z = zlib_api();
  z_stream s{};
  if (z.deflate_init2(&s, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION,
                      static_cast<int>(sizeof(z_stream))) != Z_OK) {
    throw std::runtime_error("deflateInit2");
  }
  std::string out;
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  int rc;
  do {
    char buffer[65536];
    s.next_out = reinterpret_cast<Bytef*>(buffer);
    s.avail_out = sizeof buffer;
    rc = z.deflate(&s, Z_FINISH);
    out.append(buffer, sizeof buffer - s.avail_out);
  } while (rc == Z_OK);
  z.deflate_end(&s);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate failed");
  return out;
}

// Inflates every member (a gzip file may be several members one after another).
std::string zlib_decompress(const std::string& data, int window_bits) {
  const ZlibApi& z = zlib_api();
  std::string out;
  size_t pos = 0;
  while (pos < data.size()) {
    z_stream s{};
    if (z.inflate_init2(&s, window_bits, ZLIB_VERSION, static_cast<int>(sizeof(z_stream))) !=
        Z_OK) {
      throw std::runtime_error("inflateInit2");
    }
    s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + pos));
    s.avail_in = static_cast<uInt>(data.size() - pos);
    int rc;
    do {
      char buffer[65536];
      s.next_out = reinterpret_cast<Bytef*>(buffer);
      s.avail_out = sizeof buffer;
      rc = z.inflate(&s, Z_NO_FLUSH);
      out.append(buffer, sizeof buffer - s.avail_out);
    } while (rc == Z_OK);
    pos = data.size() - s.avail_in;
    z.inflate_end(&s);
    if (rc != Z_STREAM_END) throw std::runtime_error("inflate failed: " + std::to_string(rc));
  }
  return out;
}

// A fresh directory per test, removed afterwards.
class TFRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_tfrecord_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Reads `path` until the reader throws, and checks that the DataError is a single
  // line naming the file, the byte offset of the bad record and the expected reason.
  static void expect_error_at(const std::string& path, uint64_t bad_offset,
                              const std::string& reason,
                              Compression compression = Compression::kNone) {
    TFRecordReader reader(path, compression);
    std::string record;
    try {
      while (reader.read(record)) {
      }
      ADD_FAILURE() << "no DataError reading " << path;
    } catch (const DataError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find(reason), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      const std::string offset_text = "offset " + std::to_string(bad_offset);
      const size_t at = message.find(offset_text);
      EXPECT_NE(at, std::string::npos) << message;
      if (at != std::string::npos) {
        const size_t after = at + offset_text.size();
        EXPECT_TRUE(after == message.size() ||
                    !std::isdigit(static_cast<unsigned char>(message[after])))
            << message;
      }
      EXPECT_EQ(reader.offset(), bad_offset);
      if (compression != Compression::kNone) {
        EXPECT_NE(message.find("uncompressed stream"), std::string::npos) << message;
      }
    }
  }

  // Three records; the second (the one tests damage) starts at kSecond.
  std::string write_three_records(const std::string& name) {
    const std::string path = (dir_ / name).string();
    std::string file = ref_encode_record("first") + ref_encode_record("second record") +
                       ref_encode_record("third");
    spit(path, file);
    return path;
  }
  static std::string three_records() {
    return ref_encode_record("first") + ref_encode_record("second record") +
           ref_encode_record("third");
  }
  static constexpr uint64_t kSecond = 12 + 5 + 4;
  static constexpr uint64_t kSecondDataLength = 13;

  fs::path dir_;
};

// ---- writer, checked by the independent parser

TEST_F(TFRecordTest, ADirectoryOrAMissingFileIsNamedBeforeAnyRead) {
  // As a TFRecord, text or CSV input of a pipeline: one line naming the path.
  const std::string dir = dir_.string();
  for (const char* type : {"tfrecord", "text", "csv"}) {
    try {
      garden::data::open_record_reader(dir, type);
      ADD_FAILURE() << type << ": expected an error";
    } catch (const garden::Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + dir + "' is a directory, not a file"),
                std::string::npos)
          << type << ": " << e.what();
    }
  }
  EXPECT_THROW(garden::data::TFRecordReader((dir_ / "absent").string()), garden::data::DataError);
}

TEST_F(TFRecordTest, EmptyRecordHasKnownBytes) {
  const std::string path = (dir_ / "empty_record.tfrecord").string();
  {
    TFRecordWriter writer(path);
    writer.write("");
  }
  const std::string expected("\0\0\0\0\0\0\0\0\x29\x03\x98\x07\xd8\xea\x82\xa2", 16);
  EXPECT_EQ(slurp(path), expected);
}

TEST_F(TFRecordTest, WriterOutputParsesWithIndependentParser) {
  const std::vector<std::string> records = {"", "a", "hello", std::string("with\0nul\0bytes", 14),
                                            random_bytes(100000, 3)};
  const std::string path = (dir_ / "written.tfrecord").string();
  {
    TFRecordWriter writer(path);
    for (const std::string& r : records) writer.write(r);
    writer.close();
  }
  const std::string file = slurp(path);
  std::string expected_file;
  for (const std::string& r : records) expected_file += ref_encode_record(r);
  EXPECT_EQ(file, expected_file);
  EXPECT_EQ(ref_parse_records(file), records);
}

TEST_F(TFRecordTest, FlushMakesRecordsVisibleWhileOpen) {
  const std::string path = (dir_ / "flushed.tfrecord").string();
  TFRecordWriter writer(path);
  writer.write("one");
  writer.flush();
  EXPECT_EQ(ref_parse_records(slurp(path)), std::vector<std::string>{"one"});
  writer.write("two");
  writer.flush_to_os();
  EXPECT_EQ(ref_parse_records(slurp(path)), (std::vector<std::string>{"one", "two"}));
}

TEST_F(TFRecordTest, AppendKeepsExistingRecords) {
  const std::string path = (dir_ / "appended.tfrecord").string();
  { TFRecordWriter(path).write("old"); }
  {
    TFRecordWriter writer(path, /*append=*/true);
    writer.write("new");
  }
  EXPECT_EQ(ref_parse_records(slurp(path)), (std::vector<std::string>{"old", "new"}));
  { TFRecordWriter(path).write("replaced"); }
  EXPECT_EQ(ref_parse_records(slurp(path)), std::vector<std::string>{"replaced"});
}

TEST_F(TFRecordTest, WriteAfterCloseThrows) {
  const std::string path = (dir_ / "closed.tfrecord").string();
  TFRecordWriter writer(path);
  writer.close();
  EXPECT_THROW(writer.write("late"), DataError);
  writer.close();  // closing twice is harmless
}

// ---- reader, fed by the independent encoder

TEST_F(TFRecordTest, ReaderReadsHandEncodedRecordsAndTracksOffset) {
  const std::vector<std::string> records = {"x", "", random_bytes(3000, 4), "last"};
  std::string file;
  for (const std::string& r : records) file += ref_encode_record(r);
  const std::string path = (dir_ / "encoded.tfrecord").string();
  spit(path, file);

  TFRecordReader reader(path);
  EXPECT_EQ(reader.offset(), 0u);
  uint64_t expected_offset = 0;
  std::string record = "stale";
  for (const std::string& expected : records) {
    ASSERT_TRUE(reader.read(record));
    EXPECT_EQ(record, expected);
    expected_offset += 12 + expected.size() + 4;
    EXPECT_EQ(reader.offset(), expected_offset);
  }
  EXPECT_FALSE(reader.read(record));
  EXPECT_FALSE(reader.read(record));
  EXPECT_EQ(reader.offset(), file.size());
}

TEST_F(TFRecordTest, ReaderHandlesRecordsLargerThanItsReadChunk) {
  const std::string big = random_bytes(2'500'000, 5);
  const std::string path = (dir_ / "big.tfrecord").string();
  spit(path, ref_encode_record(big) + ref_encode_record("after"));
  TFRecordReader reader(path);
  std::string record;
  ASSERT_TRUE(reader.read(record));
  EXPECT_TRUE(record == big);
  ASSERT_TRUE(reader.read(record));
  EXPECT_EQ(record, "after");
  EXPECT_FALSE(reader.read(record));
}

TEST_F(TFRecordTest, EmptyFileIsACleanEnd) {
  const std::string path = (dir_ / "empty.tfrecord").string();
  spit(path, "");
  TFRecordReader reader(path);
  std::string record;
  EXPECT_FALSE(reader.read(record));
  EXPECT_EQ(reader.offset(), 0u);
}

// ---- corruption: each error names the file and the offset of the bad record

TEST_F(TFRecordTest, BadLengthCrcNamesFileAndOffset) {
  const std::string path = write_three_records("bad_length_crc.tfrecord");
  std::string file = slurp(path);
  file[kSecond + 9] ^= 0x01;  // inside the second record's length CRC
  spit(path, file);
  expect_error_at(path, kSecond, "length CRC");
}

TEST_F(TFRecordTest, CorruptLengthIsCaughtByLengthCrc) {
  const std::string path = write_three_records("bad_length.tfrecord");
  std::string file = slurp(path);
  file[kSecond + 5] ^= 0x40;  // would claim a huge record if trusted
  spit(path, file);
  expect_error_at(path, kSecond, "length CRC");
}

TEST_F(TFRecordTest, BadDataCrcNamesFileAndOffset) {
  const std::string path = write_three_records("bad_data_crc.tfrecord");
  std::string file = slurp(path);
  file[kSecond + 12 + kSecondDataLength + 2] ^= 0x10;  // inside the stored data CRC
  spit(path, file);
  expect_error_at(path, kSecond, "data CRC");
}

TEST_F(TFRecordTest, CorruptDataIsCaughtByDataCrc) {
  const std::string path = write_three_records("bad_data.tfrecord");
  std::string file = slurp(path);
  file[kSecond + 12 + 3] ^= 0x20;
  spit(path, file);
  expect_error_at(path, kSecond, "data CRC");
}

TEST_F(TFRecordTest, TruncatedRecordNamesFileAndOffset) {
  const std::string path = write_three_records("truncated.tfrecord");
  const std::string file = slurp(path);
  // Cut inside the header, inside the data and inside the data CRC of the second record.
  for (uint64_t cut : {kSecond + 1, kSecond + 11, kSecond + 12, kSecond + 12 + 7,
                       kSecond + 12 + kSecondDataLength, kSecond + 12 + kSecondDataLength + 3}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    spit(path, file.substr(0, cut));
    expect_error_at(path, kSecond, "truncated");
  }
  // Cut exactly after the first record: a shorter but intact file.
  spit(path, file.substr(0, kSecond));
  TFRecordReader reader(path);
  std::string record;
  ASSERT_TRUE(reader.read(record));
  EXPECT_EQ(record, "first");
  EXPECT_FALSE(reader.read(record));
}

TEST_F(TFRecordTest, OpenErrorsNameFileAndReason) {
  const std::string reason = std::strerror(ENOENT);
  const std::string missing = (dir_ / "missing.tfrecord").string();
  try {
    TFRecordReader reader(missing);
    ADD_FAILURE() << "opened a missing file";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "TFRecord file '" + missing + "' does not exist");
  }
  const std::string no_dir = (dir_ / "no_such_dir" / "out.tfrecord").string();
  try {
    TFRecordWriter writer(no_dir);
    ADD_FAILURE() << "created a file in a missing directory";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(no_dir), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

// ---- compression

TEST(CompressionTest, ParsesTfIoNamesAndRejectsOthersByName) {
  using garden::data::parse_compression;
  EXPECT_EQ(parse_compression(""), Compression::kNone);
  EXPECT_EQ(parse_compression("NONE"), Compression::kNone);
  EXPECT_EQ(parse_compression("GZIP"), Compression::kGzip);
  EXPECT_EQ(parse_compression("gzip"), Compression::kGzip);
  EXPECT_EQ(parse_compression("ZLIB"), Compression::kZlib);
  EXPECT_EQ(garden::data::compression_name(Compression::kGzip), "GZIP");
  try {
    parse_compression("BZIP2");
    ADD_FAILURE() << "accepted BZIP2";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'BZIP2'"), std::string::npos) << e.what();
  }
}

TEST_F(TFRecordTest, CompressedWriterOutputInflatesWithZlibAndParses) {
  const std::vector<std::string> records = {"", "a", "hello", random_bytes(300000, 6),
                                            std::string(100000, 'z')};
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(garden::data::compression_name(c));
    const std::string path = (dir_ / ("out_" + std::to_string(bits_for(c)))).string();
    {
      TFRecordWriter writer(path, c);
      for (const std::string& r : records) writer.write(r);
      writer.close();
    }
    const std::string file = slurp(path);
    ASSERT_GE(file.size(), 2u);
    if (c == Compression::kGzip) {
      EXPECT_EQ(file.substr(0, 2), "\x1f\x8b");  // gzip magic
    } else {
      EXPECT_EQ(
          (static_cast<unsigned char>(file[0]) * 256 + static_cast<unsigned char>(file[1])) % 31,
          0);                        // zlib header check bits
      EXPECT_EQ(file[0] & 0x0F, 8);  // deflate
    }
    EXPECT_LT(file.size(), 300000u + 100000u);  // the run of 'z' compressed
    EXPECT_EQ(ref_parse_records(zlib_decompress(file, bits_for(c))), records);

    TFRecordReader reader(path, c);
    std::string record;
    for (const std::string& expected : records) {
      ASSERT_TRUE(reader.read(record));
      EXPECT_TRUE(record == expected);
    }
    EXPECT_FALSE(reader.read(record));
  }
}

TEST_F(TFRecordTest, ReaderReadsFilesCompressedByZlibDirectly) {
  const std::vector<std::string> records = {"x", random_bytes(2'500'000, 7), "", "last"};
  std::string framed;
  for (const std::string& r : records) framed += ref_encode_record(r);
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(garden::data::compression_name(c));
    const std::string path = (dir_ / "hand.tfrecord.z").string();
    spit(path, zlib_compress(framed, bits_for(c)));
    TFRecordReader reader(path, TFRecordReader::Options{c, false});
    EXPECT_EQ(reader.compression(), c);
    std::string record;
    uint64_t offset = 0;
    for (const std::string& expected : records) {
      ASSERT_TRUE(reader.read(record));
      EXPECT_TRUE(record == expected);
      offset += 12 + expected.size() + 4;
      EXPECT_EQ(reader.offset(), offset);  // in the uncompressed stream
    }
    EXPECT_FALSE(reader.read(record));
  }
}

TEST_F(TFRecordTest, FlushedGzipIsReadableWhileOpenAndAppendAddsAMember) {
  const std::string path = (dir_ / "flushed.tfrecord.gz").string();
  {
    TFRecordWriter writer(path, Compression::kGzip);
    writer.write("one");
    writer.flush_to_os();
    // A sync flush makes the data so far inflatable, though the stream has no end yet.
    const std::string partial = slurp(path);
    EXPECT_THROW(zlib_decompress(partial, 31), std::runtime_error);
    TFRecordReader reader(path, Compression::kGzip);
    std::string record;
    ASSERT_TRUE(reader.read(record));
    EXPECT_EQ(record, "one");
    EXPECT_THROW(reader.read(record), DataError);  // ends inside the gzip stream
  }
  {
    TFRecordWriter writer(path, Compression::kGzip, /*append=*/true);
    writer.write("two");
  }
  const std::string file = slurp(path);
  EXPECT_EQ(ref_parse_records(zlib_decompress(file, 31)), (std::vector<std::string>{"one", "two"}));
  TFRecordReader reader(path, Compression::kGzip);
  std::string record;
  ASSERT_TRUE(reader.read(record));
  ASSERT_TRUE(reader.read(record));
  EXPECT_EQ(record, "two");
  EXPECT_FALSE(reader.read(record));

  EXPECT_THROW(TFRecordWriter(path, Compression::kZlib, /*append=*/true), DataError);
}

TEST_F(TFRecordTest, CorruptRecordsInCompressedFilesNameUncompressedOffset) {
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(garden::data::compression_name(c));
    const std::string path = (dir_ / "corrupt.tfrecord.z").string();
    std::string framed = three_records();
    framed[kSecond + 12 + 3] ^= 0x20;
    spit(path, zlib_compress(framed, bits_for(c)));
    expect_error_at(path, kSecond, "data CRC", c);

    framed = three_records();
    framed[kSecond + 9] ^= 0x01;
    spit(path, zlib_compress(framed, bits_for(c)));
    expect_error_at(path, kSecond, "length CRC", c);

    // A record stream cut inside the second record, then properly compressed.
    spit(path, zlib_compress(three_records().substr(0, kSecond + 14), bits_for(c)));
    expect_error_at(path, kSecond, "truncated", c);
  }
}

TEST_F(TFRecordTest, DamagedCompressedStreamsFailNamingFile) {
  const std::string framed = three_records();
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(garden::data::compression_name(c));
    const std::string compressed = zlib_compress(framed, bits_for(c));
    const std::string path = (dir_ / "damaged.z").string();
    // Cut short: the compressed stream has no end.
    spit(path, compressed.substr(0, compressed.size() - 6));
    {
      TFRecordReader reader(path, c);
      std::string record;
      try {
        while (reader.read(record)) {
        }
        ADD_FAILURE() << "no error for a cut compressed stream";
      } catch (const DataError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find(path), std::string::npos) << message;
        EXPECT_NE(message.find("truncated"), std::string::npos) << message;
        EXPECT_NE(message.find("uncompressed stream"), std::string::npos) << message;
      }
    }
    // Not compressed at all.
    spit(path, framed);
    try {
      TFRecordReader reader(path, c);
      std::string record;
      reader.read(record);
      ADD_FAILURE() << "read an uncompressed file as compressed";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("corrupt compressed data"), std::string::npos)
          << e.what();
    }
  }
}

// ---- skip_corrupt

TEST_F(TFRecordTest, SkipCorruptSkipsBadDataCrcAndContinues) {
  for (Compression c : {Compression::kNone, Compression::kGzip}) {
    SCOPED_TRACE(garden::data::compression_name(c));
    std::string framed = three_records();
    framed[kSecond + 12 + kSecondDataLength + 1] ^= 0x04;  // second record's data CRC
    const std::string path = (dir_ / "skip_data.tfrecord").string();
    spit(path, c == Compression::kNone ? framed : zlib_compress(framed, bits_for(c)));
    TFRecordReader reader(path, TFRecordReader::Options{c, true});
    std::string record;
    ASSERT_TRUE(reader.read(record));
    EXPECT_EQ(record, "first");
    ASSERT_TRUE(reader.read(record));
    EXPECT_EQ(record, "third");
    EXPECT_FALSE(reader.read(record));
    EXPECT_EQ(reader.corrupt_records(), 1);
    EXPECT_EQ(reader.offset(), framed.size());
  }
}

TEST_F(TFRecordTest, SkipCorruptEndsFileAtBadLengthCrcOrTruncation) {
  std::string framed = three_records();
  framed[kSecond + 2] ^= 0x01;  // second record's length
  const std::string path = (dir_ / "skip_length.tfrecord").string();
  spit(path, framed);
  {
    TFRecordReader reader(path, TFRecordReader::Options{Compression::kNone, true});
    std::string record;
    ASSERT_TRUE(reader.read(record));
    EXPECT_EQ(record, "first");
    EXPECT_FALSE(reader.read(record));  // "third" is not trusted
    EXPECT_FALSE(reader.read(record));
    EXPECT_EQ(reader.corrupt_records(), 1);
    EXPECT_EQ(reader.offset(), kSecond);
  }
  spit(path, three_records().substr(0, kSecond + 20));
  {
    TFRecordReader reader(path, TFRecordReader::Options{Compression::kNone, true});
    std::string record;
    ASSERT_TRUE(reader.read(record));
    EXPECT_FALSE(reader.read(record));
    EXPECT_EQ(reader.corrupt_records(), 1);
  }
}

}  // namespace
