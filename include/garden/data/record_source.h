// Where records come from: the files an input_path names, and one reader
// interface over the file types (TFRecord, text lines, documents, CSV rows)
// that can say where it is and be put back there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "garden/config/definitions.h"
#include "garden/data/tfrecord.h"

namespace garden::data {

// The files named by input_path: comma-separated paths and glob(3) patterns.
// The result is sorted and without duplicates so every process sees the same
// list. Throws garden::Error naming a pattern that matches nothing or a path
// that does not exist.
std::vector<std::string> match_files(const std::string& input_path);

// A stream of records (byte strings) from one file.
class RecordReader {
 public:
  virtual ~RecordReader() = default;
  // The next record; false at the end of the file.
  virtual bool next(std::string& record) = 0;
  // Records returned so far.
  virtual int64_t position() const = 0;
  // Where the reader is, and putting a freshly opened reader back there.
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
};

// Opens `path` as `file_type`:
//   tfrecord   one TFRecord record each (CRC-checked; `tfrecord` says how
//              it is compressed and whether corrupt records are skipped)
//   tfrecord_compressed  the same, GZIP-compressed (Model Garden's name)
//   text, tsv  one line each (without the line break)
//   documents  one document each: its sentences (one a line) joined by '\n';
//              blank lines separate documents
//   csv        one row each (after the header), as a JSON array of strings
//   aligned:EXT  parallel text in two files: `path` is one side (e.g.
//              train.en), aligned_target_path(path, EXT) the other (train.de);
//              one record per line pair, the two lines joined by '\n'. Files
//              of different lengths are an error naming both.
// Throws garden::Error for an unknown type; the readers throw naming the file.
std::unique_ptr<RecordReader> open_record_reader(const std::string& path,
                                                 const std::string& file_type,
                                                 const TFRecordReader::Options& tfrecord = {});

// How a DataConfig reads TFRecord files: its compression_type (file_type
// tfrecord_compressed means GZIP) and skip_corrupt_records.
TFRecordReader::Options tfrecord_options(const config::DataConfig& config);

// `source_path` with its last extension replaced by EXT: train.en -> train.de.
// Throws garden::Error when the path has no extension.
std::string aligned_target_path(const std::string& source_path, const std::string& extension);

}  // namespace garden::data
