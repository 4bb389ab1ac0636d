// `garden create_image_records`: images as users have them (a folder per
// class, as Keras' and torchvision's ImageFolder read them; MNIST's IDX
// files) into sharded TFRecords of tf.Examples with the features Model
// Garden's classification input reads:
//
//   image/encoded      bytes   the file's own JPEG or PNG bytes (MNIST: PNG)
//   image/format       bytes   "jpeg" or "png"
//   image/height       int64
//   image/width        int64
//   image/class/label  int64   0-based: folders sorted by name (MNIST: the digit)
//   image/class/text   bytes   the class folder's name (MNIST: the digit)
//
// With --image_dir, train_files.txt and validation_files.txt list each
// split's files (path within image_dir, a tab, the label), in record order.
//
// Every image is decoded once while writing: a damaged or unreadable one is
// one error naming the file (or the IDX record), and the output directory
// appears whole or not at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace garden::vision {

struct ImageRecordsOptions {
  std::string image_dir;        // a folder per class, images inside (any depth)
  std::string mnist_dir;        // or: MNIST's four IDX files (gzipped or not)
  std::string output_dir;       // must not exist, or be empty
  int64_t train_shards = 4;
  int64_t validation_shards = 1;
  // image_dir only: this fraction of each class (rounded) goes to
  // validation-*, chosen by a hash of the seed and the file's path within
  // image_dir, so the split does not depend on the order files are listed
  // in and a file added later does not move the others. MNIST's split is
  // its own: train-* from its 60,000, validation-* from its 10,000.
  double validation_fraction = 0.0;
  int64_t seed = 1;
};

struct ImageRecordsReport {
  std::vector<std::string> class_names;  // label order
  int64_t train_images = 0;
  int64_t validation_images = 0;
  std::vector<std::string> files;  // written, in output_dir
};

ImageRecordsReport create_image_records(const ImageRecordsOptions& options);

// An image file of an ImageFolder tree: the class folders sorted by name
// (bytes, as Python's sorted() orders ASCII names) give the labels; files
// with the extensions torchvision's ImageFolder reads that Garden decodes
// (.jpg, .jpeg, .png, any letter case), sorted by path. Folders without such
// files are not classes (torchvision refuses them; here they are skipped and
// counted). Hidden entries (leading '.') are skipped.
struct FolderImage {
  std::string path;      // full path
  std::string relative;  // within the image directory, for messages and the split
  int64_t label = 0;
};
struct ImageFolder {
  std::vector<std::string> class_names;
  std::vector<FolderImage> images;
  std::vector<std::string> skipped;  // files with other extensions, relative
};
ImageFolder list_image_folder(const std::string& directory);

// MNIST's IDX files: images (magic 0x00000803, count, rows, cols, then the
// bytes) and labels (0x00000801, count, then the bytes), read through zlib
// so the .gz files as published and their unpacked copies both work.
struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count x rows x cols
};
IdxImages read_idx_images(const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

// The standard names in `directory`: train-images-idx3-ubyte[.gz] etc.
// ("train" or "t10k"); throws naming what is missing.
std::string find_mnist_file(const std::string& directory, const std::string& split,
                            const std::string& kind);

// The hash the split and the record order use (FNV-1a, 64 bits, of the
// seed's decimal digits, '/', the salt, '/', the text).
uint64_t split_hash(int64_t seed, const std::string& salt, const std::string& text);

}  // namespace garden::vision
