#include "garden/vision/data/image_records.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <utility>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/staged_directory.h"
#include "garden/data/example.h"
#include "garden/data/tfrecord.h"
#include "garden/vision/data/image_codec.h"

namespace garden::vision {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string text) {
  for (char& c : text)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return text;
}

bool decodable_extension(const fs::path& path) {
  const std::string extension = lower(path.extension().string());
  return extension == ".jpg" || extension == ".jpeg" || extension == ".png";
}

bool hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

// Big-endian 32-bit, from a gzFile; throws naming the file.
uint32_t read_u32(gzFile file, const std::string& path, const char* what) {
  unsigned char b[4];
  if (gzread(file, b, 4) != 4) throw Error("IDX file '" + path + "': ends before its " + what);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

GzFile open_idx(const std::string& path) {
  check_input_file(path, "IDX file");
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw Error("IDX file '" + path + "' cannot be opened");
  return file;
}

void read_exact(gzFile file, uint8_t* out, std::size_t size, const std::string& path,
                const std::string& what) {
  std::size_t done = 0;
  while (done < size) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(size - done, 1u << 30));
    const int got = gzread(file, out + done, chunk);
    if (got <= 0)
      throw Error("IDX file '" + path + "': ends after " + std::to_string(done) + " of the " +
                  std::to_string(size) + " bytes of its " + what + " (damaged or truncated)");
    done += static_cast<std::size_t>(got);
  }
  unsigned char extra;
  if (gzread(file, &extra, 1) != 0)
    throw Error("IDX file '" + path + "': has bytes past its " + what);
}

std::string shard_name(const std::string& split, int64_t index, int64_t shards) {
  char name[64];
  std::snprintf(name, sizeof name, "%s-%05lld-of-%05lld.tfrecord", split.c_str(),
                static_cast<long long>(index), static_cast<long long>(shards));
  return name;
}

// The record of one image: its bytes as they are, its decoded size.
std::string image_record(const std::string& bytes, const std::string& source, int64_t label,
                         const std::string& class_name) {
  // Decoded whole once, so a damaged file fails here and not in training.
  const Image image = decode_image(bytes, 0, source);
  data::Example example;
  example["image/encoded"] = data::FeatureValue::of_bytes({bytes});
  example["image/format"] =
      data::FeatureValue::of_bytes({image_format_name(sniff_image_format(bytes))});
  example["image/height"] = data::FeatureValue::of_ints({image.height});
  example["image/width"] = data::FeatureValue::of_ints({image.width});
  example["image/class/label"] = data::FeatureValue::of_ints({label});
  example["image/class/text"] = data::FeatureValue::of_bytes({class_name});
  return data::serialize_example(example);
}

// Writers for one split's shards, records dealt round-robin.
class Shards {
 public:
  Shards(const fs::path& directory, const std::string& split, int64_t count,
         std::vector<std::string>& names) {
    for (int64_t i = 0; i < count; ++i) {
      const std::string name = shard_name(split, i, count);
      names.push_back(name);
      writers_.emplace_back((directory / name).string());
    }
  }
  void write(const std::string& record) {
    writers_[next_].write(record);
    next_ = (next_ + 1) % writers_.size();
  }
  void close() {
    for (auto& writer : writers_) writer.close();
  }

 private:
  std::vector<data::TFRecordWriter> writers_;
  std::size_t next_ = 0;
};

void check_options(const ImageRecordsOptions& o) {
  if (o.image_dir.empty() == o.mnist_dir.empty())
    throw Error("create_image_records: give one of --image_dir or --mnist_dir");
  if (o.output_dir.empty()) throw Error("create_image_records: --output_dir is required");
  if (o.train_shards < 1 || o.validation_shards < 1)
    throw Error("create_image_records: --train_shards and --validation_shards must be at least 1");
  if (!(o.validation_fraction >= 0.0 && o.validation_fraction < 1.0))
    throw Error("create_image_records: --validation_fraction must be in [0, 1), got " +
                std::to_string(o.validation_fraction));
  if (!o.mnist_dir.empty() && o.validation_fraction > 0)
    throw Error(
        "create_image_records: --validation_fraction applies to --image_dir; MNIST's "
        "validation records are its 10,000 test images");
  if (fs::exists(o.output_dir) && (!fs::is_directory(o.output_dir) || !fs::is_empty(o.output_dir)))
    throw Error("create_image_records: --output_dir '" + o.output_dir +
                "' exists and is not an empty directory");
}

