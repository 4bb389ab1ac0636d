// Input-pipeline benchmark. Prints one JSON line per measurement.
//
//   data_bench [path/to/train.tsv] [--mb 100]
//
// (a) TFRecord read throughput: writes ~100 MB of tf.Examples of about 1 KB
//     (two int64 lists of token ids and a text feature) to a temp dir and
//     reads them back with CRC checks, then again parsing each tf.Example.
// (b) Translation batching (wmt_dataloader's token-budget buckets, budget 4096,
//     max_length 64) on a parallel TSV. Tokens come from a whitespace split
//     hashed into 32000 ids: a stand-in for the SentencePiece tokenizer.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "garden/data/example.h"
#include "garden/data/pipeline.h"
#include "garden/data/text_readers.h"
#include "garden/data/tfrecord.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A translation-like tf.Example of about 1 KB.
std::string make_example(std::mt19937_64& engine) {
  std::uniform_int_distribution<int64_t> id(3, 31999);
  std::vector<int64_t> inputs(120), targets(120);
  for (auto& v : inputs) v = id(engine);
  for (auto& v : targets) v = id(engine);
  std::string text(300, ' ');
  for (auto& c : text) c = static_cast<char>('a' + engine() % 26);
  return garden::data::serialize_example(
      {{"inputs", garden::data::FeatureValue::of_ints(std::move(inputs))},
       {"targets", garden::data::FeatureValue::of_ints(std::move(targets))},
       {"text", garden::data::FeatureValue::of_bytes({text})}});
}

void tfrecord_read(int64_t megabytes) {
  const fs::path dir = fs::temp_directory_path() / "garden_data_bench";
  fs::create_directories(dir);
  const std::string path = (dir / "examples.tfrecord").string();
  {
    std::mt19937_64 engine(1);
    garden::data::TFRecordWriter writer(path);
    uint64_t written = 0;
    while (written < static_cast<uint64_t>(megabytes) * 1000000) {
      const std::string record = make_example(engine);
      writer.write(record);
      written += record.size() + 16;
    }
    writer.close();
  }
  const double file_mb = static_cast<double>(fs::file_size(path)) / 1e6;
  for (const bool parse : {false, true}) {
    const auto start = Clock::now();
    garden::data::TFRecordReader reader(path);
    std::string record;
    int64_t count = 0;
    uint64_t checksum = 0;
    while (reader.read(record)) {
      ++count;
      if (parse)
        checksum +=
            static_cast<uint64_t>(garden::data::parse_example(record).at("inputs").ints.front());
      else
        checksum += static_cast<uint8_t>(record[0]);
    }
    const double elapsed = seconds_since(start);
    std::cout << nlohmann::json{{"benchmark",
                                 parse ? "tfrecord_read_crc_parse_example" : "tfrecord_read_crc"},
                                {"records", count},
                                {"mean_record_bytes", file_mb * 1e6 / count},
                                {"file_mb", file_mb},
                                {"seconds", elapsed},
                                {"records_per_s", count / elapsed},
                                {"mb_per_s", file_mb / elapsed},
                                {"checksum", checksum}}
                     .dump()
              << std::endl;
  }
  fs::remove_all(dir);
}

at::Tensor whitespace_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find(' ', start), text.size());
    if (end > start)
      ids.push_back(static_cast<int64_t>(std::hash<std::string_view>{}(
                                             std::string_view(text).substr(start, end - start)) %
                                         31998) +
                    2);
    start = end + 1;
  }
  ids.push_back(1);  // EOS, as the SentencePiece tokenizer adds
  return torch::tensor(ids, torch::kLong);
}

void translation_batching(const std::string& tsv, bool training, int64_t max_batches) {
  garden::config::DataConfig config;
  config.input_path = tsv;
  config.file_type = "tsv";
  config.is_training = training;
  config.global_batch_size = 4096;
  config.seed = 1;
  garden::data::BatchingOptions batching;
  batching.mode = garden::data::BatchMode::kBucketByLength;
  batching.max_length = 64;
  garden::data::InputPipeline pipeline(
      config,
      [](const std::string& line) {
        const auto fields = garden::data::split_fields(line);
        return garden::Batch{{"inputs", whitespace_ids(fields.at(0))},
                             {"targets", whitespace_ids(fields.size() > 1 ? fields[1] : "")}};
      },
      batching);
  const auto start = Clock::now();
  int64_t batches = 0, examples = 0, tokens = 0;
  while (batches < max_batches) {
    auto batch = pipeline.next();
    if (!batch) break;
    ++batches;
    examples += batch->at("inputs").size(0);
    tokens += batch->at("inputs").numel() + batch->at("targets").numel();
  }
  const double elapsed = seconds_since(start);
  const auto state_start = Clock::now();
  const auto state_bytes = pipeline.state().dump().size();
  const double state_seconds = seconds_since(state_start);
  std::cout << nlohmann::json{{"benchmark", "translation_bucket_batching"},
                              {"mode", training ? "train" : "eval"},
                              {"token_budget", 4096},
                              {"max_length", 64},
                              {"batches", batches},
                              {"examples", examples},
                              {"padded_tokens", tokens},
                              {"seconds", elapsed},
                              {"batches_per_s", batches / elapsed},
                              {"examples_per_s", examples / elapsed},
                              {"state_json_bytes", state_bytes},
                              {"state_seconds", state_seconds}}
                   .dump()
            << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tsv;
  int64_t megabytes = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mb" && i + 1 < argc)
      megabytes = std::stoll(argv[++i]);
    else
      tsv = arg;
  }
  try {
    at::set_num_threads(1);
    tfrecord_read(megabytes);
    if (!tsv.empty()) {
      translation_batching(tsv, false, 1 << 30);
      translation_batching(tsv, true, 2000);
    }
  } catch (const std::exception& e) {
    std::cerr << "data_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
