// Tests of `garden tfrecord ...` as a user meets it: the real binary (GARDEN_CLI_PATH)
// run through the shell, stdout and stderr captured in files, exit status checked.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"
#include "reference_formats.h"

namespace {

using garden_test::CliRun;
using garden_test::slurp;
using garden_test::spit;

namespace fs = std::filesystem;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class TFRecordCliTest : public garden_test::CliFixture {};

const char* const kJsonLines =
    "{\"label\": [3], \"score\": [0.5, 1.25], \"text\": [\"hello\"]}\n"
    "\n"
    "{\"label\": [-1], \"score\": {\"float\": [2]}, \"text\": {\"bytes\": []}}\n"
    "{\"ids\": [1, 2, 3]}\n";

// Each test runs the binary at most twice: starting it (loading LibTorch) is most of
// the cost.
TEST_F(TFRecordCliTest, WriteThenCatRoundTripsGzip) {
  spit(path("in.jsonl"), kJsonLines);
  const std::string out = path("out.tfrecord.gz");
  CliRun run = garden("tfrecord write --from '" + path("in.jsonl") + "' --to '" + out +
                      "' --compression_type GZIP");
  ASSERT_EQ(run.status, 0) << run.err;
  run = garden("tfrecord cat --compression_type GZIP '" + out + "'");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto printed = lines(run.out);
  ASSERT_EQ(printed.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(printed[0]),
            nlohmann::json::parse(R"({"label": [3], "score": [0.5, 1.25], "text": ["hello"]})"));
  EXPECT_EQ(nlohmann::json::parse(printed[1]),
            nlohmann::json::parse(R"({"label": [-1], "score": [2.0], "text": {"bytes": []}})"));
  EXPECT_NE(printed[1].find("\"score\":[2.0]"), std::string::npos) << printed[1];
  EXPECT_EQ(nlohmann::json::parse(printed[2]), nlohmann::json::parse(R"({"ids": [1, 2, 3]})"));
}

TEST_F(TFRecordCliTest, WriteUncompressedThenCountFiles) {
  spit(path("in.jsonl"), kJsonLines);
  const std::string out = path("out.tfrecord");
  CliRun run = garden("tfrecord write --from '" + path("in.jsonl") + "' --to '" + out + "'");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(garden_test::reference::read_records(out).size(), 3u);  // independent reader

  const std::string other = path("other.tfrecord");
  spit(other, garden_test::reference::ref_encode_record("x"));
  run = garden("tfrecord count '" + out + "' '" + other + "'");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines(run.out), (std::vector<std::string>{"3\t" + out, "1\t" + other, "4\ttotal"}));
}

TEST_F(TFRecordCliTest, CatLimitStopsEarly) {
  std::string file;
  for (int i = 0; i < 5; ++i) file += garden_test::reference::ref_encode_record("");
  spit(path("five.tfrecord"), file);
  const CliRun run = garden("tfrecord cat --limit 2 '" + path("five.tfrecord") + "'");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines(run.out), (std::vector<std::string>{"{}", "{}"}));
}

