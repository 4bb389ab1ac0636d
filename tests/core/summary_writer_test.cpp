// Tests of SummaryWriter. The event files are decoded here by hand (TFRecord framing
// with a bitwise CRC-32C, and a minimal protobuf wire-format decoder) using
// TensorFlow's field numbers, so the test shares no code with the writer and does not
// use the generated protobuf classes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cfloat>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "event_files.h"
#include "garden/core/summary_writer.h"

namespace {

namespace fs = std::filesystem;
using namespace garden_test::reference;
using namespace garden_test::events;

// TensorFlow's field numbers beyond those in event_files.h.
namespace metadata_field {
constexpr uint32_t kPluginData = 1, kDataClass = 4;
}
constexpr uint32_t kPluginName = 1;
namespace tensor_field {
constexpr uint32_t kDtype = 1, kShape = 2, kStringVal = 8;
}
constexpr uint32_t kShapeDim = 2;
constexpr uint64_t kDtString = 7;
constexpr uint64_t kDataClassTensor = 2;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

class SummaryWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("garden_summary_writer_" + std::string(info->name()) +
                                             "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    logdir_ = (dir_ / "run").string();
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Every event's wall_time lies between the test's own clock readings around it.
  static void expect_plausible_wall_times(const std::vector<Message>& events, double before,
                                          double after) {
    double previous = before;
    for (const Message& event : events) {
      const double wall_time = as_double(only(event, event_field::kWallTime, kFixed64));
      EXPECT_GE(wall_time, before - 1e-3);
      EXPECT_LE(wall_time, after + 1e-3);
      EXPECT_GE(wall_time, previous - 1e-3);  // written in order from one thread
      previous = wall_time;
    }
  }

  fs::path dir_;
  std::string logdir_;
};

TEST_F(SummaryWriterTest, CreatesNamedFileStartingWithFileVersion) {
  const double before = now_seconds();
  std::string path;
  {
    garden::SummaryWriter writer(logdir_ + "/nested/deeper");
    path = writer.path();
  }
  const double after = now_seconds();

  EXPECT_EQ(fs::path(path).parent_path(), fs::path(logdir_ + "/nested/deeper"));
  const std::string name = fs::path(path).filename().string();
  std::smatch match;
  ASSERT_TRUE(std::regex_match(name, match, std::regex(R"(events\.out\.tfevents\.(\d+)\.(.+))")))
      << name;
  const long long seconds = std::stoll(match[1].str());
  EXPECT_GE(seconds, static_cast<long long>(before));
  EXPECT_LE(seconds, static_cast<long long>(after));
  EXPECT_EQ(match[2].str(), host_name());

  const std::vector<Message> events = read_events(path);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(only(events[0], event_field::kFileVersion, kLengthDelimited).bytes, "brain.Event:2");
  EXPECT_EQ(step_of(events[0]), 0);
  EXPECT_FALSE(has(events[0], event_field::kSummary));
  expect_plausible_wall_times(events, before, after);
}

TEST_F(SummaryWriterTest, ScalarsAtSeveralSteps) {
  const double before = now_seconds();
  std::string path;
  {
    garden::SummaryWriter writer(logdir_);
    path = writer.path();
    writer.scalar("loss", 0.1, 0);
    writer.scalar("loss", 1e-3, 1);
    writer.scalar("train/lr", 3.14159265358979, 100);
    writer.scalars({{"acc", 0.5}, {"big", 123456789.123}, {"neg", -2.7e-7}}, int64_t{1} << 40);
    writer.scalars({}, 5);  // writes nothing
  }
  const double after = now_seconds();

  const std::vector<Message> events = read_events(path);
  ASSERT_EQ(events.size(), 5u);
  expect_plausible_wall_times(events, before, after);

  struct Expected {
    int64_t step;
    std::vector<std::pair<std::string, double>> values;
  };
  const std::vector<Expected> expected = {
      {0, {{"loss", 0.1}}},
      {1, {{"loss", 1e-3}}},
      {100, {{"train/lr", 3.14159265358979}}},
      {int64_t{1} << 40, {{"acc", 0.5}, {"big", 123456789.123}, {"neg", -2.7e-7}}},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i + 1));
    const Message& event = events[i + 1];
    EXPECT_EQ(step_of(event), expected[i].step);
    EXPECT_FALSE(has(event, event_field::kFileVersion));
    const std::vector<Message> values = values_of(event);
    ASSERT_EQ(values.size(), expected[i].values.size());
    for (size_t j = 0; j < values.size(); ++j) {
      EXPECT_EQ(tag_of(values[j]), expected[i].values[j].first);
      const float stored = as_float(only(values[j], value_field::kSimpleValue, kFixed32));
      EXPECT_EQ(stored, static_cast<float>(expected[i].values[j].second));
      EXPECT_FALSE(has(values[j], value_field::kTensor));
    }
  }
}

