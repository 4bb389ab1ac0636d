// TensorFX's API on Garden: the schema / metadata / features files and each of
// their errors, every transform against hand-computed values, the argument
// parser, Configuration from TF_CONFIG, and `garden fx train` / `predict` on
// the bundled iris sample (CSV and TFRecord) with the job directory read back.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "event_files.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/core/checkpoint.h"
#include "garden/distribute/cluster.h"
#include "garden/fx/prediction.h"
#include "safetensors_reader.h"

namespace fs = std::filesystem;
namespace fx = garden::fx;

namespace {

const std::string kIris = std::string(GARDEN_DATA_DIR) + "/fx/iris/";

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const garden::Error& e) {
    return e.what();
  }
  return "";
}

const char* kSchema = R"(fields:
- name: label
  type: discrete
- name: x
  type: real
- name: n
  type: integer
)";

const char* kMetadata = R"({"label": {"vocab": {"entries": ["a", "b"]}},
  "x": {"min": 1.0, "max": 5.0}, "n": {"min": 0, "max": 10}})";

}  // namespace

TEST(FxDataTest, SchemaMetadataAndFeaturesParseAsTensorFxWritesThem) {
  const auto schema = fx::Schema::parse(kSchema, "s.yaml");
  ASSERT_EQ(schema.fields().size(), 3u);
  EXPECT_EQ(schema.names(), (std::vector<std::string>{"label", "x", "n"}));
  EXPECT_EQ(schema.find("n")->type, fx::FieldType::kInteger);
  EXPECT_EQ(schema.find("x")->length, 1);
  EXPECT_EQ(schema.find("missing"), nullptr);
  // Both forms of a vocabulary.
  const auto metadata = fx::Metadata::parse(kMetadata, "m.json");
  EXPECT_EQ(metadata.entries("label"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(fx::Metadata::parse(R"({"l": {"entries": ["z"]}})").entries("l"),
            std::vector<std::string>{"z"});
  EXPECT_DOUBLE_EQ(metadata.max("x"), 5.0);
  const auto features = fx::FeatureSet::parse(R"(features:
- name: X
  type: concat
  features:
  - name: x
    type: scale
  - name: lx
    type: log
    fields: x
- name: Y
  type: target
  fields: label
- name: b
  type: bucketize
  fields: x
  transform:
    boundaries: 2,3
- name: plain
  fields: " x "
)",
                                              "f.yaml");
  EXPECT_EQ(features.features().size(), 4u);
  EXPECT_EQ(features.find("X")->features[1].fields, std::vector<std::string>{"x"});
  EXPECT_EQ(features.find("X")->features[0].fields, std::vector<std::string>{"x"})
      << "a feature without fields reads the field of its own name";
  EXPECT_EQ(features.find("plain")->type, fx::FeatureType::kIdentity);
  EXPECT_EQ(features.find("plain")->fields, std::vector<std::string>{"x"});
  EXPECT_EQ(features.target()->name, "Y");
  EXPECT_EQ(features.find("b")->transform.at("boundaries"), "2,3");
}

TEST(FxDataTest, EachFileErrorNamesTheFileAndTheField) {
  EXPECT_EQ(error_of([] { fx::Schema::parse("fields:\n- name: a\n  type: numeric\n", "s.yaml"); }),
            "s.yaml field 'a' has type 'numeric'; the types are integer, real and discrete");
  EXPECT_NE(error_of([] {
              fx::Schema::parse("columns: []\n", "s.yaml");
            }).find("s.yaml has no 'fields:'"),
            std::string::npos);
  EXPECT_EQ(error_of([] { fx::Metadata::parse("{}", "m.json").min("x"); }),
            "m.json has no 'min' for field 'x'");
  EXPECT_NE(error_of([] { fx::Metadata::parse("{", "m.json"); }).find("m.json is not valid JSON"),
            std::string::npos);
  EXPECT_EQ(
      error_of([] { fx::FeatureSet::parse("features:\n- name: f\n  type: one_hot\n", "f.yaml"); }),
      "f.yaml feature 'f' has type 'one_hot'; the types are identity, target, concat, log, "
      "scale, bucketize, one-hot");
  // Found by fuzz/fx_features_fuzz.cpp: a mapping where a name belongs got
  // out as yaml-cpp's own exception, naming no file.
  EXPECT_EQ(error_of([] {
              fx::FeatureSet::parse("features:\n- name:\n    a: 1\n", "f.yaml");
            }).rfind("f.yaml: yaml-cpp: error at line 3", 0),
            0u);
  // Found by fuzz/fx_schema_fuzz.cpp: a name that is not UTF-8 text did not
  // survive being written back.
  EXPECT_EQ(error_of([] { fx::Schema::parse("fields:\n- name: a\xff\n  type: real\n", "s.yaml"); }),
            "s.yaml field 1: the name must be UTF-8 text without control characters");
  EXPECT_EQ(error_of([] {
              fx::Schema::parse("fields:\n- name: [a]\n  type: real\n", "s.yaml");
            }).rfind("s.yaml: yaml-cpp: error at line 2", 0),
            0u);
  const auto schema = fx::Schema::parse(kSchema, "s.yaml");
  const auto metadata = fx::Metadata::parse(kMetadata, "m.json");
  const auto transformer_error = [&](const std::string& yaml) {
    return error_of(
        [&] { fx::Transformer(schema, metadata, fx::FeatureSet::parse(yaml, "f.yaml")); });
  };
  EXPECT_EQ(transformer_error("features:\n- name: f\n  fields: nope\n"),
            "f.yaml feature 'f' names field 'nope', which s.yaml does not have");
  EXPECT_EQ(transformer_error("features:\n- name: f\n  type: log\n  fields: label\n"),
            "f.yaml feature 'f': a log transform needs a numeric field, and 'label' is discrete");
  EXPECT_EQ(transformer_error("features:\n- name: f\n  type: one-hot\n  fields: x\n"),
            "f.yaml feature 'f': a one-hot transform needs a discrete field, and 'x' is real");
  EXPECT_NE(transformer_error("features:\n- name: f\n  type: bucketize\n  fields: x\n")
                .find("is a bucketize with no transform.boundaries"),
            std::string::npos);
  EXPECT_EQ(transformer_error("features:\n- name: f\n  type: scale\n  fields: n\n"
                              "- name: g\n  type: one-hot\n  fields: label\n"),
            "");
  // A CSV cell of the wrong type, and a line of the wrong width.
  EXPECT_EQ(error_of([&] {
              fx::parse_csv(schema, {"a,1.5,2", "b,x1,3"}, "d.csv");
            }),
            "d.csv line 2, field 'x': 'x1' is not a real number");
  EXPECT_EQ(error_of([&] { fx::parse_csv(schema, {"a,1.5,2.5"}, "d.csv"); }),
            "d.csv line 1, field 'n': '2.5' is not an integer");
  EXPECT_EQ(error_of([&] { fx::parse_csv(schema, {"a,1.5"}, "d.csv"); }),
            "d.csv line 1 has 2 columns; s.yaml has 3 fields");
}

TEST(FxDataTest, EveryTransformGivesTheHandComputedValues) {
  const auto schema = fx::Schema::parse(kSchema, "s.yaml");
  const auto metadata = fx::Metadata::parse(kMetadata, "m.json");
  const auto features = fx::FeatureSet::parse(R"(features:
- name: X
  type: concat
  features:
  - name: x
    type: scale
  - name: r
    type: scale
    fields: x
    transform: {min: -1, max: 1}
  - name: lx
    type: log
    fields: x
  - name: b
    type: bucketize
    fields: x
    transform:
      boundaries: [2, 3]
  - name: h
    type: one-hot
    fields: label
- name: Y
  type: target
  fields: label
- name: n
)",
                                              "f.yaml");
  fx::Transformer transformer(schema, metadata, features);
  EXPECT_EQ(transformer.width("X"), 1 + 1 + 1 + 3 + 3);
  // An empty cell is 0 (and ""), as in TensorFX.
  const auto instances = fx::parse_csv(schema, {"a,1,4", "b,3,", "zz,6,7", ",2,1"}, "d.csv");
  const auto out = transformer.transform(instances);
  const at::Tensor x = out.tensors.at("X");
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{4, 9}));
  const double values[4] = {1, 3, 6, 2};
  for (int64_t r = 0; r < 4; ++r) {
    const double v = values[r];
    EXPECT_NEAR(x[r][0].item<double>(), (v - 1) / 4, 1e-6);          // scale to [0, 1], no clipping
    EXPECT_NEAR(x[r][1].item<double>(), (v - 1) / 4 * 2 - 1, 1e-6);  // onto [-1, 1]
    EXPECT_NEAR(x[r][2].item<double>(), std::log(v + 1), 1e-6);      // ln(x + 1)
  }
  // Buckets (-inf, 2), [2, 3), [3, inf): 1 -> 0, 3 -> 2 (a boundary goes up), 6 -> 2, 2 -> 1.
  const int expected_bucket[4] = {0, 2, 2, 1};
  // One-hot over a, b and one slot for anything else: a, b, zz (other), "" (other).
  const int expected_slot[4] = {0, 1, 2, 2};
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(x[r][3 + j].item<float>(), j == expected_bucket[r] ? 1.0f : 0.0f) << r << "," << j;
      EXPECT_EQ(x[r][6 + j].item<float>(), j == expected_slot[r] ? 1.0f : 0.0f) << r << "," << j;
    }
  EXPECT_EQ(out.strings.at("Y"), (std::vector<std::string>{"a", "b", "zz", ""}));
  // identity of an integer field; an empty cell is 0.
  const at::Tensor n = out.tensors.at("n");
  EXPECT_EQ(n.sizes(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(n[1][0].item<float>(), 0.0f);
  EXPECT_EQ(n[2][0].item<float>(), 7.0f);
  // A prediction line without the target column gets an empty one in front.
  const auto predicted = fx::parse_csv(schema, {"2.5,3"}, "input", /*prediction=*/true);
  EXPECT_EQ(predicted.discrete.at("label"), std::vector<std::string>{""});
  EXPECT_EQ(predicted.numeric.at("x")[0][0].item<float>(), 2.5f);
}

TEST(FxDataTest, CsvAndTfRecordSamplesReadTheSameInstances) {
  const auto csv = fx::DataSet::csv(kIris + "schema.yaml", kIris + "metadata.json",
                                    kIris + "features.yaml", {{"train", kIris + "train.csv"}});
  const auto examples =
      fx::DataSet::examples(kIris + "schema.yaml", kIris + "metadata.json", kIris + "features.yaml",
                            {{"train", kIris + "train.tfrecord"}});
  const auto a = csv.read("train"), b = examples.read("train");
  EXPECT_EQ(a.rows, 120);
  EXPECT_EQ(b.rows, 120);
  EXPECT_EQ(a.discrete.at("species"), b.discrete.at("species"));
  for (const auto& [name, tensor] : a.numeric)
    EXPECT_TRUE(torch::allclose(tensor, b.numeric.at(name))) << name;
  EXPECT_NE(error_of([&] { csv.read("eval"); }).find("no 'eval' source"), std::string::npos);
  EXPECT_NE(error_of([] {
              fx::DataSet::csv(kIris + "schema.yaml", "", "", {{"train", "/nonexistent/*.csv"}})
                  .read("train");
            }).find("--data-train '/nonexistent/*.csv' matches no file"),
            std::string::npos);
}

TEST(FxArgumentsTest, DefaultsIndexedLayersAndErrors) {
  const auto defaults = fx::ModelArguments::defaults<fx::FeedForwardClassificationArguments>();
  EXPECT_EQ(defaults->max_steps, 1000);
  EXPECT_EQ(defaults->batch_size, 128);
  EXPECT_EQ(defaults->epochs, 0);
  EXPECT_EQ(defaults->checkpoint_interval_secs, 300);
  EXPECT_EQ(defaults->log_interval_steps, 100);
  EXPECT_EQ(defaults->log_level, "INFO");
  EXPECT_DOUBLE_EQ(defaults->learning_rate, 0.01);
  EXPECT_TRUE(defaults->hidden_layers.empty());
  const auto args = fx::ModelArguments::parse<fx::FeedForwardClassificationArguments>(
      {"--batch-size", "5", "--hidden-layers:2", "10", "--hidden-layers:1", "20", "--job-dir",
       "/tmp/j", "--learning-rate=0.5"},
      /*parse_job=*/true);
  EXPECT_EQ(args->batch_size, 5);
  EXPECT_EQ(args->output, "/tmp/j");
  EXPECT_DOUBLE_EQ(args->learning_rate, 0.5);
  ASSERT_EQ(args->hidden_layers.size(), 2u);
  EXPECT_EQ(args->hidden_layers[0].name, "layer_0");
  EXPECT_EQ(args->hidden_layers[0].units, 20);
  EXPECT_EQ(args->hidden_layers[1].units, 10);
  EXPECT_EQ(args->hidden_layers[1].activation, "relu");
  using FF = fx::FeedForwardClassificationArguments;
  EXPECT_EQ(error_of([] {
              fx::ModelArguments::parse<FF>({"--batch-sise", "5"});
            }),
            "unknown argument --batch-sise (see --help)");
  EXPECT_EQ(error_of([] {
              fx::ModelArguments::parse<FF>({"--batch-size", "five"});
            }),
            "argument --batch-size: 'five' is not a whole number");
  EXPECT_EQ(error_of([] {
              fx::ModelArguments::parse<FF>({"--max-steps:2", "7"});
            }),
            "unknown argument --max-steps:2: --max-steps takes no :N index");
  EXPECT_EQ(error_of([] {
              fx::ModelArguments::parse<FF>({"--hidden-layers:3", "7"});
            }),
            "argument --hidden-layers:1 is missing (layers are numbered from 1 without gaps)");
  EXPECT_EQ(error_of([] {
              fx::ModelArguments::parse<FF>({"--log-level", "LOUD"});
            }),
            "argument --log-level: 'LOUD' is not one of FATAL, ERROR, WARN, INFO, DEBUG");
  EXPECT_EQ(error_of([] { fx::ModelArguments::parse<FF>({"--max-steps"}); }),
            "argument --max-steps needs a value");
  EXPECT_EQ(error_of([] {
              fx::ModelArguments::parse<FF>({"--batch-size", "0"});
            }),
            "argument --batch-size: 0 must be >= 1");
}

TEST(FxConfigurationTest, FromTfConfig) {
  const auto local = fx::Configuration::local();
  EXPECT_TRUE(local.master());
  EXPECT_FALSE(local.distributed());
  EXPECT_EQ(local.device(), "/job:master/task:0");
  const auto empty = fx::Configuration::from_tf_config("");
  EXPECT_TRUE(empty.master());
  EXPECT_EQ(empty.job().at("local"), true);
  const auto worker = fx::Configuration::from_tf_config(
      R"({"task": {"type": "worker", "index": 1}, "cluster": {"master": ["m:1"], "worker": ["a:1", "b:1"], "ps": ["p:1"]}})");
  EXPECT_TRUE(worker.worker());
  EXPECT_FALSE(worker.master());
  EXPECT_TRUE(worker.distributed());
  EXPECT_EQ(worker.device(), "/job:worker/task:1");
  EXPECT_TRUE(fx::Configuration::from_tf_config(R"({"task": {"type": "ps"}, "cluster": {}})")
                  .param_server());
  // The cluster in Garden's terms: the master is the chief (rank 0), then
  // the workers, then the ps tasks; the rendezvous is at the master.
  const auto cluster = worker.resolve();
  EXPECT_EQ(cluster.strategy, "parameter_server");
  EXPECT_EQ(cluster.rank, 2);
  EXPECT_EQ(cluster.world_size, 4);
  EXPECT_EQ(cluster.num_workers, 2);
  EXPECT_EQ(cluster.num_ps, 1);
  EXPECT_EQ(cluster.master_addr, "m");
  EXPECT_EQ(cluster.master_port, 1);
  EXPECT_EQ(worker.create_device_setter(*fx::ModelArguments::defaults()),
            "variables: /job:ps (1 tasks, sharded by size); operations: /job:worker/task:1");
  const auto ps = fx::Configuration::from_tf_config(
      R"({"task": {"type": "ps", "index": 0}, "cluster": {"master": ["m:1"], "worker": ["a:1"], "ps": ["p:1", "q:1"]}})");
  EXPECT_EQ(ps.resolve().rank, 2);
  EXPECT_TRUE(ps.resolve().is_ps());
  // garden launch --ps writes "chief": the master.
  const auto chief = fx::Configuration::from_tf_config(
      R"({"task": {"type": "chief", "index": 0}, "cluster": {"chief": ["m:1"], "worker": ["a:1"], "ps": ["p:1"]}})");
  EXPECT_TRUE(chief.master());
  EXPECT_TRUE(chief.resolve().is_chief());
  // Local: nothing to resolve or connect.
  EXPECT_FALSE(local.resolve().distributed());
  EXPECT_EQ(local.create_server(), nullptr);
  EXPECT_EQ(local.create_device_setter(*fx::ModelArguments::defaults()), "");
  // What cannot be trained on is one line.
  EXPECT_NE(
      error_of([] {
        fx::Configuration::from_tf_config(
            R"({"task": {"type": "master"}, "cluster": {"master": ["m:1"], "worker": ["a:1"]}})")
            .resolve();
      }).find("TF_CONFIG describes a cluster without ps tasks"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              fx::Configuration::from_tf_config(
                  R"({"task": {"type": "master"}, "cluster": {"worker": ["a:1"], "ps": ["p:1"]}})")
                  .resolve();
            }).find("no chief"),
            std::string::npos);
  EXPECT_EQ(error_of([] { fx::Configuration::from_tf_config(R"({"task": {"type": "boss"}})"); }),
            "TF_CONFIG task.type 'boss' is not one of master, chief, worker, ps");
  EXPECT_NE(error_of([] { fx::Configuration::from_tf_config("{"); }).find("not valid JSON"),
            std::string::npos);
}

