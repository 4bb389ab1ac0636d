// Tests of `garden bleu ...` as a user meets it: the real binary (GARDEN_CLI_PATH) run
// through the shell, stdout and stderr captured in files, exit status checked.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/cli_fixture.h"

namespace {

using garden_test::CliRun;
using garden_test::slurp;
using garden_test::spit;

namespace fs = std::filesystem;

class BleuCliTest : public garden_test::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    // sacreBLEU's README example: one hypothesis file, two reference streams.
    spit(path("hyp.txt"),
         "The dog bit the man.\nIt wasn't surprising.\nThe man had just bitten him.\n");
    spit(path("ref1.txt"),
         "The dog bit the man.\nIt was not unexpected.\nThe man bit him first.\n");
    spit(path("ref2.txt"),
         "The dog had bit the man.\nNo one was surprised.\nThe man had bitten the dog.\n");
  }
};

TEST_F(BleuCliTest, PrintsSacrebleuLineForReadmeExample) {
  const CliRun run = garden("bleu --hypothesis '" + path("hyp.txt") + "' --reference '" +
                            path("ref1.txt") + "' --reference '" + path("ref2.txt") + "'");
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out,
            "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 "
            "ref_len = 18)\n");
}

TEST_F(BleuCliTest, LowercaseAndTokenizeFlags) {
  spit(path("upper.txt"), "THE CAT SAT DOWN\n");
  spit(path("lower.txt"), "the cat sat down\n");
  const CliRun run = garden("bleu --hypothesis '" + path("upper.txt") + "' --reference '" +
                            path("lower.txt") + "' --tokenize intl --lowercase");
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out,
            "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 4 "
            "ref_len = 4)\n");
}

TEST_F(BleuCliTest, MismatchedLineCountsFailInOneLine) {
  spit(path("short.txt"), "The dog bit the man.\n");
  const CliRun run =
      garden("bleu --hypothesis '" + path("hyp.txt") + "' --reference '" + path("short.txt") + "'");
  EXPECT_NE(run.status, 0);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "garden: error: hypothesis '" + path("hyp.txt") +
                         "' has 3 lines but reference '" + path("short.txt") + "' has 1\n");
}

// A directory or a missing file is one line naming the flag and the path
// (not the stream library's "basic_filebuf::underflow").
TEST_F(BleuCliTest, DirectoryOrMissingFileNamesTheFlagAndPath) {
  fs::create_directories(path("dir"));
  const std::string dir = path("dir"), hyp = path("hyp.txt"), missing = path("missing.txt");
  garden_test::expect_one_error_line(
      garden("bleu --hypothesis '" + dir + "' --reference '" + path("ref1.txt") + "'"),
      {"--hypothesis '" + dir + "' is a directory"});
  garden_test::expect_one_error_line(
      garden("bleu --hypothesis '" + hyp + "' --reference '" + dir + "'"),
      {"--reference '" + dir + "' is a directory"});
  garden_test::expect_one_error_line(garden("bleu --hypothesis '" + hyp + "' --reference '" +
                                            path("ref1.txt") + "' --reference '" + missing + "'"),
                                     {"--reference '" + missing + "' does not exist"});
}

// Text that is not UTF-8 is one line naming the flag, the file, the line and
// the byte (sacrebleu, in Python, fails to decode it).
TEST_F(BleuCliTest, InvalidUtf8NamesTheFileLineAndByte) {
  spit(path("latin1.txt"), "The dog bit the man.\nIt was not unexpected.\nCaf\xe9 au lait.\n");
  garden_test::expect_one_error_line(
      garden("bleu --hypothesis '" + path("hyp.txt") + "' --reference '" + path("latin1.txt") +
             "'"),
      {"--reference '" + path("latin1.txt") + "', line 3", "0xE9", "offset 3"});
  garden_test::expect_one_error_line(garden("bleu --hypothesis '" + path("latin1.txt") +
                                            "' --reference '" + path("ref1.txt") + "'"),
                                     {"--hypothesis '" + path("latin1.txt") + "', line 3"});
}

}  // namespace
