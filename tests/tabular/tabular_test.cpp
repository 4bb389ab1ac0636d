// The tabular classification task end to end: every Controller mode, exact
// resume, accuracy on iris, any other numeric CSV, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/tabular/classification.h"

namespace fs = std::filesystem;

namespace {

class TabularTest : public ::testing::Test {
 protected:
  void SetUp() override {
    garden::set_quiet(true);
    root_ = fs::path(::testing::TempDir()) /
            ("garden_tabular_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    fs::remove_all(root_);
    garden::set_quiet(false);
  }

  static std::shared_ptr<garden::config::ExperimentConfig> experiment(
      const std::string& overrides, const std::string& name = "tabular/iris") {
    auto params = garden::config::get_experiment_config(name);
    if (!overrides.empty()) garden::config::apply_override(*params, overrides);
    garden::finalize_config(*params);
    return params;
  }

  garden::Logs run(const std::string& mode, const std::string& dir, const std::string& overrides,
                   const std::string& name = "tabular/iris") {
    garden::RunOptions options;
    options.mode = mode;
    options.model_dir = (root_ / dir).string();
    options.continuous_eval_poll_seconds = 0.05;
    return garden::run_experiment(experiment(overrides, name), options);
  }

  fs::path root_;
};

double metric(const garden::Logs& logs, const std::string& name) {
  const auto it = logs.find(name);
  if (it == logs.end()) throw std::runtime_error("no log named " + name);
  return garden::to_double(it->second);
}

std::map<std::string, at::Tensor> tensors_with_prefix(const std::string& path,
                                                      const std::string& prefix) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, tensor] : garden::read_checkpoint_file(path).tensors)
    if (name.rfind(prefix, 0) == 0) out[name] = tensor;
  return out;
}

TEST_F(TabularTest, TrainAndEvalOnIrisReachesTheAccuracyBar) {
  const auto logs = run("train_and_eval", "iris", "");
  EXPECT_GE(metric(logs, "accuracy"), 0.93);
  EXPECT_LT(metric(logs, "validation_loss"), 0.3);
  EXPECT_TRUE(fs::exists(root_ / "iris" / "params.yaml"));
  EXPECT_TRUE(fs::exists(root_ / "iris" / "train.log"));
  EXPECT_TRUE(fs::exists(root_ / "iris" / "ckpt-400"));
  // max_to_keep 3 of the checkpoints at 100, 200, 300, 400.
  EXPECT_FALSE(fs::exists(root_ / "iris" / "ckpt-100"));
  bool train_events = false, eval_events = false;
  for (const auto& e : fs::directory_iterator(root_ / "iris" / "train"))
    train_events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  for (const auto& e : fs::directory_iterator(root_ / "iris" / "validation"))
    eval_events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_TRUE(train_events);
  EXPECT_TRUE(eval_events);
}

TEST_F(TabularTest, AResumedRunEndsBitwiseEqualToAnUninterruptedOne) {
  // Dropout 0.1 and a shuffled, repeating input make the random state and the
  // input position matter, not only the weights.
  const std::string common =
      "trainer.checkpoint_interval=100,trainer.steps_per_loop=25,"
      "trainer.summary_interval=25,runtime.seed=7";
  run("train", "straight", common + ",trainer.train_steps=200");
  run("train", "resumed", common + ",trainer.train_steps=100");
  ASSERT_TRUE(fs::exists(root_ / "resumed" / "ckpt-100"));
  ASSERT_FALSE(fs::exists(root_ / "resumed" / "ckpt-200"));
  run("train", "resumed", common + ",trainer.train_steps=200");

  const auto a = garden::read_checkpoint_file((root_ / "straight" / "ckpt-200").string());
  const auto b = garden::read_checkpoint_file((root_ / "resumed" / "ckpt-200").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, tensor] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, b.tensors.at(name))) << name << " differs";
  }
  EXPECT_EQ(a.meta.at("global_step"), 200);
  EXPECT_EQ(a.meta.at("train_data"), b.meta.at("train_data"));
  EXPECT_EQ(a.meta.at("optimizer"), b.meta.at("optimizer"));
}

