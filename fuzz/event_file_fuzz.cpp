// Event files read back: Garden writes them for TensorBoard and its tests
// read them with their own decoder (tests/event_files.h: TFRecord framing,
// a minimal protobuf reader), which these arbitrary bytes exercise. That
// decoder is test code: a std::runtime_error naming the fault is its answer
// to a bad file; a crash or a sanitizer report is a defect.
#include <stdexcept>

#include "event_files.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string logdir = [] {
    std::filesystem::create_directories(garden_fuzz::scratch("logdir"));
    return garden_fuzz::scratch("logdir");
  }();
  garden_fuzz::write_file("logdir/events.out.tfevents.1.fuzz", garden_fuzz::as_view(data, size));
  try {
    garden_test::events::scalars_in(logdir);
  } catch (const std::runtime_error&) {
  }
  try {
    garden_test::events::histograms_in(logdir);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