namespace {

struct CliRun {
  int status = -1;
  std::string out, err;
};

CliRun run_garden(const std::string& args, const fs::path& dir) {
  const std::string command = "cd '" + kIris + "' && /usr/bin/timeout 120 '" +
                              std::string(GARDEN_CLI_PATH) + "' " + args + " >'" +
                              (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
  const int raw = std::system(command.c_str());
  CliRun run;
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream out(dir / "out"), err(dir / "err");
  std::stringstream o, e;
  o << out.rdbuf();
  e << err.rdbuf();
  run.out = o.str();
  run.err = e.str();
  return run;
}

class FxCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("garden_fx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// TensorFX's iris sample command line, as written (run_csv.sh), with
// Garden's --seed so that the test is the same run every time.
std::string sample(const std::string& output, const std::string& ext) {
  return "fx train --model feedforward_classification --output '" + output +
         "' --data-train train." + ext + " --data-eval eval." + ext +
         " --data-schema schema.yaml --data-metadata metadata.json --data-features features.yaml"
         " --log-level-tensorflow ERROR --log-level INFO --batch-size 5 --max-steps 2000"
         " --checkpoint-interval-secs 1 --hidden-layers:1 20 --hidden-layers:2 10 --seed 1";
}

}  // namespace

TEST_F(FxCliTest, TheIrisSampleTrainsOnCsvAndTfRecordAndPredicts) {
  for (const std::string ext : {"csv", "tfrecord"}) {
    const fs::path job = dir_ / ext;
    const CliRun run = run_garden(sample(job.string(), ext), dir_);
    ASSERT_EQ(run.status, 0) << run.err;
    // The last evaluation's accuracy, from the log and from the eval events.
    const auto at = run.err.rfind("Evaluation metric: ");
    ASSERT_NE(at, std::string::npos) << run.err;
    EXPECT_GE(std::stod(run.err.substr(at + 19)), 0.93) << ext << "\n" << run.err;
    using garden_test::events::scalars_in;
    const auto eval = scalars_in(job / "summaries" / "eval");
    ASSERT_TRUE(eval.count("metrics/accuracy")) << ext;
    EXPECT_GE(eval.at("metrics/accuracy").rbegin()->second, 0.93f);
    EXPECT_EQ(eval.at("metrics/accuracy").rbegin()->first, 2000);
    EXPECT_EQ(eval.at("metrics/accuracy").begin()->first, 1) << "an evaluation after step 1";
    const auto train = scalars_in(job / "summaries" / "train");
    ASSERT_TRUE(train.count("metrics/loss"));
    EXPECT_EQ(train.at("metrics/loss").size(), 20u) << "every 100 steps";
    EXPECT_TRUE(train.count("metrics/throughput"));
    // Each phase's "graph" (the module's variables) as text, in its own
    // summaries directory, as TensorFX adds its graphs.
    for (const char* phase : {"train", "eval", "prediction"}) {
      bool found = false;
      for (const auto& entry : fs::directory_iterator(job / "summaries" / phase))
        for (const auto& event : garden_test::events::read_events(entry.path().string()))
          if (garden_test::reference::has(event, garden_test::events::event_field::kSummary))
            for (const auto& value : garden_test::events::values_of(event))
              found |= garden_test::events::tag_of(value) == "graph";
      EXPECT_TRUE(found) << phase;
    }
    // TensorFX's histograms of each variable and its gradients, every 100
    // steps: layer_0 maps the 4 inputs to 20 units.
    const auto histograms = garden_test::events::histograms_in(job / "summaries" / "train");
    ASSERT_TRUE(histograms.count("inference/layer_0/weights")) << ext;
    EXPECT_EQ(histograms.at("inference/layer_0/weights").size(), 20u);
    const auto& weights = histograms.at("inference/layer_0/weights").at(2000);
    EXPECT_EQ(weights.num, 80.0);
    EXPECT_LT(weights.min, weights.max);
    EXPECT_EQ(histograms.at("inference/logits/biases").at(2000).num, 3.0);
    EXPECT_TRUE(histograms.count("inference/logits/weights.gradients"));
    // job.yaml: the arguments one option a line, and the (empty) TF_CONFIG.
    std::ifstream in(job / "job.yaml");
    std::stringstream yaml;
    yaml << in.rdbuf();
    EXPECT_NE(yaml.str().find("- --hidden-layers:1 20\n"), std::string::npos) << yaml.str();
    EXPECT_NE(yaml.str().find("config: {}"), std::string::npos) << yaml.str();
    const auto checkpoint = garden::latest_checkpoint((job / "checkpoints").string());
    ASSERT_TRUE(checkpoint.has_value());
    EXPECT_EQ(fs::path(*checkpoint).filename(), "model.ckpt-2000");
    EXPECT_EQ(garden::read_checkpoint_file(*checkpoint).meta.at("global_step"), 2000);
  }
  // Predict the eval CSV (with its target column) and lines without one.
  const CliRun predicted = run_garden(
      "fx predict --model '" + (dir_ / "csv" / "model").string() + "' --input eval.csv", dir_);
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  std::istringstream lines(predicted.out);
  std::ifstream eval_csv(kIris + "eval.csv");
  int count = 0, right = 0;
  for (std::string line, truth; std::getline(lines, line) && std::getline(eval_csv, truth);
       ++count) {
    EXPECT_EQ(line.rfind("{\"label\": \"", 0), 0u) << line;
    EXPECT_NE(line.find("\"scores\": ["), std::string::npos) << line;
    right += line.find("\"" + truth.substr(0, truth.find(',')) + "\"") != std::string::npos;
  }
  EXPECT_EQ(count, 30);
  EXPECT_GE(right, 28);
  // A bad line names its place in the input, not in its batch of 10, and
  // leaves no partial --output.
  {
    std::ifstream from(kIris + "eval.csv");
    std::ofstream to(dir_ / "part.csv");
    std::string line;
    for (int i = 0; i < 25 && std::getline(from, line); ++i) to << line << "\n";
    to << "x,y\n";
  }
  const CliRun bad = run_garden("fx predict --model '" + (dir_ / "csv" / "model").string() +
                                    "' --input '" + (dir_ / "part.csv").string() + "' --output '" +
                                    (dir_ / "part.out").string() + "'",
                                dir_);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("error: --input line 26 has 2 columns"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir_ / "part.out"));
  // The export's weights.safetensors, read by the tests' own reader, holds
  // the exported weights under PyTorch's names.
  const auto safetensors =
      garden_test::safetensors::read((dir_ / "csv" / "model" / "weights.safetensors").string());
  EXPECT_EQ(safetensors.metadata.at("model"), "feedforward_classification");
  const auto exported =
      garden::read_checkpoint_file((dir_ / "csv" / "model" / "weights").string()).tensors;
  ASSERT_EQ(safetensors.tensors.size(), exported.size());
  for (const char* name : {"layer_0.weight", "layer_0.bias", "layer_1.weight", "logits.bias"}) {
    const auto& entry = safetensors.tensors.at(name);
    const at::Tensor expected = exported.at(std::string("model/") + name).contiguous();
    EXPECT_EQ(entry.dtype, "F32");
    EXPECT_EQ(entry.shape, expected.sizes().vec());
    EXPECT_EQ(entry.bytes, std::string(static_cast<const char*>(expected.data_ptr()),
                                       expected.numel() * sizeof(float)))
        << name;
  }
  const auto model = fx::Model::load((dir_ / "csv" / "model").string());
  const auto p = model->predict({"5.1,3.5,1.4,0.2", "6.3,3.3,6.0,2.5"});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].label, "setosa");
  EXPECT_EQ(p[1].label, "virginica");
  ASSERT_EQ(p[0].scores.size(), 3u);
  EXPECT_NEAR(p[0].scores[0] + p[0].scores[1] + p[0].scores[2], 1.0, 1e-5);
}