TEST_F(SummaryWriterTest, TextUsesTextPluginAndStringTensor) {
  const std::string markdown =
      "# Config\n\n| key | value |\n|---|---|\n| lr | 0.001 |\n\xC3\xA9t\xC3\xA9";
  std::string path;
  {
    garden::SummaryWriter writer(logdir_);
    path = writer.path();
    writer.text("config", markdown, 3);
    writer.text("notes", "", 4);
  }
  const std::vector<Message> events = read_events(path);
  ASSERT_EQ(events.size(), 3u);

  const std::pair<std::string, std::string> expected[] = {{"config", markdown}, {"notes", ""}};
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE("event " + std::to_string(i + 1));
    const Message& event = events[i + 1];
    EXPECT_EQ(step_of(event), static_cast<int64_t>(3 + i));
    const std::vector<Message> values = values_of(event);
    ASSERT_EQ(values.size(), 1u);
    const Message& value = values[0];
    EXPECT_EQ(tag_of(value), expected[i].first);
    EXPECT_FALSE(has(value, value_field::kSimpleValue));

    const Message metadata = decode(only(value, value_field::kMetadata, kLengthDelimited).bytes);
    const Message plugin_data =
        decode(only(metadata, metadata_field::kPluginData, kLengthDelimited).bytes);
    EXPECT_EQ(only(plugin_data, kPluginName, kLengthDelimited).bytes, "text");
    EXPECT_EQ(only(metadata, metadata_field::kDataClass, kVarint).scalar, kDataClassTensor);

    const Message tensor = decode(only(value, value_field::kTensor, kLengthDelimited).bytes);
    EXPECT_EQ(only(tensor, tensor_field::kDtype, kVarint).scalar, kDtString);
    const Message shape = decode(only(tensor, tensor_field::kShape, kLengthDelimited).bytes);
    EXPECT_FALSE(has(shape, kShapeDim)) << "a scalar tensor has no dims";
    EXPECT_EQ(only(tensor, tensor_field::kStringVal, kLengthDelimited).bytes, expected[i].second);
  }
}

TEST_F(SummaryWriterTest, HistogramHasTensorFlowsStatisticsAndDefaultBuckets) {
  const std::vector<double> values = {-1.0, 0.0, 0.0, 0.5, 2.0, 2.0, 2.0};
  {
    garden::SummaryWriter writer(logdir_);
    writer.histogram("layer/weights", values, 5);
    writer.histogram("empty", {}, 6);
    EXPECT_THROW(writer.histogram("bad", {1.0, std::nan("")}, 7), std::invalid_argument);
  }
  const auto histograms = histograms_in(logdir_);
  ASSERT_EQ(histograms.size(), 2u);
  const Histogram& h = histograms.at("layer/weights").at(5);
  EXPECT_EQ(h.min, -1.0);
  EXPECT_EQ(h.max, 2.0);
  EXPECT_EQ(h.num, 7.0);
  EXPECT_DOUBLE_EQ(h.sum, 5.5);
  EXPECT_DOUBLE_EQ(h.sum_squares, 1.0 + 0.25 + 12.0);
  ASSERT_EQ(h.limits.size(), h.counts.size());
  // TensorFlow's buckets grow by 10 % from 1e-12; a value goes to the first
  // limit above it. By hand: 2.0 lies between 1e-12 * 1.1^k for
  // k = log(2e12) / log(1.1) = 297.4..., so its limit is 1e-12 * 1.1^298
  // (2.16...); 0.5 below 1e-12 * 1.1^283 (0.517...); 0 below 1e-12; -1
  // below -(1e-12 * 1.1^289) (-0.917...).
  std::map<double, double> nonzero;
  for (size_t i = 0; i < h.limits.size(); ++i)
    if (h.counts[i] > 0) nonzero[h.limits[i]] = h.counts[i];
  ASSERT_EQ(nonzero.size(), 4u);
  auto it = nonzero.begin();
  EXPECT_NEAR(it->first, -1e-12 * std::pow(1.1, 289), 1e-9);
  EXPECT_EQ(it->second, 1.0);
  ++it;
  EXPECT_NEAR(it->first, 1e-12, 1e-20);
  EXPECT_EQ(it->second, 2.0);
  ++it;
  EXPECT_NEAR(it->first, 1e-12 * std::pow(1.1, 283), 1e-9);
  EXPECT_EQ(it->second, 1.0);
  ++it;
  EXPECT_NEAR(it->first, 1e-12 * std::pow(1.1, 298), 1e-9);
  EXPECT_EQ(it->second, 3.0);
  // Runs of empty buckets are merged: never two empty ones in a row, and
  // the limits rise to DBL_MAX.
  for (size_t i = 1; i < h.counts.size(); ++i) {
    EXPECT_FALSE(h.counts[i] == 0 && h.counts[i - 1] == 0) << i;
    EXPECT_LT(h.limits[i - 1], h.limits[i]);
  }
  EXPECT_EQ(h.limits.back(), DBL_MAX);
  const Histogram& empty = histograms.at("empty").at(6);
  EXPECT_EQ(empty.num, 0.0);
  ASSERT_EQ(empty.counts.size(), 1u);
  EXPECT_EQ(empty.limits[0], DBL_MAX);
}

