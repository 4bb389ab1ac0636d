// Reads TensorBoard event files back by hand (TFRecord framing with a
// bitwise CRC-32C and a minimal protobuf decoder, with TensorFlow's field
// numbers), so a test shares no code with Garden's SummaryWriter.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "reference_formats.h"

namespace garden_test::events {

using namespace garden_test::reference;

// TensorFlow's field numbers.
namespace event_field {
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
}
constexpr uint32_t kSummaryValue = 1;
namespace value_field {
constexpr uint32_t kTag = 1, kSimpleValue = 2, kHisto = 5, kTensor = 8, kMetadata = 9;
}
namespace histogram_field {
constexpr uint32_t kMin = 1, kMax = 2, kNum = 3, kSum = 4, kSumSquares = 5, kBucketLimit = 6,
                   kBucket = 7;
}

inline std::vector<Message> read_events(const std::string& path) {
  std::vector<Message> events;
  for (const std::string& record : read_records(path)) events.push_back(decode(record));
  return events;
}

// proto3 leaves out fields equal to zero.
inline int64_t step_of(const Message& event) {
  if (!has(event, event_field::kStep)) return 0;
  return static_cast<int64_t>(only(event, event_field::kStep, kVarint).scalar);
}

inline std::vector<Message> values_of(const Message& event) {
  const Message summary = decode(only(event, event_field::kSummary, kLengthDelimited).bytes);
  std::vector<Message> values;
  for (const Field* f : all(summary, kSummaryValue)) values.push_back(decode(f->bytes));
  return values;
}

inline std::string tag_of(const Message& value) {
  return only(value, value_field::kTag, kLengthDelimited).bytes;
}

// tag -> step -> value of every scalar in every event file of `logdir`.
inline std::map<std::string, std::map<int64_t, float>> scalars_in(
    const std::filesystem::path& logdir) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const auto& entry : std::filesystem::directory_iterator(logdir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    for (const Message& event : read_events(entry.path().string())) {
      if (!has(event, event_field::kSummary)) continue;
      for (const Message& value : values_of(event))
        if (has(value, value_field::kSimpleValue))
          out[tag_of(value)][step_of(event)] =
              as_float(only(value, value_field::kSimpleValue, kFixed32));
    }
  }
  return out;
}

struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, counts;
};

// A repeated double, packed (one length-delimited run) or not.
inline std::vector<double> doubles_of(const Message& message, uint32_t number) {
  std::vector<double> out;
  for (const Field* f : all(message, number)) {
    if (f->wire_type == kFixed64) {
      out.push_back(as_double(*f));
      continue;
    }
    for (size_t pos = 0; pos + 8 <= f->bytes.size(); pos += 8) {
      Field one;
      one.scalar = read_le(f->bytes, pos, 8);
      out.push_back(as_double(one));
    }
  }
  return out;
}

inline Histogram histogram_of(const Message& value) {
  const Message h = decode(only(value, value_field::kHisto, kLengthDelimited).bytes);
  // proto3 leaves out a field equal to zero.
  const auto number = [&](uint32_t n) { return has(h, n) ? as_double(only(h, n, kFixed64)) : 0.0; };
  Histogram out;
  out.min = number(histogram_field::kMin);
  out.max = number(histogram_field::kMax);
  out.num = number(histogram_field::kNum);
  out.sum = number(histogram_field::kSum);
  out.sum_squares = number(histogram_field::kSumSquares);
  out.limits = doubles_of(h, histogram_field::kBucketLimit);
  out.counts = doubles_of(h, histogram_field::kBucket);
  return out;
}

// tag -> step -> histogram, from every event file of `logdir`.
inline std::map<std::string, std::map<int64_t, Histogram>> histograms_in(
    const std::filesystem::path& logdir) {
  std::map<std::string, std::map<int64_t, Histogram>> out;
  for (const auto& entry : std::filesystem::directory_iterator(logdir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    for (const Message& event : read_events(entry.path().string())) {
      if (!has(event, event_field::kSummary)) continue;
      for (const Message& value : values_of(event))
        if (has(value, value_field::kHisto))
          out[tag_of(value)][step_of(event)] = histogram_of(value);
    }
  }
  return out;
}

}  // namespace garden_test::events
