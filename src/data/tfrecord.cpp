#include "garden/data/tfrecord.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <system_error>
#include <vector>

#include "garden/base/crc32c.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"

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

// zlib's windowBits: 15 is the largest window (what TensorFlow writes); +16 asks for a
// gzip header and trailer instead of zlib's.
int window_bits(Compression compression) {
  return compression == Compression::kGzip ? 15 + 16 : 15;
}

// Compressed bytes are moved between zlib and the file in buffers of this size.
constexpr size_t kZlibBuffer = size_t{256} << 10;

}  // namespace

Compression parse_compression(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper.empty() || upper == "NONE") return Compression::kNone;
  if (upper == "GZIP") return Compression::kGzip;
  if (upper == "ZLIB") return Compression::kZlib;
  throw DataError("unknown TFRecord compression_type '" + name + "': expected \"\", GZIP or ZLIB");
}

std::string compression_name(Compression compression) {
  switch (compression) {
    case Compression::kGzip:
      return "GZIP";
    case Compression::kZlib:
      return "ZLIB";
    case Compression::kNone:
      break;
  }
  return "";
}

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

  // A call a signal interrupted (EINTR: stdio gives up and marks an error)
  // goes on where it stopped.
  void write(const void* data, size_t n) override {
    const char* bytes = static_cast<const char*>(data);
    while (n > 0) {
      const size_t wrote = std::fwrite(bytes, 1, n, file_);
      bytes += wrote;
      n -= wrote;
      if (n == 0) break;
      if (errno != EINTR) fail("cannot write to", errno);
      std::clearerr(file_);
    }
  }

  void flush(bool sync) override {
    while (std::fflush(file_) != 0) {
      if (errno != EINTR) fail("cannot flush", errno);
      std::clearerr(file_);
    }
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

  // Short only at the end of the file; a read a signal interrupted (EINTR)
  // goes on, never taken for the end of the data.
  size_t read(void* data, size_t n) override {
    char* bytes = static_cast<char*>(data);
    size_t got = 0;
    while (got < n) {
      got += std::fread(bytes + got, 1, n - got, file_);
      if (got == n || !std::ferror(file_)) break;
      if (errno != EINTR)
        throw DataError("cannot read TFRecord file " + quote_path(path_) + ": " +
                        system_reason(errno));
      std::clearerr(file_);
    }
    return got;
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Deflates into a FileSink: a GZIP or ZLIB stream, ended by close().
class DeflateSink final : public detail::ByteSink {
 public:
  DeflateSink(const std::string& path, Compression compression, bool append)
      : path_(path), name_(compression_name(compression)), out_(kZlibBuffer) {
    if (append && compression == Compression::kZlib) {
      throw DataError("cannot append to ZLIB TFRecord file " + quote_path(path) +
                      ": a ZLIB stream cannot be continued (GZIP files can)");
    }
    // Level 6 (zlib's default), memLevel 8: TensorFlow's own defaults.
    if (deflateInit2(&stream_, 6, Z_DEFLATED, window_bits(compression), 8, Z_DEFAULT_STRATEGY) !=
        Z_OK) {
      throw DataError("cannot start " + name_ + " compression for " + quote_path(path));
    }
    initialized_ = true;
    file_ = std::make_unique<FileSink>(path, append);
  }

  ~DeflateSink() override {
    // An unclosed writer still leaves a complete stream behind if it can.
    if (file_) {
      try {
        close();
      } catch (const DataError&) {
      }
    }
    if (initialized_) deflateEnd(&stream_);
  }

  void write(const void* data, size_t n) override {
    if (n == 0) return;
    // zlib's avail_in is 32-bit: feed huge records in pieces.
    auto* bytes = static_cast<const unsigned char*>(data);
    while (n > 0) {
      const size_t piece = std::min<size_t>(n, size_t{1} << 30);
      stream_.next_in = const_cast<Bytef*>(bytes);
      stream_.avail_in = static_cast<uInt>(piece);
      deflate_all(Z_NO_FLUSH);
      bytes += piece;
      n -= piece;
    }
  }

  void flush(bool sync) override {
    deflate_all(Z_SYNC_FLUSH);
    file_->flush(sync);
  }

  void close() override {
    if (!file_) return;
    try {
      deflate_all(Z_FINISH);
    } catch (...) {
      file_.reset();  // closed either way; a failed close is not retried
      throw;
    }
    std::unique_ptr<FileSink> file = std::move(file_);
    file->close();
  }

 private:
  // Runs deflate until it has taken all input (and, for a flush or finish, emitted
  // everything), handing each full output buffer to the file.
  void deflate_all(int mode) {
    for (;;) {
      stream_.next_out = out_.data();
      stream_.avail_out = static_cast<uInt>(out_.size());
      const int rc = deflate(&stream_, mode);
      if (rc == Z_STREAM_ERROR) {
        throw DataError(name_ + " compression failed for " + quote_path(path_));
      }
      file_->write(out_.data(), out_.size() - stream_.avail_out);
      if (mode == Z_FINISH ? rc == Z_STREAM_END : stream_.avail_in == 0 && stream_.avail_out != 0) {
        return;
      }
    }
  }

  std::string path_;
  std::string name_;
  z_stream stream_{};
  bool initialized_ = false;
  std::vector<unsigned char> out_;
  std::unique_ptr<FileSink> file_;
};

// Inflates a FileSource. Several GZIP members one after another (gzip's concatenation,
// or appending to a GZIP TFRecord file) read as one stream.
class InflateSource final : public detail::ByteSource {
 public:
  InflateSource(const std::string& path, Compression compression)
      : path_(path), name_(compression_name(compression)), in_(kZlibBuffer) {
    if (inflateInit2(&stream_, window_bits(compression)) != Z_OK) {
      throw DataError("cannot start " + name_ + " decompression for " + quote_path(path));
    }
    initialized_ = true;
    file_ = std::make_unique<FileSource>(path);
  }

  ~InflateSource() override {
    if (initialized_) inflateEnd(&stream_);
  }

  size_t read(void* data, size_t n) override {
    auto* out = static_cast<unsigned char*>(data);
    size_t done = 0;
    while (done < n && !finished_) {
      if (stream_.avail_in == 0 && !refill()) {
        if (member_started_) {
          fail("compressed stream is truncated (ends inside a " + name_ + " stream)");
        }
        finished_ = true;  // clean end between members
        break;
      }
      const size_t piece = std::min<size_t>(n - done, size_t{1} << 30);
      stream_.next_out = out + done;
      stream_.avail_out = static_cast<uInt>(piece);
      member_started_ = true;
      const int rc = inflate(&stream_, Z_NO_FLUSH);
      done += piece - stream_.avail_out;
      uncompressed_ += piece - stream_.avail_out;
      if (rc == Z_STREAM_END) {
        // Another member may follow; anything else after a finished stream is not ours.
        member_started_ = false;
        if (inflateReset(&stream_) != Z_OK) fail("cannot restart decompression");
        if (window_bits_zlib_only() && (stream_.avail_in > 0 || refill())) {
          fail("unexpected bytes after the end of the ZLIB stream");
        }
      } else if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR) {
        fail(std::string("corrupt compressed data: ") +
             (stream_.msg != nullptr ? stream_.msg : "zlib error " + std::to_string(rc)));
      } else if (rc == Z_BUF_ERROR && stream_.avail_in != 0) {
        fail("decompression made no progress");
      }
    }
    return done;
  }

 private:
  bool window_bits_zlib_only() const { return name_ == "ZLIB"; }

  bool refill() {
    const size_t got = file_->read(in_.data(), in_.size());
    stream_.next_in = in_.data();
    stream_.avail_in = static_cast<uInt>(got);
    return got > 0;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(name_ + " TFRecord file " + quote_path(path_) + ": " + what +
                    " after byte offset " + std::to_string(uncompressed_) +
                    " of the uncompressed stream");
  }

  std::string path_;
  std::string name_;
  z_stream stream_{};
  bool initialized_ = false;
  bool member_started_ = false;  // inflate has begun a stream that has not ended yet
  bool finished_ = false;
  uint64_t uncompressed_ = 0;
  std::vector<unsigned char> in_;
  std::unique_ptr<FileSource> file_;
};

std::unique_ptr<detail::ByteSink> make_sink(const std::string& path, Compression compression,
                                            bool append) {
  if (compression == Compression::kNone) return std::make_unique<FileSink>(path, append);
  return std::make_unique<DeflateSink>(path, compression, append);
}

std::unique_ptr<detail::ByteSource> make_source(const std::string& path, Compression compression) {
  if (compression == Compression::kNone) return std::make_unique<FileSource>(path);
  return std::make_unique<InflateSource>(path, compression);
}

}  // namespace

