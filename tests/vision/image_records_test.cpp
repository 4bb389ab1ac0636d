// `create_image_records`: the records are read back with the tests' own
// TFRecord and protobuf readers (tests/reference_formats.h), the labels
// follow the sorted folder names, the split is stable and seeded, MNIST's
// IDX files (gzipped or not) become PNG records of their exact pixels, and
// damaged input leaves no output.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "garden/vision/data/image_codec.h"
#include "garden/vision/data/image_records.h"
#include "reference_formats.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
namespace ref = garden_test::reference;
using garden::vision::create_image_records;
using garden::vision::Image;
using garden::vision::ImageRecordsOptions;

// One record's features by the wire format: Example{features = 1},
// Features{feature = 1: {key = 1, value = 2}}, Feature{bytes_list = 1,
// int64_list = 3}, each list {value = 1}.
struct Record {
  std::map<std::string, std::string> bytes;
  std::map<std::string, int64_t> ints;
};

Record parse(const std::string& serialized) {
  Record record;
  const ref::Message example = ref::decode(serialized);
  const ref::Message features = ref::decode(ref::only(example, 1, ref::kLengthDelimited).bytes);
  for (const ref::Field* entry : ref::all(features, 1)) {
    const ref::Message pair = ref::decode(entry->bytes);
    const std::string key = ref::only(pair, 1, ref::kLengthDelimited).bytes;
    const ref::Message feature = ref::decode(ref::only(pair, 2, ref::kLengthDelimited).bytes);
    if (ref::has(feature, 1)) {
      const ref::Message list = ref::decode(ref::only(feature, 1, ref::kLengthDelimited).bytes);
      record.bytes[key] = ref::only(list, 1, ref::kLengthDelimited).bytes;
    } else {
      const ref::Message list = ref::decode(ref::only(feature, 3, ref::kLengthDelimited).bytes);
      const ref::Field& packed = ref::only(list, 1, ref::kLengthDelimited);
      std::size_t pos = 0;
      record.ints[key] = static_cast<int64_t>(ref::decode_varint(packed.bytes, pos));
      EXPECT_EQ(pos, packed.bytes.size()) << key << " holds one value";
    }
  }
  return record;
}

std::vector<Record> read_split(const fs::path& dir, const std::string& split) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind(split + "-", 0) == 0) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<Record> records;
  for (const auto& file : files)
    for (const auto& serialized : ref::read_records(file.string()))
      records.push_back(parse(serialized));
  return records;
}

