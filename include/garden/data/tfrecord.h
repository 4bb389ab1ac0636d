// TFRecord files: the record framing of TensorFlow's data files and TensorBoard's
// event files. Each record is
//
//   uint64 length (little-endian)
//   uint32 masked CRC-32C of those 8 length bytes
//   length bytes of data
//   uint32 masked CRC-32C of the data
//
// The whole record stream may be compressed as one GZIP (RFC 1952) or ZLIB (RFC 1950)
// stream, tf.io's compression_type "GZIP" / "ZLIB". The framing code talks to a byte
// stream (detail::ByteSink / detail::ByteSource, defined in tfrecord.cpp) that inflates
// or deflates piece by piece, so a file is never held in memory whole.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "garden/base/error.h"

namespace garden::data {

// Unreadable, corrupt or unwritable data files. The message is one line naming the
// file and, for a bad record, the byte offset where that record starts.
class DataError : public Error {
 public:
  using Error::Error;
};

// How the record stream is stored in the file: tf.io's compression_type.
enum class Compression { kNone, kGzip, kZlib };

// "" or "NONE" -> kNone, "GZIP" -> kGzip, "ZLIB" -> kZlib (any letter case, as config
// files and flags spell them). Throws DataError naming the value otherwise.
Compression parse_compression(const std::string& name);
// The tf.io spelling: "", "GZIP" or "ZLIB".
std::string compression_name(Compression compression);

namespace detail {
class ByteSink;
class ByteSource;
}  // namespace detail

class TFRecordWriter {
 public:
  // Creates (or truncates) the file; with append, adds records after existing ones.
  // Throws DataError naming the file and the system's reason if it cannot be opened.
  explicit TFRecordWriter(const std::string& path, bool append = false);
  // With GZIP, append adds a further gzip member, which gzip tools and our reader read
  // as one stream. ZLIB streams cannot be concatenated: append with kZlib throws.
  TFRecordWriter(const std::string& path, Compression compression, bool append = false);
  ~TFRecordWriter();  // closes; errors there are swallowed, call close() to see them

  TFRecordWriter(TFRecordWriter&&) noexcept;
  TFRecordWriter& operator=(TFRecordWriter&&) noexcept;
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  void write(std::string_view record);

  // Hands buffered records to the OS (fflush) and waits until they are on disk (fsync).
  void flush();
  // Hands buffered records to the OS only: other processes (TensorBoard) see them, but
  // they may not survive a crash of the machine. Much cheaper than flush().
  void flush_to_os();
  // Compressed files: flushing ends a deflate block (Z_SYNC_FLUSH), so everything
  // written so far can be decompressed; frequent flushes cost compression ratio.
  //
  // Writes out what is buffered (ending a compressed stream) and closes the file (no
  // fsync). Further writes throw.
  void close();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<detail::ByteSink> sink_;
};

class TFRecordReader {
 public:
  struct Options {
    Compression compression = Compression::kNone;
    // Skip corrupt records instead of throwing (DataConfig::skip_corrupt_records). A
    // bad data CRC skips that one record: its length passed its own CRC, so the next
    // record starts where it says. A bad length CRC or a truncated record leaves
    // nothing trustworthy to resynchronise on, so it ends the file. Each is counted in
    // corrupt_records() and logged as a warning naming the file and offset.
    bool skip_corrupt = false;
  };

  // Throws DataError naming the file and the system's reason if it cannot be opened.
  explicit TFRecordReader(const std::string& path);
  TFRecordReader(const std::string& path, Compression compression);
  TFRecordReader(const std::string& path, const Options& options);
  ~TFRecordReader();

  TFRecordReader(TFRecordReader&&) noexcept;
  TFRecordReader& operator=(TFRecordReader&&) noexcept;
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Reads the next record into `record`. Returns false at a clean end of file (no bytes
  // after the last complete record). Throws DataError on a bad length CRC, a bad data
  // CRC or a truncated record; offset() then still points at the start of that record,
  // and the reader cannot go on (TFRecord has no resynchronisation marker). With
  // Options::skip_corrupt it skips or stops instead (see Options). Compressed files also
  // throw DataError when the compressed stream itself is corrupt or cut short.
  bool read(std::string& record);

  // Byte offset of the next record, i.e. the number of bytes consumed so far. For a
  // compressed file it counts uncompressed bytes (the record stream's offset), and
  // error messages say so.
  uint64_t offset() const { return offset_; }

  // Records skipped or files ended early because of corruption (skip_corrupt only).
  int64_t corrupt_records() const { return corrupt_records_; }

  Compression compression() const { return options_.compression; }

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail_at_record(const std::string& what) const;
  std::string describe_record(const std::string& what) const;
  // A corrupt record: throws, or with skip_corrupt counts and logs it.
  void corrupt(const std::string& what);

  std::string path_;
  Options options_;
  std::unique_ptr<detail::ByteSource> source_;
  uint64_t offset_ = 0;
  int64_t corrupt_records_ = 0;
  bool ended_ = false;  // skip_corrupt gave up on the rest of the file
};

}  // namespace garden::data
