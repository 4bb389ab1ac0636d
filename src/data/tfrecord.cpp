#include "garden/data/tfrecord.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

#include "garden/data/crc32c.h"

namespace garden::data {

namespace {

constexpr size_t kHeaderSize = 12;  // uint64 length + uint32 masked CRC of the length
constexpr size_t kFooterSize = 4;   // uint32 masked CRC of the data
// Record data is read in pieces of at most this size, so a length field that passed its
// CRC but lies about the file (a truncated file) cannot make us allocate gigabytes.
constexpr size_t kReadChunk = size_t{1} << 20;

std::string system_reason(int err) { return std::generic_category().message(err); }

std::string quote_path(const std::string& path) { return "'" + path + "'"; }

void store_le64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

void store_le32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t load_le32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t masked_crc(const void* data, size_t n) { return mask_crc(crc32c(data, n)); }

}  // namespace

namespace detail {

// The byte stream under the record framing of a TFRecordWriter. Compressed formats
// will be further implementations (wrapping a FileSink), leaving the framing alone.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, size_t n) = 0;
  // Pushes buffered bytes to the OS; with sync, also waits until they are on disk.
  virtual void flush(bool sync) = 0;
  virtual void close() = 0;
};

// The byte stream under the record framing of a TFRecordReader.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n bytes; returns fewer only at the end of the stream.
  virtual size_t read(void* data, size_t n) = 0;
};

}  // namespace detail

namespace {

class FileSink final : public detail::ByteSink {
 public:
  FileSink(const std::string& path, bool append) : path_(path) {
    file_ = std::fopen(path.c_str(), append ? "ab" : "wb");
    if (file_ == nullptr) {
      throw DataError("cannot open TFRecord file " + quote_path(path_) +
                      " for writing: " + system_reason(errno));
    }
  }

  ~FileSink() override {
    if (file_ != nullptr) std::fclose(file_);
  }

  void write(const void* data, size_t n) override {
    if (n > 0 && std::fwrite(data, 1, n, file_) != n) fail("cannot write to", errno);
  }

  void flush(bool sync) override {
    if (std::fflush(file_) != 0) fail("cannot flush", errno);
    if (sync && ::fsync(::fileno(file_)) != 0) fail("cannot fsync", errno);
  }

  void close() override {
    std::FILE* file = file_;
    file_ = nullptr;  // even a failing fclose releases the stream
    if (std::fclose(file) != 0) fail("cannot close", errno);
  }

 private:
  [[noreturn]] void fail(const char* action, int err) const {
    throw DataError(std::string(action) + " TFRecord file " + quote_path(path_) + ": " +
                    system_reason(err));
  }

  std::string path_;
  std::FILE* file_ = nullptr;
};

class FileSource final : public detail::ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      throw DataError("cannot open TFRecord file " + quote_path(path_) +
                      " for reading: " + system_reason(errno));
    }
  }

  ~FileSource() override { std::fclose(file_); }

  size_t read(void* data, size_t n) override {
    const size_t got = std::fread(data, 1, n, file_);
    if (got < n && std::ferror(file_)) {
      throw DataError("cannot read TFRecord file " + quote_path(path_) + ": " + system_reason(errno));
    }
    return got;
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace

// ---- TFRecordWriter

TFRecordWriter::TFRecordWriter(const std::string& path, bool append)
    : path_(path), sink_(std::make_unique<FileSink>(path, append)) {}

TFRecordWriter::~TFRecordWriter() = default;  // FileSink's destructor closes the file
TFRecordWriter::TFRecordWriter(TFRecordWriter&&) noexcept = default;
TFRecordWriter& TFRecordWriter::operator=(TFRecordWriter&&) noexcept = default;

void TFRecordWriter::write(std::string_view record) {
  if (!sink_) throw DataError("cannot write to closed TFRecord file " + quote_path(path_));
  unsigned char header[kHeaderSize];
  store_le64(header, record.size());
  store_le32(header + 8, masked_crc(header, 8));
  unsigned char footer[kFooterSize];
  store_le32(footer, masked_crc(record.data(), record.size()));
  sink_->write(header, sizeof header);
  sink_->write(record.data(), record.size());
  sink_->write(footer, sizeof footer);
}

void TFRecordWriter::flush() {
  if (sink_) sink_->flush(/*sync=*/true);
}

void TFRecordWriter::flush_to_os() {
  if (sink_) sink_->flush(/*sync=*/false);
}

void TFRecordWriter::close() {
  // Released first so that the writer counts as closed even if closing fails.
  std::unique_ptr<detail::ByteSink> sink = std::move(sink_);
  if (sink) sink->close();
}

// ---- TFRecordReader

TFRecordReader::TFRecordReader(const std::string& path)
    : path_(path), source_(std::make_unique<FileSource>(path)) {}

TFRecordReader::~TFRecordReader() = default;
TFRecordReader::TFRecordReader(TFRecordReader&&) noexcept = default;
TFRecordReader& TFRecordReader::operator=(TFRecordReader&&) noexcept = default;

void TFRecordReader::fail_at_record(const std::string& what) const {
  throw DataError("TFRecord file " + quote_path(path_) + ": record at byte offset " +
                  std::to_string(offset_) + ": " + what);
}

bool TFRecordReader::read(std::string& record) {
  if (!source_) throw DataError("cannot read moved-from TFRecordReader of " + quote_path(path_));

  unsigned char header[kHeaderSize];
  const size_t header_got = source_->read(header, sizeof header);
  if (header_got == 0) return false;
  if (header_got < sizeof header) {
    fail_at_record("truncated record: file ends " + std::to_string(header_got) +
                   " bytes into the 12-byte header");
  }
  // Checked before the length is used, so a corrupt length never drives the reads.
  if (masked_crc(header, 8) != load_le32(header + 8)) fail_at_record("bad length CRC");
  const uint64_t length = load_le64(header);

  record.clear();
  for (uint64_t remaining = length; remaining > 0;) {
    const size_t chunk = remaining < kReadChunk ? static_cast<size_t>(remaining) : kReadChunk;
    const size_t done = record.size();
    record.resize(done + chunk);
    const size_t got = source_->read(record.data() + done, chunk);
    if (got < chunk) {
      fail_at_record("truncated record: file ends after " + std::to_string(done + got) + " of " +
                     std::to_string(length) + " data bytes");
    }
    remaining -= chunk;
  }

  unsigned char footer[kFooterSize];
  if (source_->read(footer, sizeof footer) < sizeof footer) {
    fail_at_record("truncated record: file ends inside the data CRC");
  }
  if (masked_crc(record.data(), record.size()) != load_le32(footer)) {
    fail_at_record("bad data CRC");
  }
  offset_ += kHeaderSize + length + kFooterSize;
  return true;
}

}  // namespace garden::data