Image solid(int height, int width, int channels, int value) {
  Image image;
  image.height = height;
  image.width = width;
  image.channels = channels;
  image.pixels.assign(static_cast<std::size_t>(height * width * channels),
                      static_cast<uint8_t>(value));
  return image;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

class ImageRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("image_records_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Classes "tulip" (4 PNGs, one in a subfolder), "Rose" (3 JPEGs), "daisy"
  // (1 PNG), an empty folder, a text file and hidden files.
  fs::path make_folder() {
    const fs::path root = dir_ / "images";
    for (int i = 0; i < 3; ++i)
      write_bytes(root / "tulip" / ("t" + std::to_string(i) + ".png"),
                  garden::vision::encode_png(solid(4 + i, 5, 3, 10 * i)));
    write_bytes(root / "tulip" / "more" / "t9.PNG", garden::vision::encode_png(solid(2, 2, 1, 99)));
    for (int i = 0; i < 3; ++i)
      write_bytes(root / "Rose" / ("r" + std::to_string(i) + ".jpg"),
                  garden::vision::encode_jpeg(solid(8, 8, 3, 200), 90));
    write_bytes(root / "daisy" / "d.png", garden::vision::encode_png(solid(3, 3, 1, 7)));
    fs::create_directories(root / "empty");
    write_bytes(root / "daisy" / "notes.txt", "not an image");
    write_bytes(root / "daisy" / ".hidden.png", "not read");
    write_bytes(root / ".cache" / "x.png", "not read");
    return root;
  }

  fs::path dir_;
};

TEST_F(ImageRecordsTest, AFolderPerClassBecomesRecordsWithModelGardensFeatures) {
  ImageRecordsOptions options;
  options.image_dir = make_folder().string();
  options.output_dir = (dir_ / "out").string();
  options.train_shards = 2;
  const auto report = create_image_records(options);
  // Sorted by bytes, as Python's sorted(): upper case first.
  EXPECT_EQ(report.class_names, (std::vector<std::string>{"Rose", "daisy", "tulip"}));
  EXPECT_EQ(report.train_images, 8);
  EXPECT_EQ(report.validation_images, 0);
  EXPECT_TRUE(fs::exists(dir_ / "out" / "train-00000-of-00002.tfrecord"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "train-00001-of-00002.tfrecord"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "validation-00000-of-00001.tfrecord"));
  // The manifest lists every training file with its label.
  std::ifstream manifest(dir_ / "out" / "train_files.txt");
  std::map<std::string, int> listed;
  for (std::string line; std::getline(manifest, line);)
    listed[line.substr(0, line.find('\t'))] = std::stoi(line.substr(line.find('\t') + 1));
  EXPECT_EQ(listed.size(), 8u);
  EXPECT_EQ(listed.at("Rose/r0.jpg"), 0);
  EXPECT_EQ(listed.at("tulip/more/t9.PNG"), 2);
  std::ifstream labels(dir_ / "out" / "labels.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(labels), {}), "Rose\ndaisy\ntulip\n");

  const auto records = read_split(dir_ / "out", "train");
  ASSERT_EQ(records.size(), 8u);
  std::map<std::string, int> per_class;
  for (const Record& r : records) {
    const std::string text = r.bytes.at("image/class/text");
    ++per_class[text];
    const int64_t label = r.ints.at("image/class/label");
    EXPECT_EQ(report.class_names.at(static_cast<std::size_t>(label)), text);
    const std::string& encoded = r.bytes.at("image/encoded");
    const Image image = garden::vision::decode_image(encoded, 0, "record");
    EXPECT_EQ(r.ints.at("image/height"), image.height);
    EXPECT_EQ(r.ints.at("image/width"), image.width);
    EXPECT_EQ(r.bytes.at("image/format"), text == "Rose" ? "jpeg" : "png");
  }
  EXPECT_EQ(per_class, (std::map<std::string, int>{{"Rose", 3}, {"daisy", 1}, {"tulip", 4}}));
  // The file's own bytes travel unchanged.
  const auto is_gray_tulip = [](const Record& r) { return r.ints.at("image/height") == 2; };
  const auto it = std::find_if(records.begin(), records.end(), is_gray_tulip);
  ASSERT_NE(it, records.end());
  std::ifstream original(dir_ / "images" / "tulip" / "more" / "t9.PNG", std::ios::binary);
  EXPECT_EQ(it->bytes.at("image/encoded"),
            std::string(std::istreambuf_iterator<char>(original), {}));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(ImageRecordsTest, TheSplitIsSeededPerClassAndStableWhenFilesAreAdded) {
  const fs::path root = dir_ / "images";
  for (const std::string cls : {"a", "b"})
    for (int i = 0; i < 20; ++i)
      write_bytes(root / cls / (std::to_string(i) + ".png"),
                  garden::vision::encode_png(solid(2, 2, 1, i)));
  const auto run = [&](const std::string& out, int64_t seed) {
    ImageRecordsOptions options;
    options.image_dir = root.string();
    options.output_dir = (dir_ / out).string();
    options.validation_fraction = 0.25;
    options.seed = seed;
    const auto report = create_image_records(options);
    EXPECT_EQ(report.train_images, 30);
    EXPECT_EQ(report.validation_images, 10);
    std::set<std::string> held;
    for (const Record& r : read_split(dir_ / out, "validation"))
      held.insert(r.bytes.at("image/class/text") + "/" + r.bytes.at("image/encoded"));
    return held;
  };
  const auto first = run("one", 1);
  EXPECT_EQ(first, run("again", 1));
  EXPECT_NE(first, run("other_seed", 2));
  // Five of each class.
  EXPECT_EQ(
      std::count_if(first.begin(), first.end(), [](const std::string& s) { return s[0] == 'a'; }),
      5);
  // The same seed, two runs: bitwise the same files.
  for (const std::string name :
       {"train-00000-of-00004.tfrecord", "validation-00000-of-00001.tfrecord"})
    EXPECT_EQ(ref::read_records((dir_ / "one" / name).string()),
              ref::read_records((dir_ / "again" / name).string()));
  // A class folder that is a symbolic link splits as the folder itself: the
  // hash takes the path inside --image_dir, not where the link points.
  {
    const fs::path linked = dir_ / "linked";
    fs::create_directories(linked);
    fs::create_directory_symlink(root / "a", linked / "a");
    fs::create_directory_symlink(root / "b", linked / "b");
    ImageRecordsOptions options;
    options.image_dir = linked.string();
    options.output_dir = (dir_ / "via_links").string();
    options.validation_fraction = 0.25;
    options.seed = 1;
    create_image_records(options);
    EXPECT_EQ(
        ref::read_records((dir_ / "via_links" / "validation-00000-of-00001.tfrecord").string()),
        ref::read_records((dir_ / "one" / "validation-00000-of-00001.tfrecord").string()));
    EXPECT_EQ(read_text(dir_ / "via_links" / "validation_files.txt"),
              read_text(dir_ / "one" / "validation_files.txt"));
  }
  // Four more files per class: of the 5 held out before, those still among
  // the 6 held out now are all of them (the hash of a path does not move).
  for (const std::string cls : {"a", "b"})
    for (int i = 20; i < 24; ++i)
      write_bytes(root / cls / (std::to_string(i) + ".png"),
                  garden::vision::encode_png(solid(2, 2, 1, i)));
  ImageRecordsOptions options;
  options.image_dir = root.string();
  options.output_dir = (dir_ / "grown").string();
  options.validation_fraction = 0.25;
  create_image_records(options);
  std::set<std::string> grown;
  for (const Record& r : read_split(dir_ / "grown", "validation"))
    grown.insert(r.bytes.at("image/class/text") + "/" + r.bytes.at("image/encoded"));
  EXPECT_EQ(grown.size(), 12u);
  // The old files still held out and the ones held out before are both the
  // first of the old files in one fixed order: one set contains the other.
  std::set<std::string> old_held_now;
  for (const auto& item : grown) {
    const std::string value = item.substr(item.find('/') + 1);
    const Image image = garden::vision::decode_image(value, 0, "held");
    if (image.pixels[0] < 20) old_held_now.insert(item);
  }
  for (const char cls : {'a', 'b'}) {
    std::set<std::string> before, now;
    for (const auto& item : first)
      if (item[0] == cls) before.insert(item);
    for (const auto& item : old_held_now)
      if (item[0] == cls) now.insert(item);
    EXPECT_TRUE(std::includes(before.begin(), before.end(), now.begin(), now.end()) ||
                std::includes(now.begin(), now.end(), before.begin(), before.end()))
        << cls;
  }
}

void write_idx(const fs::path& path, uint32_t magic, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& data, bool gzip) {
  std::string bytes;
  for (uint32_t v : std::vector<uint32_t>{magic}) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<char>(v >> s));
  }
  for (uint32_t v : dims)
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<char>(v >> s));
  bytes.append(data.begin(), data.end());
  if (!gzip) {
    write_bytes(path, bytes);
    return;
  }
  fs::create_directories(path.parent_path());
  gzFile file = gzopen(path.string().c_str(), "wb");
  gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
}