// ---- TFRecordWriter

TFRecordWriter::TFRecordWriter(const std::string& path, bool append)
    : TFRecordWriter(path, Compression::kNone, append) {}

TFRecordWriter::TFRecordWriter(const std::string& path, Compression compression, bool append)
    : path_(path), sink_(make_sink(path, compression, append)) {}

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

TFRecordReader::TFRecordReader(const std::string& path) : TFRecordReader(path, Options{}) {}

TFRecordReader::TFRecordReader(const std::string& path, Compression compression)
    : TFRecordReader(path, Options{compression, false}) {}

namespace {
// A directory or a missing file is named before any read.
const std::string& checked_input(const std::string& path) {
  try {
    check_input_file(path, "TFRecord file");
  } catch (const Error& e) {
    throw DataError(e.what());
  }
  return path;
}
}  // namespace

TFRecordReader::TFRecordReader(const std::string& path, const Options& options)
    : path_(path),
      options_(options),
      source_(make_source(checked_input(path), options.compression)) {}

TFRecordReader::~TFRecordReader() = default;
TFRecordReader::TFRecordReader(TFRecordReader&&) noexcept = default;
TFRecordReader& TFRecordReader::operator=(TFRecordReader&&) noexcept = default;

std::string TFRecordReader::describe_record(const std::string& what) const {
  if (options_.compression == Compression::kNone) {
    return "TFRecord file " + quote_path(path_) + ": record at byte offset " +
           std::to_string(offset_) + ": " + what;
  }
  return compression_name(options_.compression) + " TFRecord file " + quote_path(path_) +
         ": record at byte offset " + std::to_string(offset_) +
         " of the uncompressed stream: " + what;
}

