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
constexpr uint32_t kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
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

}  // namespace garden_test::events