TEST_F(SummaryWriterTest, FlushMakesEventsVisibleWhileWriterLives) {
  garden::SummaryWriter writer(logdir_);
  writer.scalar("loss", 2.5, 7);
  writer.text("note", "hello", 7);
  writer.flush();

  const std::vector<Message> events = read_events(writer.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(step_of(events[1]), 7);
  EXPECT_EQ(as_float(only(values_of(events[1])[0], value_field::kSimpleValue, kFixed32)), 2.5f);
  EXPECT_EQ(tag_of(values_of(events[2])[0]), "note");

  writer.scalar("loss", 1.5, 8);
  writer.flush();
  EXPECT_EQ(read_events(writer.path()).size(), 4u);
}

TEST_F(SummaryWriterTest, ExistingFileNameGetsSuffix) {
  // Occupy the names for this second and the next, in case the clock ticks meanwhile.
  fs::create_directories(logdir_);
  const auto seconds = static_cast<long long>(now_seconds());
  std::vector<std::string> taken;
  for (long long s : {seconds, seconds + 1}) {
    taken.push_back(
        (fs::path(logdir_) / ("events.out.tfevents." + std::to_string(s) + "." + host_name()))
            .string());
    std::ofstream(taken.back()) << "keep";
  }

  std::string path;
  {
    garden::SummaryWriter writer(logdir_);
    path = writer.path();
  }
  EXPECT_TRUE(path == taken[0] + ".1" || path == taken[1] + ".1") << path;
  for (const std::string& name : taken) {
    std::ifstream in(name);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()),
              "keep");
  }
  EXPECT_EQ(read_events(path).size(), 1u);

  // Two writers on one logdir never share a file.
  garden::SummaryWriter first(logdir_);
  garden::SummaryWriter second(logdir_);
  EXPECT_NE(first.path(), second.path());
}

TEST_F(SummaryWriterTest, ConcurrentWritesStayIntact) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200;
  std::string path;
  {
    garden::SummaryWriter writer(logdir_);
    path = writer.path();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&writer, t] {
        for (int i = 0; i < kPerThread; ++i) {
          if (i % 2 == 0) {
            writer.scalar("thread" + std::to_string(t), i, i);
          } else {
            writer.text("thread" + std::to_string(t), std::to_string(i), i);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }

  const std::vector<Message> events = read_events(path);
  ASSERT_EQ(events.size(), 1u + kThreads * kPerThread);
  std::map<std::string, std::set<int64_t>> steps_by_tag;
  for (size_t i = 1; i < events.size(); ++i) {
    const int64_t step = step_of(events[i]);
    const Message value = values_of(events[i]).at(0);
    if (step % 2 == 0) {
      EXPECT_EQ(as_float(only(value, value_field::kSimpleValue, kFixed32)),
                static_cast<float>(step));
    } else {
      const Message tensor = decode(only(value, value_field::kTensor, kLengthDelimited).bytes);
      EXPECT_EQ(only(tensor, tensor_field::kStringVal, kLengthDelimited).bytes,
                std::to_string(step));
    }
    steps_by_tag[tag_of(value)].insert(step);
  }
  ASSERT_EQ(steps_by_tag.size(), static_cast<size_t>(kThreads));
  for (const auto& [tag, steps] : steps_by_tag) {
    EXPECT_EQ(steps.size(), static_cast<size_t>(kPerThread)) << tag;
  }
}

}  // namespace

// ---- a real training run's event files, read with the decoder above -------

#include "garden/base/logging.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
namespace {

TEST_F(SummaryWriterTest, TrainingWritesEverySummaryIntervalAndEachEvaluation) {
  garden::set_quiet(true);
  auto params = garden::config::get_experiment_config("tabular/iris");
  garden::config::apply_override(*params,
                                 "trainer.train_steps=200,trainer.steps_per_loop=25,"
                                 "trainer.summary_interval=50,trainer.validation_interval=100");
  garden::finalize_config(*params);
  garden::RunOptions options;
  options.model_dir = (dir_ / "model").string();
  const garden::Logs logs = garden::run_experiment(params, options);
  garden::set_quiet(false);

  const auto train = scalars_in(dir_ / "model" / "train");
  for (const char* tag : {"training_loss", "learning_rate", "steps_per_second", "accuracy"}) {
    ASSERT_TRUE(train.count(tag)) << tag;
    std::vector<int64_t> steps;
    for (const auto& [step, value] : train.at(tag)) steps.push_back(step);
    EXPECT_EQ(steps, (std::vector<int64_t>{50, 100, 150, 200})) << tag;
  }
  EXPECT_FLOAT_EQ(train.at("learning_rate").at(200), 0.01f);

  const auto validation = scalars_in(dir_ / "model" / "validation");
  ASSERT_TRUE(validation.count("accuracy"));
  EXPECT_EQ(validation.at("accuracy").size(), 2u);  // at 100 and 200
  // The last evaluation's summary holds the very numbers the run returned.
  EXPECT_EQ(validation.at("accuracy").at(200),
            static_cast<float>(garden::to_double(logs.at("accuracy"))));
  EXPECT_EQ(validation.at("validation_loss").at(200),
            static_cast<float>(garden::to_double(logs.at("validation_loss"))));
}

}  // namespace
