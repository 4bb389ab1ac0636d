// TensorBoard summaries: scalars and text written as an events.out.tfevents.* file that
// TensorBoard reads directly (`tensorboard --logdir <logdir>`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace garden {

// Thread-safe: a training loop and a background evaluator may share one writer.
// Write errors throw garden::data::DataError (see garden/data/tfrecord.h).
class SummaryWriter {
 public:
  // Creates logdir (and parents) and the file events.out.tfevents.<unix seconds>.<hostname>
  // (if that name exists, append a suffix like .1), writes the first Event with
  // file_version "brain.Event:2".
  explicit SummaryWriter(const std::string& logdir);
  ~SummaryWriter();  // flushes

  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // One scalar; TensorBoard stores it as a float, so the value is narrowed to float.
  void scalar(const std::string& tag, double value, int64_t step);
  // Several scalars of the same step, as one Event with one Value per tag (in the map's
  // order). An empty map writes nothing.
  void scalars(const std::map<std::string, double>& values, int64_t step);
  // Text (markdown) as TensorBoard's text plugin expects it: plugin_name "text" in the
  // Value's metadata, and the text in a DT_STRING scalar tensor.
  void text(const std::string& tag, const std::string& text, int64_t step);

  // A histogram of `values` as TensorFlow's tf.summary.histogram writes it
  // (TensorBoard's Histograms and Distributions tabs): min, max, count, sum,
  // sum of squares, and the counts over TensorFlow's default buckets (limits
  // ±1e-12·1.1^k up to 1e20, 0 and ±DBL_MAX; a value v falls in the first
  // bucket whose limit is above it: bucket i holds [limit i-1, limit i)), runs of empty buckets merged into one.
  // A NaN or infinite value throws std::invalid_argument naming the tag.
  void histogram(const std::string& tag, const std::vector<double>& values, int64_t step);

  // Makes everything written so far visible to TensorBoard (fflush, no fsync: cheap
  // enough to call every logging interval).
  void flush();

  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace garden