void TFRecordReader::fail_at_record(const std::string& what) const {
  throw DataError(describe_record(what));
}

void TFRecordReader::corrupt(const std::string& what) {
  if (!options_.skip_corrupt) fail_at_record(what);
  ++corrupt_records_;
  log_warning() << describe_record(what) << " (skip_corrupt: "
                << (what == "bad data CRC" ? "record skipped)" : "rest of the file skipped)");
}

bool TFRecordReader::read(std::string& record) {
  if (!source_) throw DataError("cannot read moved-from TFRecordReader of " + quote_path(path_));

  // With skip_corrupt, a bad data CRC loops to the next record; anything that leaves
  // the framing untrustworthy ends the file.
  while (!ended_) {
    unsigned char header[kHeaderSize];
    const size_t header_got = source_->read(header, sizeof header);
    if (header_got == 0) return false;
    if (header_got < sizeof header) {
      corrupt("truncated record: file ends " + std::to_string(header_got) +
              " bytes into the 12-byte header");
      break;
    }
    // Checked before the length is used, so a corrupt length never drives the reads.
    if (masked_crc(header, 8) != load_le32(header + 8)) {
      // The usual cause at offset 0: a compressed file read without compression_type.
      const bool gzip_magic = header[0] == 0x1f && header[1] == 0x8b;
      if (offset_ == 0 && gzip_magic && options_.compression == Compression::kNone) {
        corrupt("bad length CRC (the file starts like GZIP: set compression_type GZIP?)");
        break;
      }
      corrupt("bad length CRC");
      break;
    }
    const uint64_t length = load_le64(header);

    record.clear();
    bool truncated = false;
    for (uint64_t remaining = length; remaining > 0;) {
      const size_t chunk = remaining < kReadChunk ? static_cast<size_t>(remaining) : kReadChunk;
      const size_t done = record.size();
      record.resize(done + chunk);
      const size_t got = source_->read(record.data() + done, chunk);
      if (got < chunk) {
        corrupt("truncated record: file ends after " + std::to_string(done + got) + " of " +
                std::to_string(length) + " data bytes");
        truncated = true;
        break;
      }
      remaining -= chunk;
    }
    if (truncated) break;

    unsigned char footer[kFooterSize];
    if (source_->read(footer, sizeof footer) < sizeof footer) {
      corrupt("truncated record: file ends inside the data CRC");
      break;
    }
    const bool data_ok = masked_crc(record.data(), record.size()) == load_le32(footer);
    if (!data_ok) corrupt("bad data CRC");  // returns only with skip_corrupt
    offset_ += kHeaderSize + length + kFooterSize;
    if (data_ok) return true;
  }
  ended_ = true;
  record.clear();
  return false;
}

}  // namespace garden::data
