// The best checkpoint a run exports (trainer.best_checkpoint_export_subdir)
// is found by everything that takes a checkpoint: `garden translate
// --checkpoint=best` or the export directory itself, and task.init_checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliFixture;
using garden_test::CliRun;
using garden_test::slurp;
using garden_test::spit;

class BestCheckpointCliTest : public CliFixture {
 protected:
  // A tiny translation run that exports its best checkpoint to best/.
  void train(const std::string& model_dir, const std::string& extra_yaml = "") {
    std::ifstream sample(std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv");
    std::ofstream pairs(dir_ / "pairs.tsv");
    std::string line;
    for (int i = 0; i < 16 && std::getline(sample, line); ++i) pairs << line << '\n';
    pairs.close();
    const std::string data = (dir_ / "pairs.tsv").string();
    spit(dir_ / "tiny.yaml",
         "task:\n"
         "  sentencepiece_vocab_size: 100\n"
         "  model:\n"
         "    embedding_width: 32\n"
         "    encoder: {num_layers: 1, num_attention_heads: 2, intermediate_size: 64}\n"
         "    decoder: {num_layers: 1, num_attention_heads: 2, intermediate_size: 64}\n"
         "  train_data: {input_path: '" +
             data +
             "', global_batch_size: 512}\n"
             "  validation_data: {input_path: '" +
             data + "', global_batch_size: 512}\n" + extra_yaml +
             "trainer:\n"
             "  train_steps: 40\n"
             "  steps_per_loop: 10\n"
             "  summary_interval: 10\n"
             "  validation_interval: 20\n"
             "  checkpoint_interval: 20\n"
             "  best_checkpoint_export_subdir: best\n"
             "  best_checkpoint_eval_metric: validation_loss\n"
             "  best_checkpoint_metric_comp: lower\n");
    const CliRun run = garden("train --experiment wmt_transformer/demo --config_file '" +
                              (dir_ / "tiny.yaml").string() + "' --model_dir '" + model_dir + "'");
    ASSERT_EQ(run.status, 0) << run.err;
  }
};

TEST_F(BestCheckpointCliTest, TranslateAndInitCheckpointFindTheExportedBestCheckpoint) {
  const std::string model_dir = path("model");
  ASSERT_NO_FATAL_FAILURE(train(model_dir));
  ASSERT_TRUE(fs::exists(fs::path(model_dir) / "best" / "best_ckpt"));
  spit(dir_ / "in.txt", "Open file\n");
  const std::string best = (fs::path(model_dir) / "best" / "best_ckpt").string();
  for (const std::string& checkpoint :
       std::vector<std::string>{"best", (fs::path(model_dir) / "best").string(), best}) {
    const CliRun run = garden("translate --model_dir '" + model_dir + "' --checkpoint '" +
                              checkpoint + "' --input '" + path("in.txt") + "'");
    EXPECT_EQ(run.status, 0) << checkpoint << ": " << run.err;
    EXPECT_NE(run.err.find("checkpoint " + best), std::string::npos)
        << checkpoint << ": " << run.err;
    EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  }
  // A new run starts from the exported best checkpoint.
  const std::string second = path("second");
  ASSERT_NO_FATAL_FAILURE(
      train(second, "  init_checkpoint: '" + (fs::path(model_dir) / "best").string() + "'\n"));
  const std::string log = slurp(fs::path(second) / "train.log");
  EXPECT_NE(log.find("initialized the model from " + best), std::string::npos) << log;
}

}  // namespace
