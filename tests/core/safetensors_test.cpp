// safetensors: the file Garden writes, read back by the tests' own reader
// (the format's specification, by hand), Garden's reader on it, and each
// malformed file as one line naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "garden/base/error.h"
#include "garden/core/safetensors.h"
#include "safetensors_reader.h"

namespace fs = std::filesystem;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("garden_safetensors_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A file of the given header and data bytes, with its length prefix.
  std::string write_raw(const std::string& name, const std::string& header, const std::string& data,
                        uint64_t claimed = 0) const {
    std::string bytes;
    const uint64_t size = claimed ? claimed : header.size();
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((size >> (8 * i)) & 0xFF));
    std::ofstream(path(name), std::ios::binary) << bytes << header << data;
    return path(name);
  }
  std::string error_of(const std::string& file) const {
    try {
      garden::read_safetensors(file);
    } catch (const garden::Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

std::string raw_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     static_cast<std::size_t>(c.numel()) * c.element_size());
}

}  // namespace

TEST_F(SafetensorsTest, TheSpecificationsReaderSeesEveryTensorAndTheMetadata) {
  const at::Tensor weight = torch::arange(12, torch::kFloat).reshape({3, 4}) / 7;
  const at::Tensor transposed = weight.t();  // not contiguous: written in C order
  const at::Tensor steps = torch::tensor({1, -2, 3}, torch::kLong);
  const at::Tensor half = torch::tensor({0.5, -1.25}, torch::kBFloat16);
  const at::Tensor scalar = torch::tensor(2.5, torch::kDouble);
  const at::Tensor empty = torch::zeros({0, 3});
  const at::Tensor mask = torch::tensor({true, false, true});
  garden::write_safetensors(path("m.safetensors"),
                            {{"dense.weight", weight},
                             {"dense.weight_t", transposed},
                             {"steps", steps},
                             {"half", half},
                             {"scalar", scalar},
                             {"empty", empty},
                             {"mask", mask}},
                            {{"format", "pt"}, {"model", "demo"}});
  const auto file = garden_test::safetensors::read(path("m.safetensors"));
  EXPECT_EQ(file.header_size % 8, 0u) << "the data starts 8-byte aligned";
  EXPECT_EQ(file.metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"model", "demo"}}));
  ASSERT_EQ(file.tensors.size(), 7u);
  const auto expect = [&](const std::string& name, const std::string& dtype,
                          const std::vector<int64_t>& shape, const at::Tensor& tensor) {
    SCOPED_TRACE(name);
    const auto& e = file.tensors.at(name);
    EXPECT_EQ(e.dtype, dtype);
    EXPECT_EQ(e.shape, shape);
    EXPECT_EQ(e.bytes, raw_bytes(tensor));
  };
  expect("dense.weight", "F32", {3, 4}, weight);
  expect("dense.weight_t", "F32", {4, 3}, transposed);
  expect("steps", "I64", {3}, steps);
  expect("half", "BF16", {2}, half);
  expect("scalar", "F64", {}, scalar);
  expect("empty", "F32", {0, 3}, empty);
  expect("mask", "BOOL", {3}, mask);
  // Garden's reader gives the same tensors back.
  const auto back = garden::read_safetensors(path("m.safetensors"));
  EXPECT_EQ(back.metadata, file.metadata);
  EXPECT_TRUE(torch::equal(back.tensors.at("dense.weight_t"), transposed));
  EXPECT_TRUE(torch::equal(back.tensors.at("half"), half));
  EXPECT_EQ(back.tensors.at("scalar").dim(), 0);
  EXPECT_TRUE(torch::equal(back.tensors.at("mask"), mask));
}

TEST_F(SafetensorsTest, BadNamesAndDtypesAreRefused) {
  const auto refuse = [&](const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    try {
      garden::write_safetensors(path("bad.safetensors"), tensors);
    } catch (const garden::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refuse({{"a", torch::ones(1)}, {"a", torch::ones(1)}}).find("'a' is given twice"),
            std::string::npos);
  EXPECT_NE(refuse({{"__metadata__", torch::ones(1)}}).find("reserved"), std::string::npos);
  EXPECT_NE(refuse({{"c", torch::ones(1, torch::kComplexFloat)}}).find("does not store"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(path("bad.safetensors"))) << "nothing written";
}

TEST_F(SafetensorsTest, EachMalformedFileIsOneLineNamingIt) {
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  EXPECT_EQ(error_of(write_raw("ok", good, data)), "");
  const auto expect = [&](const std::string& file, const std::string& part) {
    const std::string error = error_of(file);
    EXPECT_EQ(error.rfind(file + ": ", 0), 0u) << error;
    EXPECT_NE(error.find(part), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  };
  std::ofstream(path("short"), std::ios::binary) << "abc";
  expect(path("short"), "only 3 bytes");
  expect(write_raw("long", good, data, 1u << 30), "the header claims 1073741824 bytes");
  expect(write_raw("json", "{\"a\":", "", 0), "the header is not JSON");
  expect(write_raw("fields", R"({"a":{"dtype":"F32"}})", ""), "tensor 'a' needs dtype");
  expect(write_raw("dtype", R"({"a":{"dtype":"Q8","shape":[2],"data_offsets":[0,2]}})", "zz"),
         "dtype 'Q8'");
  expect(write_raw("outside", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data),
         "outside the 8 data bytes");
  expect(write_raw("size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
         "8 bytes for 3 elements");
  expect(write_raw("hole", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data),
         "bytes [0, 4) belong to no tensor");
  expect(write_raw("overlap",
                   R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   data),
         "two tensors share bytes");
  expect(write_raw("meta", R"({"__metadata__":{"k":1}})", ""), "__metadata__ 'k' is not a string");
  EXPECT_EQ(error_of(path("absent")), "cannot read safetensors file '" + path("absent") + "'");
}