TEST_F(FxCliTest, TheSameSeedRepeatsARunBitwise) {
  std::string weights[3];
  for (int i = 0; i < 3; ++i) {
    const fs::path job = dir_ / ("job" + std::to_string(i));
    const CliRun run = run_garden(
        "fx train --model feedforward_classification --output '" + job.string() +
            "' --data-train train.csv --data-schema schema.yaml --data-metadata metadata.json "
            "--data-features features.yaml --batch-size 10 --max-steps 30 --hidden-layers:1 8 "
            "--seed " +
            std::string(i < 2 ? "5" : "6"),
        dir_);
    ASSERT_EQ(run.status, 0) << run.err;
    std::ifstream in(job / "model" / "weights.safetensors", std::ios::binary);
    weights[i].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_FALSE(weights[i].empty());
  }
  EXPECT_EQ(weights[0], weights[1]) << "--seed 5 twice";
  EXPECT_NE(weights[0], weights[2]) << "--seed 6";
}

TEST_F(FxCliTest, ASecondRunResumesFromTheCheckpointAndBadInputIsOneLine) {
  const fs::path job = dir_ / "job";
  const std::string common = "fx train --model feedforward_classification --output '" +
                             job.string() +
                             "' --data-train train.csv --data-eval eval.csv --data-schema "
                             "schema.yaml --data-metadata metadata.json --data-features "
                             "features.yaml --batch-size 10 --log-level WARN ";
  CliRun run = run_garden(common + "--max-steps 100", dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err.find("Global steps"), std::string::npos) << "WARN hides progress\n" << run.err;
  run = run_garden(common + "--max-steps 150 --log-level INFO", dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("model.ckpt-100 at step 100"), std::string::npos) << run.err;
  EXPECT_TRUE(fs::exists(job / "checkpoints" / "model.ckpt-150"));
  // Bad input: each one line, naming what is wrong.
  run = run_garden("fx train --model nope", dir_);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("garden fx: error: unknown fx model 'nope'; the models are: "
                         "feedforward_classification"),
            std::string::npos)
      << run.err;
  run = run_garden(common + "--hidden-layerz:1 3", dir_);
  EXPECT_EQ(run.err, "garden fx: error: unknown argument --hidden-layerz:1 (see --help)\n");
  std::ofstream(dir_ / "bad.csv") << "setosa,5.1,3.5,1.4,0.2\nsetosa,5.1,three,1.4,0.2\n";
  run = run_garden(common + "--data-train '" + (dir_ / "bad.csv").string() + "' --output '" +
                       (dir_ / "fresh").string() + "'",
                   dir_);
  EXPECT_EQ(run.err, "garden fx: error: " + (dir_ / "bad.csv").string() +
                         " line 2, field 'sepal_width': 'three' is not a real number\n");
  EXPECT_FALSE(fs::exists(dir_ / "fresh")) << "bad data leaves no job directory";
  std::ofstream(dir_ / "label.csv") << "setosa,5.1,3.5,1.4,0.2\ndaisy,5.1,3.5,1.4,0.2\n";
  run = run_garden(common + "--data-train '" + (dir_ / "label.csv").string() + "' --output '" +
                       (dir_ / "other").string() + "'",
                   dir_);
  // Found when the data is read, naming the line, before any checkpoint.
  EXPECT_EQ(run.err, "garden fx: error: " + (dir_ / "label.csv").string() +
                         " line 2, field 'species': 'daisy' is not one of its labels in "
                         "metadata.json (setosa, versicolor, virginica)\n");
  EXPECT_FALSE(fs::exists(dir_ / "other")) << "bad data leaves no job directory";
  // A quoted label and a byte order mark are read as TensorFX's decode_csv
  // and a spreadsheet mean them.
  std::ofstream(dir_ / "quoted.csv", std::ios::binary)
      << "\xEF\xBB\xBFsetosa,5.1,3.5,1.4,0.2\n\"versicolor\",7.0,3.2,4.7,1.4\n";
  run = run_garden(common + "--data-train '" + (dir_ / "quoted.csv").string() + "' --output '" +
                       (dir_ / "quoted").string() + "' --max-steps 5",
                   dir_);
  EXPECT_EQ(run.status, 0) << run.err;
  run = run_garden("fx predict --model '" + dir_.string() + "'", dir_);
  EXPECT_NE(run.err.find("is not an exported fx model: it has no model.yaml"), std::string::npos)
      << run.err;
}

