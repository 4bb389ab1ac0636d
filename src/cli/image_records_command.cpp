#include "garden/cli/image_records_command.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "garden/vision/data/image_records.h"

namespace garden {

CLI::App* add_create_image_records_command(CLI::App& app) {
  auto options = std::make_shared<vision::ImageRecordsOptions>();
  auto* command = app.add_subcommand(
      "create_image_records",
      "Images (a folder per class, or MNIST's IDX files) -> sharded TFRecords of tf.Examples "
      "with Model Garden's image features (image/encoded, image/class/label, ...)");
  auto* image_dir = command->add_option(
      "--image_dir", options->image_dir,
      "A folder per class (labels: the folder names sorted), .jpg/.jpeg/.png inside");
  auto* mnist_dir = command->add_option(
      "--mnist_dir", options->mnist_dir,
      "MNIST's four IDX files (train-images-idx3-ubyte[.gz], ...); t10k becomes validation-*");
  image_dir->excludes(mnist_dir);
  command->add_option("--output_dir", options->output_dir,
                      "New (or empty) folder: train-NNNNN-of-NNNNN.tfrecord, validation-..., "
                      "labels.txt; written whole or not at all")
      ->required();
  command->add_option("--train_shards", options->train_shards, "Files of train-*")
      ->capture_default_str();
  command->add_option("--validation_shards", options->validation_shards, "Files of validation-*")
      ->capture_default_str();
  command
      ->add_option("--validation_fraction", options->validation_fraction,
                   "--image_dir: this share of each class goes to validation-*, chosen by a hash "
                   "of --seed and the file's path")
      ->capture_default_str();
  command->add_option("--seed", options->seed, "Seed of the split and of the record order")
      ->capture_default_str();
  command->callback([options] {
    const auto report = vision::create_image_records(*options);
    std::cout << "classes:    " << report.class_names.size() << " (";
    for (std::size_t i = 0; i < report.class_names.size(); ++i)
      std::cout << (i ? ", " : "") << i << ": " << report.class_names[i];
    std::cout << ")\n"
              << "train:      " << report.train_images << " images\n"
              << "validation: " << report.validation_images << " images\n";
    for (const auto& file : report.files)
      std::cout << "output:     " << options->output_dir << "/" << file << "\n";
  });
  return command;
}

}  // namespace garden