TEST_F(TFRecordCliTest, BadJsonLineFailsWithOneLineNamingTheLine) {
  spit(path("bad.jsonl"), "{\"a\": [1]}\n{\"a\": [1, \n");
  const CliRun run = garden("tfrecord write --from '" + path("bad.jsonl") + "' --to '" +
                            path("bad.tfrecord") + "'");
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(run.out.empty()) << run.out;
  ASSERT_EQ(lines(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.err.find("line 2"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("bad.jsonl"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(path("bad.tfrecord")));  // no half-written output
}

TEST_F(TFRecordCliTest, CorruptFileFailsWithOneLineUnlessSkipped) {
  const std::string good = garden_test::reference::ref_encode_record("x");
  std::string damaged = good + good;
  damaged[good.size() + 12] ^= 1;  // second record's data
  spit(path("damaged.tfrecord"), damaged);
  CliRun run = garden("tfrecord count '" + path("damaged.tfrecord") + "'");
  EXPECT_NE(run.status, 0);
  ASSERT_EQ(lines(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.err.find("damaged.tfrecord"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("offset " + std::to_string(good.size())), std::string::npos) << run.err;

  run = garden("tfrecord count --skip_corrupt '" + path("damaged.tfrecord") + "'");
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines(run.out).front(), "1\t" + path("damaged.tfrecord"));
}

TEST_F(TFRecordCliTest, MissingFileAndBadCompressionFailWithOneLine) {
  CliRun run = garden("tfrecord cat '" + path("missing.tfrecord") + "'");
  EXPECT_NE(run.status, 0);
  ASSERT_EQ(lines(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.err.find("missing.tfrecord"), std::string::npos) << run.err;

  run = garden("tfrecord count --compression_type BZIP2 '" + path("missing.tfrecord") + "'");
  EXPECT_NE(run.status, 0);
  ASSERT_EQ(lines(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.err.find("BZIP2"), std::string::npos) << run.err;
}

// The same file in and out, however it is named, is refused before anything
// is written: the input stays as it was.
TEST_F(TFRecordCliTest, WriteRefusesItsInputAsOutputThroughLinks) {
  const fs::path work = dir_ / "work";
  fs::create_directories(work);
  const std::string input = (work / "in.jsonl").string();
  spit(input, kJsonLines);
  fs::create_symlink(input, work / "link.tfrecord");
  fs::create_hard_link(input, work / "hard.tfrecord");
  const auto before = garden_test::entries(work);
  for (const std::string& to : std::vector<std::string>{input, (work / "link.tfrecord").string(),
                                                        (work / "hard.tfrecord").string(),
                                                        (work / "." / "in.jsonl").string()}) {
    SCOPED_TRACE(to);
    const CliRun run = garden("tfrecord write --from '" + input + "' --to '" + to + "'");
    garden_test::expect_one_error_line(
        run, {"--to '" + to + "'", "--from '" + input + "'", "same file"});
    EXPECT_EQ(slurp(input), kJsonLines);
    EXPECT_EQ(garden_test::entries(work), before);
  }
}

// A failing write (a bad line, a bad input) leaves an existing --to as it
// was and no temporary file beside it.
TEST_F(TFRecordCliTest, FailedWriteKeepsTheExistingOutput) {
  const fs::path work = dir_ / "work";
  fs::create_directories(work / "a_directory");
  spit(work / "bad.jsonl", "{\"a\": [1]}\n{\"a\": [1, \n");
  const std::string kept = garden_test::reference::ref_encode_record("keep me");
  spit(work / "out.tfrecord", kept);
  const auto before = garden_test::entries(work);
  const std::string to = (work / "out.tfrecord").string();
  for (const std::string& from : {(work / "bad.jsonl").string(), (work / "a_directory").string(),
                                  (work / "missing.jsonl").string()}) {
    SCOPED_TRACE(from);
    const CliRun run = garden("tfrecord write --from '" + from + "' --to '" + to + "'");
    garden_test::expect_one_error_line(run, {from});
    EXPECT_EQ(slurp(to), kept);
    EXPECT_EQ(garden_test::entries(work), before);
  }
}

// Inputs that are not readable files fail with one line naming the flag (or
// what the file is) and the path, before anything is printed or written.
TEST_F(TFRecordCliTest, DirectoriesAreRefusedNamingThePath) {
  const fs::path work = dir_ / "work";
  fs::create_directories(work / "dir");
  const std::string dir = (work / "dir").string();
  spit(work / "good.tfrecord", garden_test::reference::ref_encode_record("x"));
  spit(work / "in.jsonl", kJsonLines);
  garden_test::expect_one_error_line(garden("tfrecord cat '" + dir + "'"),
                                     {"TFRecord file '" + dir + "' is a directory"});
  garden_test::expect_one_error_line(
      garden("tfrecord count '" + (work / "good.tfrecord").string() + "' '" + dir + "'"),
      {"TFRecord file '" + dir + "' is a directory"});
  garden_test::expect_one_error_line(
      garden("tfrecord write --from '" + dir + "' --to '" + (work / "x.tfrecord").string() + "'"),
      {"--from '" + dir + "' is a directory"});
  EXPECT_FALSE(fs::exists(work / "x.tfrecord"));
  garden_test::expect_one_error_line(
      garden("tfrecord write --from '" + (work / "in.jsonl").string() + "' --to '" + dir + "'"),
      {"--to", dir, "directory"});
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
