// TFRecord files: the record framing of TensorFlow's data files and TensorBoard's
// event files. Each record is
//
//   uint64 length (little-endian)
//   uint32 masked CRC-32C of those 8 length bytes
//   length bytes of data
//   uint32 masked CRC-32C of the data
//
// Only uncompressed files are handled so far. The framing code talks to a byte stream
// (detail::ByteSink / detail::ByteSource, defined in tfrecord.cpp) rather than to the
// file itself, so GZIP/ZLIB can be added as further streams behind the same classes.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace garden::data {

// Unreadable, corrupt or unwritable data files. The message is one line naming the
// file and, for a bad record, the byte offset where that record starts.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
class ByteSink;
class ByteSource;
}  // namespace detail

class TFRecordWriter {
 public:
  // Creates (or truncates) the file; with append, adds records after existing ones.
  // Throws DataError naming the file and the system's reason if it cannot be opened.
  explicit TFRecordWriter(const std::string& path, bool append = false);
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
  // Writes out what is buffered and closes the file (no fsync). Further writes throw.
  void close();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<detail::ByteSink> sink_;
};

class TFRecordReader {
 public:
  // Throws DataError naming the file and the system's reason if it cannot be opened.
  explicit TFRecordReader(const std::string& path);
  ~TFRecordReader();

  TFRecordReader(TFRecordReader&&) noexcept;
  TFRecordReader& operator=(TFRecordReader&&) noexcept;
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Reads the next record into `record`. Returns false at a clean end of file (no bytes
  // after the last complete record). Throws DataError on a bad length CRC, a bad data
  // CRC or a truncated record; offset() then still points at the start of that record,
  // and the reader cannot go on (TFRecord has no resynchronisation marker).
  bool read(std::string& record);

  // Byte offset of the next record, i.e. the number of bytes consumed so far.
  uint64_t offset() const { return offset_; }

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail_at_record(const std::string& what) const;

  std::string path_;
  std::unique_ptr<detail::ByteSource> source_;
  uint64_t offset_ = 0;
};

}  // namespace garden::data