TEST_F(ImageRecordsTest, MnistIdxFilesBecomePngRecordsOfTheirExactPixels) {
  const fs::path mnist = dir_ / "mnist";
  // 3 training digits of 2 x 3 pixels (gzipped, as published), 2 test ones
  // (unpacked).
  std::vector<uint8_t> train_pixels(3 * 6), test_pixels(2 * 6);
  for (std::size_t i = 0; i < train_pixels.size(); ++i)
    train_pixels[i] = static_cast<uint8_t>(i * 13);
  for (std::size_t i = 0; i < test_pixels.size(); ++i)
    test_pixels[i] = static_cast<uint8_t>(255 - i);
  write_idx(mnist / "train-images-idx3-ubyte.gz", 0x803, {3, 2, 3}, train_pixels, true);
  write_idx(mnist / "train-labels-idx1-ubyte.gz", 0x801, {3}, {5, 0, 4}, true);
  write_idx(mnist / "t10k-images-idx3-ubyte", 0x803, {2, 2, 3}, test_pixels, false);
  write_idx(mnist / "t10k-labels-idx1-ubyte", 0x801, {2}, {7, 2}, false);
  ImageRecordsOptions options;
  options.mnist_dir = mnist.string();
  options.output_dir = (dir_ / "out").string();
  options.train_shards = 1;
  const auto report = create_image_records(options);
  EXPECT_EQ(report.class_names.size(), 10u);
  EXPECT_EQ(report.train_images, 3);
  EXPECT_EQ(report.validation_images, 2);

  // Each record's PNG decodes to the pixels of the digit its label names.
  const std::map<int64_t, std::vector<uint8_t>> train_by_label = {
      {5, {train_pixels.begin(), train_pixels.begin() + 6}},
      {0, {train_pixels.begin() + 6, train_pixels.begin() + 12}},
      {4, {train_pixels.begin() + 12, train_pixels.end()}}};
  const auto train = read_split(dir_ / "out", "train");
  ASSERT_EQ(train.size(), 3u);
  for (const Record& r : train) {
    const int64_t label = r.ints.at("image/class/label");
    EXPECT_EQ(r.bytes.at("image/class/text"), std::to_string(label));
    EXPECT_EQ(r.bytes.at("image/format"), "png");
    EXPECT_EQ(r.ints.at("image/height"), 2);
    EXPECT_EQ(r.ints.at("image/width"), 3);
    const Image image = garden::vision::decode_image(r.bytes.at("image/encoded"), 0, "digit");
    EXPECT_EQ(image.channels, 1);
    EXPECT_EQ(image.pixels, train_by_label.at(label)) << label;
  }
  const auto validation = read_split(dir_ / "out", "validation");
  ASSERT_EQ(validation.size(), 2u);
  std::set<int64_t> labels;
  for (const Record& r : validation) labels.insert(r.ints.at("image/class/label"));
  EXPECT_EQ(labels, (std::set<int64_t>{2, 7}));
}

