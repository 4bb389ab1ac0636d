// Tests of the streaming text readers and of text files as pipeline records.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/data/pipeline.h"
#include "garden/data/record_source.h"
#include "garden/data/text_readers.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using garden::data::DocumentReader;
using garden::data::ParallelTextReader;

fs::path write_text(const std::string& name, const std::string& text) {
  const fs::path path = fs::path(::testing::TempDir()) / ("garden_text_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

using garden_test::error_of;

TEST(TextReaders, ParallelTsvYieldsTheChosenColumns) {
  const auto path = write_text("pairs.tsv", "hello\thallo\nyes\tja\r\n");
  auto reader = ParallelTextReader::tsv(path.string());
  std::string source, target;
  ASSERT_TRUE(reader.next(source, target));
  EXPECT_EQ(source + "|" + target, "hello|hallo");
  ASSERT_TRUE(reader.next(source, target));
  EXPECT_EQ(source + "|" + target, "yes|ja");
  EXPECT_FALSE(reader.next(source, target));

  auto swapped = ParallelTextReader::tsv(path.string(), 1, 0);
  ASSERT_TRUE(swapped.next(source, target));
  EXPECT_EQ(source, "hallo");
}

TEST(TextReaders, ParallelTsvNamesFileAndLineOfAShortRow) {
  const auto path = write_text("short.tsv", "a\tb\nonly one column\n");
  auto reader = ParallelTextReader::tsv(path.string());
  std::string source, target;
  ASSERT_TRUE(reader.next(source, target));
  const auto message = error_of([&] { reader.next(source, target); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
}

TEST(TextReaders, AlignedFilesPairLinesAndNameTheShorterFile) {
  const auto en = write_text("en.txt", "one\ntwo\nthree\n");
  const auto de = write_text("de.txt", "eins\nzwei\n");
  auto reader = ParallelTextReader::aligned(en.string(), de.string());
  std::string source, target;
  ASSERT_TRUE(reader.next(source, target));
  EXPECT_EQ(source + "|" + target, "one|eins");
  ASSERT_TRUE(reader.next(source, target));
  const auto message = error_of([&] { reader.next(source, target); });
  EXPECT_NE(message.find("'" + de.string() + "' ends before line 3"), std::string::npos) << message;
}

TEST(TextReaders, DocumentsAreSentenceListsBetweenBlankLines) {
  const auto path = write_text("docs.txt", "\nA one.\nA two.\n\n\nB one.\n  \nC one.\nC two.");
  DocumentReader reader(path.string());
  std::vector<std::string> doc;
  ASSERT_TRUE(reader.next(doc));
  EXPECT_EQ(doc, (std::vector<std::string>{"A one.", "A two."}));
  const auto offset = reader.offset();
  ASSERT_TRUE(reader.next(doc));
  EXPECT_EQ(doc, (std::vector<std::string>{"B one."}));
  ASSERT_TRUE(reader.next(doc));
  EXPECT_EQ(doc, (std::vector<std::string>{"C one.", "C two."}));
  EXPECT_FALSE(reader.next(doc));
  EXPECT_EQ(reader.documents(), 3);

  DocumentReader resumed(path.string());
  resumed.seek(offset, 1);
  ASSERT_TRUE(resumed.next(doc));
  EXPECT_EQ(doc, (std::vector<std::string>{"B one."}));
}

TEST(TextReaders, RecordReadersResumeFromTheirState) {
  const auto lines = write_text("lines.txt", "l0\nl1\r\nl2\nl3");
  const auto csv = write_text("rows.csv", "a,b\n1,\"x,y\"\n2,z\n");
  const auto docs = write_text("docs2.txt", "a\nb\n\nc\n\nd\n");
  for (const auto& [path, type] : std::vector<std::pair<fs::path, std::string>>{
           {lines, "text"}, {csv, "csv"}, {docs, "documents"}}) {
    auto reader = garden::data::open_record_reader(path.string(), type);
    std::vector<std::string> all;
    std::string record;
    nlohmann::json after_first;
    while (reader->next(record)) {
      all.push_back(record);
      if (all.size() == 1) after_first = reader->state();
    }
    ASSERT_GE(all.size(), 2u) << type;
    auto resumed = garden::data::open_record_reader(path.string(), type);
    resumed->restore(after_first);
    std::vector<std::string> rest;
    while (resumed->next(record)) rest.push_back(record);
    EXPECT_EQ(rest, std::vector<std::string>(all.begin() + 1, all.end())) << type;
    if (type == "text") {
      EXPECT_EQ(all, (std::vector<std::string>{"l0", "l1", "l2", "l3"}));
    }
    if (type == "csv") {
      EXPECT_EQ(all[0], R"(["1","x,y"])");
    }
    if (type == "documents") {
      EXPECT_EQ(all[0], "a\nb");
    }
  }
}

TEST(TextReaders, TsvLinesFeedThePipeline) {
  const auto path = write_text("pipe.tsv", "a b\tx\nc\ty z w\n");
  garden::config::DataConfig config;
  config.input_path = path.string();
  config.file_type = "tsv";
  config.is_training = false;
  config.global_batch_size = 2;
  config.prefetch_buffer_size = 0;
  garden::data::BatchingOptions padded;
  padded.mode = garden::data::BatchMode::kPadded;
  garden::data::InputPipeline pipeline(
      config,
      [](const std::string& line) {
        const auto fields = garden::data::split_fields(line);
        const auto words = [](const std::string& s) {
          return static_cast<int64_t>(std::count(s.begin(), s.end(), ' ') + 1);
        };
        return garden::Batch{{"inputs", torch::ones({words(fields.at(0))}, torch::kLong)},
                             {"targets", torch::ones({words(fields.at(1))}, torch::kLong)}};
      },
      padded);
  const auto batch = *pipeline.next();
  EXPECT_EQ(batch.at("inputs").sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(batch.at("targets").sizes(), (std::vector<int64_t>{2, 3}));
}

}  // namespace
