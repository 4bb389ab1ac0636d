#include "garden/core/summary_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <system_error>

#include "garden/data/tfrecord.h"
#include "garden/event.pb.h"

namespace garden {

namespace {

namespace fs = std::filesystem;

// The event file version TensorBoard expects in the first record of every file.
constexpr const char* kFileVersion = "brain.Event:2";
constexpr const char* kTextPluginName = "text";

double wall_time_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// TensorFlow's default histogram bucket limits: 10 % wider each, from 1e-12
// to 1e20, mirrored below zero, with 0 and ±DBL_MAX at the ends.
const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> positive;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return limits;
}

// Picks events.out.tfevents.<seconds>.<host>[.N] and creates it with O_EXCL, so two
// writers started in the same second on the same logdir never share (and clobber) a file.
std::string create_event_file(const std::string& logdir) {
  std::error_code ec;
  fs::create_directories(logdir, ec);
  if (ec) {
    throw std::runtime_error("cannot create TensorBoard log directory '" + logdir +
                             "': " + ec.message());
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const std::string base =
      (fs::path(logdir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name()))
          .string();
  for (int suffix = 0;; ++suffix) {
    const std::string candidate = suffix == 0 ? base : base + "." + std::to_string(suffix);
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return candidate;
    }
    if (errno != EEXIST) {
      throw std::runtime_error("cannot create TensorBoard event file '" + candidate +
                               "': " + std::generic_category().message(errno));
    }
  }
}

}  // namespace

struct SummaryWriter::Impl {
  explicit Impl(const std::string& event_path) : path(event_path), records(event_path) {}

  // Serializes outside the lock; only the file write is serialized between threads.
  void write(const tf::Event& event) {
    std::string bytes;
    if (!event.SerializeToString(&bytes)) {
      throw std::runtime_error("cannot serialize TensorBoard event for '" + path + "'");
    }
    std::lock_guard<std::mutex> lock(mutex);
    records.write(bytes);
  }

  static tf::Event summary_event(int64_t step) {
    tf::Event event;
    event.set_wall_time(wall_time_now());
    event.set_step(step);
    return event;
  }

  const std::string path;
  std::mutex mutex;
  data::TFRecordWriter records;  // guarded by mutex
};

SummaryWriter::SummaryWriter(const std::string& logdir)
    : impl_(std::make_unique<Impl>(create_event_file(logdir))) {
  tf::Event event;
  event.set_wall_time(wall_time_now());
  event.set_step(0);
  event.set_file_version(kFileVersion);
  impl_->write(event);
}

SummaryWriter::~SummaryWriter() {
  try {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->records.close();
  } catch (const std::exception&) {
    // A destructor must not throw; callers who care about the last bytes call flush().
  }
}

void SummaryWriter::scalar(const std::string& tag, double value, int64_t step) {
  tf::Event event = Impl::summary_event(step);
  tf::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  impl_->write(event);
}

void SummaryWriter::scalars(const std::map<std::string, double>& values, int64_t step) {
  if (values.empty()) return;
  tf::Event event = Impl::summary_event(step);
  tf::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    tf::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  impl_->write(event);
}

void SummaryWriter::text(const std::string& tag, const std::string& text, int64_t step) {
  tf::Event event = Impl::summary_event(step);
  tf::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  tf::SummaryMetadata* metadata = v->mutable_metadata();
  // Empty plugin content is what the text plugin writes itself (TextPluginData version 0).
  metadata->mutable_plugin_data()->set_plugin_name(kTextPluginName);
  metadata->set_data_class(tf::DATA_CLASS_TENSOR);
  tf::TensorProto* tensor = v->mutable_tensor();
  tensor->set_dtype(tf::DT_STRING);
  tensor->mutable_tensor_shape();  // present but without dims: a scalar
  tensor->add_string_val(text);
  impl_->write(event);
}

void SummaryWriter::histogram(const std::string& tag, const std::vector<double>& values,
                              int64_t step) {
  const std::vector<double>& limits = default_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  double low = DBL_MAX, high = -DBL_MAX, sum = 0.0, sum_squares = 0.0;
  for (const double v : values) {
    if (!std::isfinite(v))
      throw std::invalid_argument("histogram '" + tag + "' has a non-finite value " +
                                  std::to_string(v) + " at step " + std::to_string(step));
    low = std::min(low, v);
    high = std::max(high, v);
    sum += v;
    sum_squares += v * v;
    const auto bucket = std::upper_bound(limits.begin(), limits.end(), v) - limits.begin();
    counts[static_cast<std::size_t>(
        std::min<std::ptrdiff_t>(bucket, static_cast<std::ptrdiff_t>(limits.size()) - 1))] += 1.0;
  }
  tf::Event event = Impl::summary_event(step);
  tf::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  tf::HistogramProto* histo = v->mutable_histo();
  histo->set_min(low);
  histo->set_max(high);
  histo->set_num(static_cast<double>(values.size()));
  histo->set_sum(sum);
  histo->set_sum_squares(sum_squares);
  // Each non-empty bucket, and each run of empty ones as one (its last limit).
  for (std::size_t i = 0; i < limits.size();) {
    double limit = limits[i], count = counts[i];
    ++i;
    if (count <= 0.0) {
      while (i < limits.size() && counts[i] <= 0.0) limit = limits[i++];
      count = 0.0;
    }
    histo->add_bucket_limit(limit);
    histo->add_bucket(count);
  }
  impl_->write(event);
}

void SummaryWriter::flush() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->records.flush_to_os();
}

const std::string& SummaryWriter::path() const { return impl_->path; }

}  // namespace garden