TEST_F(TabularTest, AResumeContinuesFromWhatTheCheckpointHolds) {
  // Guards the test above: a run that ignored its checkpoint and trained
  // 200 steps afresh would also equal the straight run. Here the checkpoint
  // at 100 is altered before resuming: a real resume carries the change on.
  const std::string common =
      "trainer.checkpoint_interval=100,trainer.steps_per_loop=25,"
      "trainer.summary_interval=25,runtime.seed=7";
  run("train", "straight", common + ",trainer.train_steps=200");
  run("train", "resumed", common + ",trainer.train_steps=100");
  const std::string checkpoint = (root_ / "resumed" / "ckpt-100").string();
  garden::CheckpointData data = garden::read_checkpoint_file(checkpoint);
  data.tensors.at("model/dense_0.weight").mul_(0.5);
  garden::write_checkpoint_file(checkpoint, data);
  run("train", "resumed", common + ",trainer.train_steps=200");

  const auto straight = tensors_with_prefix((root_ / "straight" / "ckpt-200").string(), "model/");
  const auto resumed = tensors_with_prefix((root_ / "resumed" / "ckpt-200").string(), "model/");
  EXPECT_FALSE(
      torch::equal(straight.at("model/dense_0.weight"), resumed.at("model/dense_0.weight")));
  // And it continued from step 100.
  const auto meta = garden::read_checkpoint_file((root_ / "resumed" / "ckpt-200").string()).meta;
  EXPECT_EQ(meta.at("global_step"), 200);
  std::ifstream log(root_ / "resumed" / "train.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("restored " + checkpoint + " at step 100"), std::string::npos) << text;
}

TEST_F(TabularTest, TrainThenEvalRestoresTheLatestCheckpoint) {
  run("train", "m", "trainer.train_steps=200");
  EXPECT_TRUE(fs::exists(root_ / "m" / "ckpt-200"));
  EXPECT_FALSE(fs::exists(root_ / "m" / "validation")) << "train mode must not evaluate";
  const auto logs = run("eval", "m", "trainer.train_steps=200");
  EXPECT_GE(metric(logs, "accuracy"), 0.9);
  // Training again to the same step trains nothing and writes nothing new.
  const auto before = fs::last_write_time(root_ / "m" / "ckpt-200");
  run("train", "m", "trainer.train_steps=200");
  EXPECT_EQ(fs::last_write_time(root_ / "m" / "ckpt-200"), before);
}

TEST_F(TabularTest, EvalWithoutACheckpointFailsAndCreatesNothing) {
  try {
    run("eval", "empty", "");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root_ / "empty"));
}

TEST_F(TabularTest, TrainAndPostEvalEvaluatesOnceAtTheEnd) {
  const auto logs = run("train_and_post_eval", "p", "trainer.train_steps=300");
  EXPECT_GE(metric(logs, "accuracy"), 0.9);
  std::size_t events = 0;
  for (const auto& e : fs::directory_iterator(root_ / "p" / "validation")) {
    (void)e;
    ++events;
  }
  EXPECT_EQ(events, 1u);
}

TEST_F(TabularTest, ValidationStepsLimitsTheBatchesEvaluated) {
  // 30 held-out rows, batches of 8: one step sees 8 rows, so accuracy is a
  // multiple of 1/8.
  const auto logs = run("train_and_eval", "v",
                        "trainer.train_steps=100,trainer.validation_steps=1,"
                        "task.validation_data.global_batch_size=8");
  const double accuracy = metric(logs, "accuracy");
  EXPECT_DOUBLE_EQ(accuracy * 8, std::round(accuracy * 8));
}

