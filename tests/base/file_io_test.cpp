// The one atomic write and the input checks every command relies on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace fs = std::filesystem;

namespace {

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_file_io_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::size_t entries() const {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) (void)e, ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(FileIoTest, AtomicWriteReplacesTheFileWhole) {
  garden::write_file_atomically(path("a.txt"), "first");
  garden::write_file_atomically(path("a.txt"), "second version");
  EXPECT_EQ(slurp(path("a.txt")), "second version");
  EXPECT_EQ(entries(), 1u) << "no temporary file is left";
}

TEST_F(FileIoTest, AnUncommittedWriteLeavesTheTargetAsItWasAndNoTemporary) {
  garden::write_file_atomically(path("keep.txt"), "precious");
  try {
    garden::AtomicFile file(path("keep.txt"));
    file.write("half of a new ver");
    EXPECT_TRUE(fs::exists(file.temporary_path()));
    throw std::runtime_error("the writer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(path("keep.txt")), "precious");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(FileIoTest, ContentWrittenThroughTheTemporaryPathIsCommitted) {
  garden::AtomicFile file(path("out.bin"));
  {
    std::ofstream out(file.temporary_path(), std::ios::binary);
    out << "from a writer of its own";
  }
  EXPECT_FALSE(fs::exists(path("out.bin"))) << "nothing is visible before commit";
  file.commit();
  EXPECT_EQ(slurp(path("out.bin")), "from a writer of its own");
}

TEST_F(FileIoTest, WritingThroughASymlinkKeepsTheLink) {
  garden::write_file_atomically(path("real.txt"), "old");
  fs::create_symlink(path("real.txt"), path("link.txt"));
  garden::write_file_atomically(path("link.txt"), "new");
  EXPECT_TRUE(fs::is_symlink(path("link.txt"))) << "the link is not replaced by a file";
  EXPECT_EQ(slurp(path("real.txt")), "new");
  EXPECT_EQ(entries(), 2u);
}

TEST_F(FileIoTest, AnUnwritableTargetNamesThePath) {
  try {
    garden::write_file_atomically(path("no/such/dir/x.txt"), "x");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir/x.txt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(garden::write_file_atomically(dir_.string(), "x"), garden::Error)
      << "a directory is not overwritten";
}

TEST_F(FileIoTest, InputChecksNameThePathAndWhatIsWrong) {
  const auto message = [](const std::string& p) {
    try {
      garden::check_input_file(p, "--input");
    } catch (const garden::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(path("missing")), "--input '" + path("missing") + "' does not exist");
  EXPECT_EQ(message(dir_.string()), "--input '" + dir_.string() + "' is a directory, not a file");
  garden::write_file_atomically(path("ok"), "text");
  EXPECT_EQ(message(path("ok")), "no error");
  EXPECT_EQ(garden::read_file(path("ok"), "--input"), "text");
}

TEST_F(FileIoTest, SameFileResolvesLinksAndIsRefusedNamingBothFlags) {
  garden::write_file_atomically(path("data.txt"), "input");
  fs::create_symlink(path("data.txt"), path("link.txt"));
  fs::create_hard_link(path("data.txt"), path("hard.txt"));
  EXPECT_TRUE(garden::same_file(path("data.txt"), path("link.txt")));
  EXPECT_TRUE(garden::same_file(path("data.txt"), path("hard.txt")));
  EXPECT_TRUE(garden::same_file(path("data.txt"), (dir_ / "." / "data.txt").string()));
  EXPECT_FALSE(garden::same_file(path("data.txt"), path("other.txt"))) << "absent output";
  try {
    garden::refuse_same_file(path("data.txt"), "--from", path("link.txt"), "--to");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--to"), std::string::npos) << what;
    EXPECT_NE(what.find("--from"), std::string::npos) << what;
  }
  EXPECT_EQ(slurp(path("data.txt")), "input");
}

}  // namespace