TEST_F(FxCliTest, RunsOnTheCoreLoopResumingBitwiseAndStoppingOnANonFiniteLoss) {
  const std::string common =
      "fx train --model feedforward_classification --data-train train.csv --data-eval eval.csv "
      "--data-schema schema.yaml --data-metadata metadata.json --data-features features.yaml "
      "--batch-size 5 --log-interval-steps 50 --seed 3 --output '";
  const auto weights = [](const fs::path& job) {
    std::ifstream in(job / "model" / "weights.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  CliRun run = run_garden(common + (dir_ / "whole").string() + "' --max-steps 200", dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  // Stopped at 100 and resumed: the core's checkpoint (weights, optimizer,
  // input position, random state) continues bitwise.
  run = run_garden(common + (dir_ / "resumed").string() + "' --max-steps 100", dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  fs::copy(dir_ / "resumed", dir_ / "earlier", fs::copy_options::recursive);
  run = run_garden(common + (dir_ / "resumed").string() + "' --max-steps 200", dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("restored "), std::string::npos) << run.err;
  EXPECT_EQ(weights(dir_ / "resumed"), weights(dir_ / "whole"));
  // A checkpoint TensorFX's earlier loop wrote (its step and input position
  // in keys of its own) resumes the same.
  const std::string checkpoint = (dir_ / "earlier" / "checkpoints" / "model.ckpt-100").string();
  garden::CheckpointData data = garden::read_checkpoint_file(checkpoint);
  const nlohmann::json position = data.meta.at("train_data");
  data.meta = {{"global_steps", 100},
               {"optimizer", data.meta.at("optimizer")},
               {"epoch", position.at("epoch")},
               {"position", position.at("position")},
               {"model", "feedforward_classification"}};
  for (auto it = data.tensors.begin(); it != data.tensors.end();)
    it = it->first.rfind("rng/", 0) == 0 ? data.tensors.erase(it) : std::next(it);
  garden::write_checkpoint_file(checkpoint, data);
  run = run_garden(common + (dir_ / "earlier").string() + "' --max-steps 200", dir_);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("model.ckpt-100 at step 100"), std::string::npos) << run.err;
  EXPECT_EQ(weights(dir_ / "earlier"), weights(dir_ / "whole"));
  // A loss that overflows stops the run with one line, the checkpoint of
  // the first step kept.
  run = run_garden(common + (dir_ / "diverged").string() + "' --max-steps 300 --learning-rate 1e38",
                   dir_);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("garden fx: error: training diverged: training_loss nan at step 50; "
                         "lower --learning-rate"),
            std::string::npos)
      << run.err;
  EXPECT_TRUE(fs::exists(dir_ / "diverged" / "checkpoints" / "model.ckpt-1"));
}