TEST_F(TabularTest, ContinuousEvalFollowsATrainerUntilTrainSteps) {
  const std::string overrides =
      "trainer.train_steps=300,trainer.checkpoint_interval=100,"
      "trainer.continuous_eval_timeout=60";
  garden::Logs eval_logs;
  std::exception_ptr eval_error;
  // The evaluator starts first, on a model_dir with no checkpoint yet.
  std::thread evaluator([&] {
    try {
      eval_logs = run("continuous_eval", "c", overrides);
    } catch (...) {
      eval_error = std::current_exception();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  run("train", "c", overrides);
  evaluator.join();
  if (eval_error) std::rethrow_exception(eval_error);
  EXPECT_GE(metric(eval_logs, "accuracy"), 0.9);
  EXPECT_TRUE(fs::exists(root_ / "c" / "validation"));
}

TEST_F(TabularTest, ContinuousEvalStopsAfterTheTimeoutWithoutNewCheckpoints) {
  run("train", "t", "trainer.train_steps=100");
  const auto start = std::chrono::steady_clock::now();
  // train_steps 1000 is never reached: the timeout ends the wait.
  const auto logs =
      run("continuous_eval", "t", "trainer.train_steps=1000,trainer.continuous_eval_timeout=1");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(logs.count("accuracy")) << "ckpt-100 should have been evaluated";
  EXPECT_GE(seconds, 1.0);
  EXPECT_LT(seconds, 30.0);
}

TEST_F(TabularTest, TheSameTaskWorksOnAnyNumericCsv) {
  // Three well-separated classes in a CSV with other column names.
  const auto csv = root_ / "blobs.csv";
  {
    std::ofstream out(csv);
    out << "a,b,kind,c\n";
    std::mt19937 engine(3);
    std::normal_distribution<double> noise(0.0, 0.5);
    const char* kinds[] = {"red", "green", "blue"};
    for (int i = 0; i < 300; ++i) {
      const int k = i % 3;
      out << 4 * k + noise(engine) << "," << -3 * k + noise(engine) << "," << kinds[k] << ","
          << 100.0 + noise(engine) << "\n";
    }
  }
  const auto logs = run("train_and_eval", "blobs",
                        "task.train_data.input_path=" + csv.string() +
                            ",task.label_column=kind,task.validation_split=0.25,"
                            "task.feature_columns=[a,b,c],trainer.train_steps=200,"
                            "trainer.validation_interval=200",
                        "tabular/classification");
  EXPECT_GE(metric(logs, "accuracy"), 0.95);
  const auto ckpt = garden::read_checkpoint_file((root_ / "blobs" / "ckpt-200").string());
  EXPECT_EQ(ckpt.meta.at("task").at("classes"), (std::vector<std::string>{"blue", "green", "red"}));
  // The standardization statistics travel with the model.
  const at::Tensor mean = ckpt.tensors.at("model/feature_mean");
  EXPECT_NEAR(mean[2].item<float>(), 100.0, 0.2);
}

TEST_F(TabularTest, BadCsvInputNamesFileLineAndColumn) {
  const auto csv = root_ / "bad.csv";
  std::ofstream(csv) << "label,x\nyes,1\nno,2\nyes,oops\n";
  try {
    run("train", "bad", "task.train_data.input_path=" + csv.string() + ",trainer.train_steps=10",
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "CSV file '" + csv.string() + "' line 4: column 'x' is not a number: 'oops'");
  }
  EXPECT_FALSE(fs::exists(root_ / "bad")) << "a failed start must leave no model_dir";

  std::ofstream(csv, std::ios::trunc) << "label,x\nyes,1\nno\n";
  try {
    run("train", "bad", "task.train_data.input_path=" + csv.string(), "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3: 1 fields, the header has 2"), std::string::npos)
        << e.what();
  }
  try {
    run("train", "bad", "task.train_data.input_path=" + csv.string() + ",task.label_column=y",
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no column 'y'; its columns: label, x"),
              std::string::npos)
        << e.what();
  }
}

// A subnormal (1e-320) or underflowing (1e-400) value is a number; an
// overflowing one (1e400) is not.
TEST_F(TabularTest, TinyValuesAreNumbersAndOverflowIsNot) {
  const auto csv = root_ / "tiny.csv";
  std::ofstream(csv) << "label,x\na,1e-320\nb,2\na,1e-400\nb,2.5\n";
  garden::tabular::TabularClassificationTask task(
      std::static_pointer_cast<const garden::tabular::TabularClassificationConfig>(
          experiment("task.train_data.input_path=" + csv.string(), "tabular/classification")
              ->task));
  EXPECT_EQ(task.schema().classes, (std::vector<std::string>{"a", "b"}));

  std::ofstream(csv, std::ios::trunc) << "label,x\na,1e400\nb,2\n";
  garden::tabular::TabularClassificationTask overflow(
      std::static_pointer_cast<const garden::tabular::TabularClassificationConfig>(
          experiment("task.train_data.input_path=" + csv.string(), "tabular/classification")
              ->task));
  try {
    overflow.schema();
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "CSV file '" + csv.string() + "' line 2: column 'x' is not a number: '1e400'");
  }
}

// A validation split that leaves too few training rows says so.
TEST_F(TabularTest, AValidationSplitThatLeavesNoClassesSaysWhatItLeft) {
  garden::tabular::TabularClassificationTask task(
      std::static_pointer_cast<const garden::tabular::TabularClassificationConfig>(
          experiment("task.validation_split=0.999")->task));
  try {
    task.schema();
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find("task.validation_split 0.999 left 0 of 150 rows of '"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("classification needs at least 2 classes in the "
                                         "training rows"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(TabularTest, ValidationLabelsMustBeTrainingClasses) {
  const auto train = root_ / "train.csv";
  const auto valid = root_ / "valid.csv";
  std::ofstream(train) << "label,x\na,1\nb,2\na,1.1\nb,2.1\n";
  std::ofstream(valid) << "label,x\na,1\nc,3\n";
  try {
    run("train_and_eval", "labels",
        "task.train_data.input_path=" + train.string() + ",task.validation_data.input_path=" +
            valid.string() + ",task.train_data.global_batch_size=2",
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "CSV file '" + valid.string() +
                                         "' line 3: label 'c' is not a class of the training data");
  }
}

TEST_F(TabularTest, InitCheckpointRestoresByNameAndAllowsAPartialRestore) {
  run("train", "source", "trainer.train_steps=100");
  const auto source = (root_ / "source" / "ckpt-100").string();

  auto params = experiment("task.init_checkpoint=" + (root_ / "source").string());
  auto task = garden::get_task(params->task);
  auto model = task->build_model();
  task->initialize(*model);
  const auto saved = tensors_with_prefix(source, "model/");
  for (const auto& [name, tensor] : garden::model_state(*model))
    EXPECT_TRUE(torch::equal(tensor, saved.at("model/" + name))) << name;

  // A checkpoint holding part of the model, plus a name the model lacks.
  garden::CheckpointData partial;
  partial.tensors["model/dense_0.weight"] = torch::full({32, 4}, 0.5);
  partial.tensors["model/not_in_model"] = torch::zeros({1});
  auto fresh = task->build_model();
  const auto before = garden::model_state(*fresh).at("dense_1.weight").clone();
  const auto report = garden::load_model_state(*fresh, partial.tensors, "model/", false);
  EXPECT_TRUE(
      torch::equal(garden::model_state(*fresh).at("dense_0.weight"), torch::full({32, 4}, 0.5)));
  EXPECT_TRUE(torch::equal(garden::model_state(*fresh).at("dense_1.weight"), before));
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"not_in_model"});
  EXPECT_NE(std::find(report.missing.begin(), report.missing.end(), "dense_2.bias"),
            report.missing.end());
  EXPECT_THROW(garden::load_model_state(*fresh, partial.tensors, "model/", true), garden::Error);
}

TEST_F(TabularTest, InferenceStepGivesProbabilitiesAndClassIds) {
  auto params = experiment("");
  auto task = garden::get_task(params->task);
  auto model = task->build_model();
  garden::Batch inputs{{"features", torch::tensor({{5.1f, 3.5f, 1.4f, 0.2f}})}};
  const auto outputs = task->inference_step(inputs, *model);
  EXPECT_EQ(outputs.at("probabilities").sizes(), (std::vector<int64_t>{1, 3}));
  EXPECT_NEAR(outputs.at("probabilities").sum().item<float>(), 1.0f, 1e-5);
  EXPECT_EQ(outputs.at("class_ids").item<int64_t>(),
            outputs.at("logits").argmax(-1).item<int64_t>());
}

TEST_F(TabularTest, TableDatasetResumesAtTheSameBatch) {
  const auto features = torch::arange(20, torch::kFloat).reshape({10, 2});
  const auto labels = torch::arange(10, torch::kLong);
  garden::tabular::TableDataset a(features, labels, 4, true, true, 5);
  for (int i = 0; i < 5; ++i) a.next();  // into the third epoch
  const auto state = a.state();
  garden::tabular::TableDataset b(features, labels, 4, true, true, 5);
  b.restore(state);
  for (int i = 0; i < 7; ++i)
    EXPECT_TRUE(torch::equal(a.next()->at("label"), b.next()->at("label"))) << i;
  // Without drop_remainder one pass yields 4 + 4 + 2 rows, then ends.
  garden::tabular::TableDataset eval(features, labels, 4, false, false, 0);
  EXPECT_EQ(eval.next()->at("label").size(0), 4);
  EXPECT_EQ(eval.next()->at("label").size(0), 4);
  EXPECT_EQ(eval.next()->at("label").size(0), 2);
  EXPECT_FALSE(eval.next().has_value());
  eval.reset();
  EXPECT_TRUE(eval.next().has_value());
}

// Labels and column names go into the checkpoint's metadata (JSON, UTF-8
// only). One that is not UTF-8 used to train to the first checkpoint and then
// fail in the JSON library, naming no file; it now fails at the start.
TEST_F(TabularTest, TextThatIsNotUtf8FailsAtStartNamingFileLineAndColumn) {
  const auto csv = root_ / "latin1.csv";
  // Line 4's label is Latin-1 ("vert" with an e acute: 0xE9).
  std::ofstream(csv, std::ios::binary) << "label,x\nrouge,1\nvert,2\nv\xE9rt,2.1\nrouge,1.1\n";
  const std::string train = "task.train_data.input_path=" + csv.string() +
                            ",task.train_data.global_batch_size=2,trainer.train_steps=4,"
                            "trainer.checkpoint_interval=2";
  try {
    run("train", "latin1", train, "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "CSV file '" + csv.string() +
                                         "' line 4, label column 'label': invalid UTF-8 byte "
                                         "0xE9 at offset 1");
  }
  EXPECT_FALSE(fs::exists(root_ / "latin1")) << "a failed start must leave no model_dir";

  // A column name (it becomes a feature name).
  std::ofstream(csv, std::ios::binary | std::ios::trunc)
      << "label,\xE9t\xE9\nrouge,1\nvert,2\nvert,2.1\nrouge,1.1\n";
  try {
    run("train", "latin1", train, "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "CSV file '" + csv.string() +
                                         "' line 1, the name of column 2: invalid UTF-8 byte "
                                         "0xE9 at offset 0");
  }

  // A validation file's label.
  std::ofstream(csv, std::ios::binary | std::ios::trunc)
      << "label,x\nrouge,1\nvert,2\nvert,2.1\nrouge,1.1\n";
  const auto valid = root_ / "valid.csv";
  std::ofstream(valid, std::ios::binary) << "label,x\nrouge,1\nv\xE9rt,2\n";
  try {
    run("train_and_eval", "latin1", train + ",task.validation_data.input_path=" + valid.string(),
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "CSV file '" + valid.string() +
                                         "' line 3, label column 'label': invalid UTF-8 byte "
                                         "0xE9 at offset 1");
  }
}

// A validation split that holds out nothing is an error naming the file.
TEST_F(TabularTest, AValidationSplitThatHoldsOutNoRowNamesTheFile) {
  const auto csv = root_ / "few.csv";
  std::ofstream(csv) << "label,x\na,1\nb,2\na,1.1\nb,2.1\n";
  try {
    run("train_and_eval", "few",
        "task.train_data.input_path=" + csv.string() +
            ",task.validation_split=0.05,task.train_data.global_batch_size=2",
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "task.validation_split holds out no row of '" + csv.string() +
                  "' to evaluate on; raise it or set validation_data.input_path");
  }
}

}  // namespace

// A held-out row whose label no training row has cannot be scored: it is an
// error naming its line, not a row left out of the accuracy.
TEST_F(TabularTest, AHeldOutLabelThatNoTrainingRowHasNamesItsLine) {
  const auto csv = root_ / "rare.csv";
  std::ofstream out(csv);
  out << "label,x\n";
  for (int i = 0; i < 12; ++i) out << "a,1." << i << "\nb,2." << i << "\n";
  out << "rare,9\n";  // line 26
  out.close();
  int refused = 0;
  for (int seed = 0; seed < 16; ++seed) {
    try {
      run("train", "rare" + std::to_string(seed),
          "task.train_data.input_path=" + csv.string() +
              ",task.validation_split=0.25,trainer.train_steps=1,task.train_data.global_batch_size="
              "2,"
              "task.split_seed=" +
              std::to_string(seed),
          "tabular/classification");
    } catch (const garden::Error& e) {
      ++refused;
      EXPECT_EQ(std::string(e.what()),
                "CSV file '" + csv.string() +
                    "' line 26: label 'rare' is held out for validation (task.validation_split "
                    "0.25) but is in no training row; change task.split_seed or give the class "
                    "more rows");
    }
  }
  // A quarter of the rows are held out: some seeds hold out the rare row.
  EXPECT_GT(refused, 0);
  EXPECT_LT(refused, 16);
}

// A header that names a column twice, or a feature listed twice, would read
// one column for both (the model then sees the first twice and never the
// second); a byte order mark is not part of the first column's name; a
// hexadecimal cell is not a CSV number.
TEST_F(TabularTest, TheHeaderAndTheCellsAreReadAsACsvFileMeansThem) {
  const auto csv = root_ / "dup.csv";
  std::ofstream(csv) << "label,a,a\nx,1,5\ny,2,6\nx,1.1,5.1\ny,2.1,6.1\n";
  const std::string data =
      ",task.train_data.global_batch_size=2,trainer.train_steps=2,trainer.checkpoint_interval=2";
  try {
    run("train", "dup", "task.train_data.input_path=" + csv.string() + data,
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "CSV file '" + csv.string() +
                                         "' has two columns named 'a' (columns 2 and 3); rename "
                                         "one in the header");
  }
  EXPECT_FALSE(fs::exists(root_ / "dup"));

  const auto two = root_ / "two.csv";
  std::ofstream(two) << "label,a,b\nx,1,5\ny,2,6\nx,1.1,5.1\ny,2.1,6.1\n";
  try {
    run("train", "twice",
        "task.train_data.input_path=" + two.string() + ",task.feature_columns=[a,a]" + data,
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()), "task.feature_columns lists 'a' twice");
  }

  const auto bom = root_ / "bom.csv";
  std::ofstream(bom, std::ios::binary) << "\xEF\xBB\xBFlabel,a\r\nx,1\r\ny,2\r\nx,1.1\r\ny,2.1\r\n";
  run("train", "bom", "task.train_data.input_path=" + bom.string() + data,
      "tabular/classification");
  EXPECT_TRUE(fs::exists(root_ / "bom" / "ckpt-2"));

  const auto hex = root_ / "hex.csv";
  std::ofstream(hex) << "label,a\nx,1\ny,0x10\nx,1.1\ny,2.1\n";
  try {
    run("train", "hex", "task.train_data.input_path=" + hex.string() + data,
        "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "CSV file '" + hex.string() + "' line 3: column 'a' is not a number: '0x10'");
  }
}

// The model weighs its inputs in the checkpoint's column order: a file whose
// columns were reordered since is refused on restore, with the setting that
// reads them by name.
TEST_F(TabularTest, ACheckpointRefusesAFileWhoseColumnsWereReordered) {
  const auto csv = root_ / "data.csv";
  std::ofstream(csv) << "label,a,b\nx,1,5\ny,2,6\nx,1.1,5.1\ny,2.1,6.1\n";
  const std::string data = "task.train_data.input_path=" + csv.string() +
                           ",task.train_data.global_batch_size=2,trainer.train_steps=2,"
                           "runtime.seed=1";
  run("train", "m", data, "tabular/classification");
  std::ofstream(csv, std::ios::trunc) << "label,b,a\nx,5,1\ny,6,2\nx,5.1,1.1\ny,6.1,2.1\n";
  try {
    run("eval", "m", data, "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the checkpoint's feature columns [a,b] differ from [b,a] of '" + csv.string() +
                  "'; set task.feature_columns=[a,b] to read the file's "
                  "columns by name");
  }
  EXPECT_NO_THROW(run("eval", "m", data + ",task.feature_columns=[a,b]", "tabular/classification"));
}

// tabular/classification trains out of the box; a run asked to train zero
// steps is refused before it makes model_dir.
TEST_F(TabularTest, ZeroTrainStepsIsRefusedAndTheGenericExperimentTrains) {
  const auto csv = root_ / "data.csv";
  std::ofstream(csv) << "label,a\nx,1\ny,2\nx,1.1\ny,2.1\n";
  const std::string data =
      "task.train_data.input_path=" + csv.string() + ",task.train_data.global_batch_size=2";
  try {
    run("train_and_eval", "zero", data + ",trainer.train_steps=0", "tabular/classification");
    FAIL() << "expected an error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "trainer.train_steps is 0, so --mode=train_and_eval has nothing to train; set "
              "trainer.train_steps (--mode=eval evaluates a checkpoint without training)");
  }
  EXPECT_FALSE(fs::exists(root_ / "zero"));
  run("train", "default", data, "tabular/classification");
  EXPECT_TRUE(fs::exists(root_ / "default" / "ckpt-1000"));
}
