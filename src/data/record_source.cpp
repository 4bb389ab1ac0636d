#include "garden/data/record_source.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/data/csv.h"
#include "garden/data/text_readers.h"
#include "garden/data/tfrecord.h"

namespace garden::data {

std::vector<std::string> match_files(const std::string& input_path) {
  std::vector<std::string> files;
  std::size_t start = 0;
  while (start <= input_path.size()) {
    std::size_t end = input_path.find(',', start);
    if (end == std::string::npos) end = input_path.size();
    std::string item = input_path.substr(start, end - start);
    start = end + 1;
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    if (item.find_first_of("*?[") == std::string::npos) {
      if (!std::filesystem::exists(item))
        throw Error("input_path file '" + item + "' does not exist");
      files.push_back(item);
      continue;
    }
    glob_t matches{};
    const int rc = glob(item.c_str(), 0, nullptr, &matches);
    if (rc == 0)
      for (std::size_t i = 0; i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
    globfree(&matches);
    if (rc == GLOB_NOMATCH) throw Error("input_path pattern '" + item + "' matches no file");
    if (rc != 0) throw Error("input_path pattern '" + item + "' cannot be read");
  }
  if (files.empty()) throw Error("input_path '" + input_path + "' names no file");
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

namespace {

class TFRecordSource : public RecordReader {
 public:
  TFRecordSource(const std::string& path, const TFRecordReader::Options& options)
      : reader_(path, options) {}
  bool next(std::string& record) override {
    if (!reader_.read(record)) return false;
    ++records_;
    return true;
  }
  int64_t position() const override { return records_; }
  nlohmann::json state() const override {
    return {{"records", records_}, {"offset", reader_.offset()}};
  }
  // TFRecordReader cannot seek yet, so we read our way back: the cost is the
  // records before the position in this one file.
  void restore(const nlohmann::json& state) override {
    const int64_t target = state.at("records");
    std::string skipped;
    while (records_ < target)
      if (!next(skipped))
        throw Error("TFRecord file '" + reader_.path() + "' has fewer than " +
                    std::to_string(target) + " records; it changed since the checkpoint");
  }

 private:
  TFRecordReader reader_;
  int64_t records_ = 0;
};

class LineSource : public RecordReader {
 public:
  explicit LineSource(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw Error("cannot open text file '" + path + "'");
  }
  bool next(std::string& record) override {
    if (!std::getline(in_, record)) return false;
    // The byte offset of the next line, counted here because tellg() is not
    // const and fails at the end of the file.
    offset_ += static_cast<int64_t>(record.size()) + (in_.eof() ? 0 : 1);
    if (!record.empty() && record.back() == '\r') record.pop_back();
    ++records_;
    return true;
  }
  int64_t position() const override { return records_; }
  const std::string& path() const { return path_; }
  nlohmann::json state() const override { return {{"records", records_}, {"offset", offset_}}; }
  void restore(const nlohmann::json& state) override {
    offset_ = state.at("offset");
    records_ = state.at("records");
    in_.clear();
    in_.seekg(offset_);
    if (!in_) throw Error("cannot seek to byte " + std::to_string(offset_) + " of '" + path_ + "'");
  }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t records_ = 0;
  int64_t offset_ = 0;
};

class DocumentSource : public RecordReader {
 public:
  explicit DocumentSource(const std::string& path) : reader_(path) {}
  bool next(std::string& record) override {
    if (!reader_.next(sentences_)) return false;
    record.clear();
    for (std::size_t i = 0; i < sentences_.size(); ++i) {
      if (i) record += '\n';
      record += sentences_[i];
    }
    return true;
  }
  int64_t position() const override { return reader_.documents(); }
  nlohmann::json state() const override {
    return {{"records", reader_.documents()}, {"offset", reader_.offset()}};
  }
  void restore(const nlohmann::json& state) override {
    reader_.seek(state.at("offset"), state.at("records"));
  }

 private:
  DocumentReader reader_;
  std::vector<std::string> sentences_;
};

class CsvSource : public RecordReader {
 public:
  explicit CsvSource(const std::string& path) : reader_(path) {}
  bool next(std::string& record) override {
    if (!reader_.next(fields_)) return false;
    record = nlohmann::json(fields_).dump();
    ++records_;
    return true;
  }
  int64_t position() const override { return records_; }
  nlohmann::json state() const override { return {{"records", records_}}; }
  void restore(const nlohmann::json& state) override {
    const int64_t target = state.at("records");
    std::string skipped;
    while (records_ < target)
      if (!next(skipped))
        throw Error("CSV file '" + reader_.path() + "' has fewer than " + std::to_string(target) +
                    " rows; it changed since the checkpoint");
  }

 private:
  CsvReader reader_;
  std::vector<std::string> fields_;
  int64_t records_ = 0;
};

// Two text files read in lockstep: line i of the source file and line i of
// the target file make record i, joined by '\n' (a line has no '\n').
class AlignedSource : public RecordReader {
 public:
  AlignedSource(const std::string& source_path, const std::string& target_path)
      : source_(source_path), target_(target_path) {}
  bool next(std::string& record) override {
    std::string target;
    const bool has_source = source_.next(record);
    const bool has_target = target_.next(target);
    if (has_source != has_target)
      throw Error("aligned files '" + source_path() + "' and '" + target_path() +
                  "' differ in length: '" + (has_source ? target_path() : source_path()) +
                  "' ends after line " + std::to_string(records_));
    if (!has_source) return false;
    record += '\n';
    record += target;
    ++records_;
    return true;
  }
  int64_t position() const override { return records_; }
  nlohmann::json state() const override {
    return {{"records", records_}, {"source", source_.state()}, {"target", target_.state()}};
  }
  void restore(const nlohmann::json& state) override {
    records_ = state.at("records");
    source_.restore(state.at("source"));
    target_.restore(state.at("target"));
  }

 private:
  const std::string& source_path() const { return source_.path(); }
  const std::string& target_path() const { return target_.path(); }
  LineSource source_, target_;
  int64_t records_ = 0;
};

}  // namespace

std::unique_ptr<RecordReader> open_record_reader(const std::string& path,
                                                 const std::string& file_type,
                                                 const TFRecordReader::Options& tfrecord) {
  // A directory or a missing file is named before any read, whatever the type.
  check_input_file(path, "input file");
  if (file_type == "tfrecord") return std::make_unique<TFRecordSource>(path, tfrecord);
  if (file_type == "text" || file_type == "tsv") return std::make_unique<LineSource>(path);
  if (file_type == "documents") return std::make_unique<DocumentSource>(path);
  if (file_type == "csv") return std::make_unique<CsvSource>(path);
  if (file_type.rfind("aligned:", 0) == 0 && file_type.size() > 8) {
    const std::string target = aligned_target_path(path, file_type.substr(8));
    check_input_file(target, "input file");
    return std::make_unique<AlignedSource>(path, target);
  }
  if (file_type == "tfrecord_compressed") {
    TFRecordReader::Options gzip = tfrecord;
    gzip.compression = Compression::kGzip;
    return std::make_unique<TFRecordSource>(path, gzip);
  }
  throw Error("file_type '" + file_type +
              "' is not one of tfrecord, tfrecord_compressed, text, tsv, documents, csv, "
              "aligned:<extension>");
}

TFRecordReader::Options tfrecord_options(const config::DataConfig& config) {
  TFRecordReader::Options options;
  options.compression = parse_compression(config.compression_type);
  options.skip_corrupt = config.skip_corrupt_records;
  return options;
}

std::string aligned_target_path(const std::string& source_path, const std::string& extension) {
  std::filesystem::path path(source_path);
  if (!path.has_extension())
    throw Error("aligned file '" + source_path + "' has no extension to replace with '." +
                extension + "' (name the pair like train.en and train.de)");
  return path.replace_extension("." + extension).string();
}

}  // namespace garden::data