void write_labels(const fs::path& directory, const std::vector<std::string>& class_names,
                  ImageRecordsReport& report) {
  std::string text;
  for (const auto& name : class_names) text += name + "\n";
  std::ofstream out(directory / "labels.txt", std::ios::binary);
  out << text;
  if (!out.flush()) throw Error("create_image_records: cannot write labels.txt");
  report.files.push_back("labels.txt");
}

void fill_from_folder(const ImageRecordsOptions& o, const fs::path& staging,
                      ImageRecordsReport& report) {
  ImageFolder folder = list_image_folder(o.image_dir);
  report.class_names = folder.class_names;
  // Per class, the files with the smallest hashes are validation.
  std::map<int64_t, std::vector<const FolderImage*>> by_class;
  for (const auto& image : folder.images) by_class[image.label].push_back(&image);
  std::vector<const FolderImage*> train, validation;
  for (auto& [label, images] : by_class) {
    std::sort(images.begin(), images.end(), [&](const FolderImage* a, const FolderImage* b) {
      return split_hash(o.seed, "split", a->relative) < split_hash(o.seed, "split", b->relative);
    });
    const auto held = static_cast<std::size_t>(
        std::llround(o.validation_fraction * static_cast<double>(images.size())));
    validation.insert(validation.end(), images.begin(), images.begin() + held);
    train.insert(train.end(), images.begin() + held, images.end());
  }
  // Records in an order that mixes the classes, the same for every run.
  for (auto* list : {&train, &validation})
    std::sort(list->begin(), list->end(), [&](const FolderImage* a, const FolderImage* b) {
      return split_hash(o.seed, "order", a->relative) < split_hash(o.seed, "order", b->relative);
    });
  const auto write_split = [&](const std::vector<const FolderImage*>& images,
                               const std::string& split, int64_t shards) {
    // The manifest: which file went to this split, with its label, so that
    // another program (a peer, an audit) can use the same split.
    std::ofstream manifest(staging / (split + "_files.txt"), std::ios::binary);
    for (const FolderImage* image : images)
      manifest << image->relative << '\t' << image->label << '\n';
    if (!manifest.flush())
      throw Error("create_image_records: cannot write " + split + "_files.txt");
    report.files.push_back(split + "_files.txt");
    Shards writer(staging, split, shards, report.files);
    for (const FolderImage* image : images) {
      const std::string bytes = read_file(image->path, "image");
      writer.write(image_record(bytes, "image '" + image->path + "'", image->label,
                                folder.class_names[static_cast<std::size_t>(image->label)]));
    }
    writer.close();
  };
  write_split(train, "train", o.train_shards);
  report.train_images = static_cast<int64_t>(train.size());
  if (!validation.empty()) {
    write_split(validation, "validation", o.validation_shards);
    report.validation_images = static_cast<int64_t>(validation.size());
  }
  write_labels(staging, folder.class_names, report);
}

void fill_from_mnist(const ImageRecordsOptions& o, const fs::path& staging,
                     ImageRecordsReport& report) {
  for (int digit = 0; digit < 10; ++digit) report.class_names.push_back(std::to_string(digit));
  const auto write_split = [&](const std::string& mnist_split, const std::string& split,
                               int64_t shards) {
    const std::string images_path = find_mnist_file(o.mnist_dir, mnist_split, "images");
    const std::string labels_path = find_mnist_file(o.mnist_dir, mnist_split, "labels");
    const IdxImages images = read_idx_images(images_path);
    const std::vector<uint8_t> labels = read_idx_labels(labels_path);
    if (static_cast<int64_t>(labels.size()) != images.count)
      throw Error("MNIST: '" + images_path + "' holds " + std::to_string(images.count) +
                  " images but '" + labels_path + "' " + std::to_string(labels.size()) + " labels");
    std::vector<int64_t> order(static_cast<std::size_t>(images.count));
    for (int64_t i = 0; i < images.count; ++i) order[static_cast<std::size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return split_hash(o.seed, "order", split + "/" + std::to_string(a)) <
             split_hash(o.seed, "order", split + "/" + std::to_string(b));
    });
    Shards writer(staging, split, shards, report.files);
    const std::size_t size = static_cast<std::size_t>(images.rows * images.cols);
    for (int64_t index : order) {
      const int label = labels[static_cast<std::size_t>(index)];
      if (label > 9)
        throw Error("MNIST: '" + labels_path + "', label " + std::to_string(index) + " is " +
                    std::to_string(label) + ", not a digit");
      Image image;
      image.height = images.rows;
      image.width = images.cols;
      image.channels = 1;
      const auto* begin = images.pixels.data() + static_cast<std::size_t>(index) * size;
      image.pixels.assign(begin, begin + size);
      writer.write(image_record(encode_png(image),
                                "'" + images_path + "', image " + std::to_string(index), label,
                                std::to_string(label)));
    }
    writer.close();
    return images.count;
  };
  report.train_images = write_split("train", "train", o.train_shards);
  report.validation_images = write_split("t10k", "validation", o.validation_shards);
  write_labels(staging, report.class_names, report);
}

}  // namespace