TEST_F(ImageRecordsTest, BadMnistFilesAreOneErrorAndNoOutput) {
  const fs::path mnist = dir_ / "mnist";
  std::vector<uint8_t> pixels(2 * 4, 1);
  write_idx(mnist / "train-images-idx3-ubyte", 0x803, {2, 2, 2}, pixels, false);
  write_idx(mnist / "train-labels-idx1-ubyte", 0x801, {3}, {1, 2, 3}, false);
  write_idx(mnist / "t10k-images-idx3-ubyte", 0x803, {1, 2, 2}, {1, 2, 3, 4}, false);
  write_idx(mnist / "t10k-labels-idx1-ubyte", 0x801, {1}, {1}, false);
  ImageRecordsOptions options;
  options.mnist_dir = mnist.string();
  options.output_dir = (dir_ / "out").string();
  std::string message = garden_test::error_of([&] { create_image_records(options); });
  EXPECT_NE(message.find("holds 2 images but"), std::string::npos) << message;
  EXPECT_NE(message.find("3 labels"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir_ / "out"));

  write_idx(mnist / "train-labels-idx1-ubyte", 0x803, {2}, {1, 2}, false);
  message = garden_test::error_of([&] { create_image_records(options); });
  EXPECT_NE(message.find("is not that of IDX labels"), std::string::npos) << message;

  write_idx(mnist / "train-labels-idx1-ubyte", 0x801, {2}, {1, 12}, false);
  message = garden_test::error_of([&] { create_image_records(options); });
  EXPECT_NE(message.find("label 1 is 12, not a digit"), std::string::npos) << message;

  write_idx(mnist / "train-labels-idx1-ubyte", 0x801, {2}, {1, 2}, false);
  write_idx(mnist / "train-images-idx3-ubyte", 0x803, {2, 2, 2}, {1, 2, 3}, false);
  message = garden_test::error_of([&] { create_image_records(options); });
  EXPECT_NE(message.find("ends after 3 of the 8 bytes of its pixels"), std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(dir_ / "out"));

  fs::remove(mnist / "t10k-labels-idx1-ubyte");
  write_idx(mnist / "train-images-idx3-ubyte", 0x803, {2, 2, 2}, pixels, false);
  message = garden_test::error_of([&] { create_image_records(options); });
  EXPECT_NE(message.find("has neither t10k-labels-idx1-ubyte nor t10k-labels-idx1-ubyte.gz"),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(ImageRecordsTest, ADamagedImageNamesItsFileAndLeavesNoOutput) {
  const fs::path root = make_folder();
  const std::string jpeg = garden::vision::encode_jpeg(solid(16, 16, 3, 50), 90);
  write_bytes(root / "Rose" / "r1.jpg", jpeg.substr(0, jpeg.size() / 2));
  ImageRecordsOptions options;
  options.image_dir = root.string();
  options.output_dir = (dir_ / "out").string();
  const std::string message = garden_test::error_of([&] { create_image_records(options); });
  EXPECT_NE(message.find("image '" + (root / "Rose" / "r1.jpg").string() + "': damaged JPEG"),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  // Nothing staged is left beside it either.
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".out"), std::string::npos) << entry.path();
}

TEST_F(ImageRecordsTest, OptionsThatCannotWorkAreRefused) {
  ImageRecordsOptions options;
  options.output_dir = (dir_ / "out").string();
  EXPECT_NE(garden_test::error_of([&] {
              create_image_records(options);
            }).find("give one of --image_dir or --mnist_dir"),
            std::string::npos);
  options.image_dir = make_folder().string();
  options.validation_fraction = 1.0;
  EXPECT_NE(garden_test::error_of([&] {
              create_image_records(options);
            }).find("--validation_fraction must be in [0, 1)"),
            std::string::npos);
  options.validation_fraction = 0.1;
  options.train_shards = 0;
  EXPECT_NE(garden_test::error_of([&] { create_image_records(options); }).find("at least 1"),
            std::string::npos);
  options.train_shards = 1;
  write_bytes(dir_ / "out" / "keep.txt", "user's file");
  EXPECT_NE(garden_test::error_of([&] {
              create_image_records(options);
            }).find("exists and is not an empty directory"),
            std::string::npos);
  std::ifstream kept(dir_ / "out" / "keep.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "user's file");
  options.image_dir = (dir_ / "nowhere").string();
  options.output_dir = (dir_ / "out2").string();
  EXPECT_NE(
      garden_test::error_of([&] { create_image_records(options); }).find("is not a directory"),
      std::string::npos);
  fs::create_directories(dir_ / "no_classes" / "cats");
  write_bytes(dir_ / "no_classes" / "cats" / "a.gif", "GIF");
  options.image_dir = (dir_ / "no_classes").string();
  EXPECT_NE(garden_test::error_of([&] {
              create_image_records(options);
            }).find("has no class folders with .jpg, .jpeg or .png files"),
            std::string::npos);
}

TEST(ImageRecordsCliTest, TheCommandWritesRecordsAndFailsInOneLine) {
  const fs::path dir = fs::path(::testing::TempDir()) / "image_records_cli";
  fs::remove_all(dir);
  write_bytes(dir / "images" / "b" / "x.png", garden::vision::encode_png(solid(2, 2, 3, 1)));
  write_bytes(dir / "images" / "a" / "y.png", garden::vision::encode_png(solid(2, 2, 3, 2)));
  const std::string garden = GARDEN_CLI_PATH;
  const std::string ok = garden + " create_image_records --image_dir=" + (dir / "images").string() +
                         " --output_dir=" + (dir / "out").string() + " --train_shards=1 > " +
                         (dir / "stdout").string() + " 2>&1";
  ASSERT_EQ(std::system(ok.c_str()), 0);
  std::ifstream out(dir / "stdout");
  const std::string printed(std::istreambuf_iterator<char>(out), {});
  EXPECT_NE(printed.find("classes:    2 (0: a, 1: b)"), std::string::npos) << printed;
  EXPECT_EQ(ref::read_records((dir / "out" / "train-00000-of-00001.tfrecord").string()).size(), 2u);

  const std::string both =
      garden +
      " create_image_records --image_dir=x --mnist_dir=y --output_dir=" + (dir / "o2").string() +
      " > " + (dir / "stderr").string() + " 2>&1";
  EXPECT_NE(std::system(both.c_str()), 0);
  const std::string again =
      garden + " create_image_records --image_dir=" + (dir / "images").string() +
      " --output_dir=" + (dir / "out").string() + " > " + (dir / "stderr").string() + " 2>&1";
  EXPECT_NE(std::system(again.c_str()), 0);
  std::ifstream err(dir / "stderr");
  const std::string message(std::istreambuf_iterator<char>(err), {});
  EXPECT_EQ(message, "garden: error: create_image_records: --output_dir '" +
                         (dir / "out").string() + "' exists and is not an empty directory\n");
  fs::remove_all(dir);
}

}  // namespace
