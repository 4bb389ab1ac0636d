// `garden create_image_records ...`: a folder per class (ImageFolder) or
// MNIST's IDX files -> sharded image TFRecords with Model Garden's feature
// names; see vision::create_image_records.
#pragma once

namespace CLI {
class App;
}

namespace garden {

// Adds the `create_image_records` subcommand (--image_dir or --mnist_dir,
// --output_dir, --train_shards, --validation_shards,
// --validation_fraction, --seed). Prints the classes, the counts and the
// files on stdout. The work runs in the subcommand's callback during
// parse() and throws garden::Error (one line) on failure, leaving no output
// directory.
CLI::App* add_create_image_records_command(CLI::App& app);

}  // namespace garden