uint64_t split_hash(int64_t seed, const std::string& salt, const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  const auto add = [&](const std::string& part) {
    for (unsigned char c : part) {
      hash ^= c;
      hash *= 1099511628211ull;
    }
  };
  add(std::to_string(seed));
  add("/");
  add(salt);
  add("/");
  add(text);
  return hash;
}

ImageFolder list_image_folder(const std::string& directory) {
  if (!fs::is_directory(directory))
    throw Error("--image_dir '" + directory + "' is not a directory");
  std::vector<fs::path> class_dirs;
  for (const auto& entry : fs::directory_iterator(directory))
    if (entry.is_directory() && !hidden(entry.path())) class_dirs.push_back(entry.path());
  std::sort(class_dirs.begin(), class_dirs.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string() < b.filename().string();
  });
  ImageFolder folder;
  for (const auto& class_dir : class_dirs) {
    std::vector<FolderImage> images;
    for (auto it = fs::recursive_directory_iterator(class_dir); it != fs::end(it); ++it) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file()) continue;
      // The path as it is inside --image_dir, a class folder that is a
      // symbolic link included (fs::relative would resolve the link).
      const std::string relative =
          (class_dir.filename() / it->path().lexically_relative(class_dir)).generic_string();
      if (!decodable_extension(it->path())) {
        folder.skipped.push_back(relative);
        continue;
      }
      images.push_back({it->path().string(), relative, 0});
    }
    if (images.empty()) continue;
    std::sort(images.begin(), images.end(),
              [](const FolderImage& a, const FolderImage& b) { return a.relative < b.relative; });
    const auto label = static_cast<int64_t>(folder.class_names.size());
    folder.class_names.push_back(class_dir.filename().string());
    for (auto& image : images) {
      image.label = label;
      folder.images.push_back(std::move(image));
    }
  }
  std::sort(folder.skipped.begin(), folder.skipped.end());
  if (folder.class_names.empty())
    throw Error("--image_dir '" + directory +
                "' has no class folders with .jpg, .jpeg or .png files (a folder per class)");
  return folder;
}

IdxImages read_idx_images(const std::string& path) {
  GzFile file = open_idx(path);
  const uint32_t magic = read_u32(file.get(), path, "magic number");
  if (magic != 0x00000803)
    throw Error("IDX file '" + path + "': magic number " + std::to_string(magic) +
                " is not that of IDX images (2051)");
  IdxImages images;
  images.count = read_u32(file.get(), path, "image count");
  images.rows = read_u32(file.get(), path, "row count");
  images.cols = read_u32(file.get(), path, "column count");
  if (images.rows <= 0 || images.cols <= 0 || images.rows > 4096 || images.cols > 4096)
    throw Error("IDX file '" + path + "': images of " + std::to_string(images.rows) + "x" +
                std::to_string(images.cols) + " pixels");
  images.pixels.resize(static_cast<std::size_t>(images.count * images.rows * images.cols));
  read_exact(file.get(), images.pixels.data(), images.pixels.size(), path, "pixels");
  return images;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  GzFile file = open_idx(path);
  const uint32_t magic = read_u32(file.get(), path, "magic number");
  if (magic != 0x00000801)
    throw Error("IDX file '" + path + "': magic number " + std::to_string(magic) +
                " is not that of IDX labels (2049)");
  std::vector<uint8_t> labels(read_u32(file.get(), path, "label count"));
  read_exact(file.get(), labels.data(), labels.size(), path, "labels");
  return labels;
}

std::string find_mnist_file(const std::string& directory, const std::string& split,
                            const std::string& kind) {
  const std::string stem = split + "-" + kind + (kind == "images" ? "-idx3-ubyte" : "-idx1-ubyte");
  for (const std::string& name : {stem, stem + ".gz"}) {
    const fs::path path = fs::path(directory) / name;
    if (fs::is_regular_file(path)) return path.string();
  }
  throw Error("--mnist_dir '" + directory + "' has neither " + stem + " nor " + stem + ".gz");
}

ImageRecordsReport create_image_records(const ImageRecordsOptions& options) {
  check_options(options);
  ImageRecordsReport report;
  write_directory_whole(options.output_dir, [&](const fs::path& staging) {
    if (!options.image_dir.empty())
      fill_from_folder(options, staging, report);
    else
      fill_from_mnist(options, staging, report);
  });
  return report;
}

}  // namespace garden::vision
