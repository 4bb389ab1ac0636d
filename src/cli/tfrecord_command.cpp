#include "garden/cli/tfrecord_command.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "garden/base/file_io.h"
#include "garden/cli/files.h"
#include "garden/data/example.h"
#include "garden/data/tfrecord.h"

namespace garden {

namespace {

using data::DataError;

// Option values of all three commands; shared with the callbacks, which run during
// app.parse() and so may outlive add_tfrecord_command's frame.
struct TFRecordFlags {
  std::vector<std::string> files;
  int64_t limit = -1;
  std::string compression_type;
  bool skip_corrupt = false;
  std::string from;
  std::string to;
};

data::TFRecordReader::Options reader_options(const TFRecordFlags& flags) {
  data::TFRecordReader::Options options;
  options.compression = data::parse_compression(flags.compression_type);
  options.skip_corrupt = flags.skip_corrupt;
  return options;
}

void run_cat(const TFRecordFlags& flags) {
  const std::string& path = flags.files.front();
  check_input_file(path, "TFRecord file");
  data::TFRecordReader reader(path, reader_options(flags));
  std::string record;
  for (int64_t index = 0; flags.limit < 0 || index < flags.limit; ++index) {
    if (!reader.read(record)) break;
    data::Example example;
    try {
      example = data::parse_example(record);
    } catch (const DataError& e) {
      throw DataError("TFRecord file '" + path + "', record " + std::to_string(index) + ": " +
                      e.what());
    }
    std::cout << data::example_to_json(example).dump() << "\n";
  }
  std::cout.flush();
}

void run_count(const TFRecordFlags& flags) {
  const auto options = reader_options(flags);
  // All checked before the first count is printed.
  for (const std::string& path : flags.files) check_input_file(path, "TFRecord file");
  int64_t total = 0;
  std::string record;
  for (const std::string& path : flags.files) {
    data::TFRecordReader reader(path, options);
    int64_t count = 0;
    while (reader.read(record)) ++count;
    std::cout << count << "\t" << path << "\n";
    total += count;
  }
  std::cout << total << "\ttotal\n";
  std::cout.flush();
}

void run_write(const TFRecordFlags& flags) {
  const auto compression = data::parse_compression(flags.compression_type);
  check_input_file(flags.from, "--from");
  refuse_same_file(flags.from, "--from", flags.to, "--to");
  std::ifstream in(flags.from, std::ios::binary);
  if (!in) throw DataError("cannot open JSON lines file '" + flags.from + "' for reading");
  // Written to a temporary file, renamed over --to on success only: a bad
  // line leaves no half data set, and an existing --to as it was.
  const auto output = cli::create_output(flags.to, "--to");
  data::TFRecordWriter writer(output->temporary_path(), compression);
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    data::Example example;
    try {
      example = data::example_from_json(nlohmann::json::parse(line));
    } catch (const std::exception& e) {  // nlohmann::json::exception or DataError
      throw DataError("'" + flags.from + "' line " + std::to_string(line_number) + ": " + e.what());
    }
    writer.write(data::serialize_example(example));
  }
  if (in.bad()) throw DataError("cannot read JSON lines file '" + flags.from + "'");
  writer.close();
  output->commit();
}

void add_compression_flag(CLI::App& command, TFRecordFlags& flags) {
  command.add_option("--compression_type", flags.compression_type,
                     "\"\" (none), GZIP or ZLIB, as tf.io's compression_type");
}

}  // namespace

CLI::App* add_tfrecord_command(CLI::App& app) {
  auto flags = std::make_shared<TFRecordFlags>();
  auto* tfrecord =
      app.add_subcommand("tfrecord", "Inspect and write TFRecord files of tf.Example records");
  tfrecord->require_subcommand(1);

  auto* cat = tfrecord->add_subcommand("cat", "Print each record's tf.Example as a JSON line");
  cat->add_option("file", flags->files, "TFRecord file")->required()->expected(1);
  cat->add_option("--limit", flags->limit, "Print at most N records");
  add_compression_flag(*cat, *flags);
  cat->add_flag("--skip_corrupt", flags->skip_corrupt,
                "Skip records with a bad data CRC; stop at other corruption (warns)");
  cat->callback([flags] { run_cat(*flags); });

  auto* count = tfrecord->add_subcommand("count", "Count the records of TFRecord files");
  count->add_option("files", flags->files, "TFRecord files")->required();
  add_compression_flag(*count, *flags);
  count->add_flag("--skip_corrupt", flags->skip_corrupt,
                  "Count only intact records; stop at corruption other than a bad data CRC");
  count->callback([flags] { run_count(*flags); });

  auto* write = tfrecord->add_subcommand("write", "Write JSON lines as tf.Example records");
  write->add_option("--from", flags->from, "JSON lines file, one tf.Example per line")->required();
  write->add_option("--to", flags->to, "TFRecord file to create")->required();
  add_compression_flag(*write, *flags);
  write->callback([flags] { run_write(*flags); });

  return tfrecord;
}

}  // namespace garden
