// The `checkpoint` index (TensorFlow's CheckpointState text) on arbitrary
// bytes, beside two checkpoints: the latest found is a file that exists, and
// the kept list names only existing files.
#include <filesystem>

#include "fuzz_util.h"
#include "garden/core/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path dir = garden_fuzz::scratch("model_dir");
  static const bool made = [&] {
    std::filesystem::create_directories(dir);
    return true;
  }();
  (void)made;
  garden_fuzz::write_file("model_dir/ckpt-100", "one");
  garden_fuzz::write_file("model_dir/ckpt-20", "two");
  garden_fuzz::write_file("model_dir/checkpoint", garden_fuzz::as_view(data, size));
  try {
    const auto latest = garden::latest_checkpoint(dir.string());
    GARDEN_FUZZ_CHECK(latest && std::filesystem::is_regular_file(*latest));
    garden::CheckpointManager manager(dir.string(), 2);
    for (const auto& path : manager.checkpoints()) GARDEN_FUZZ_CHECK(std::filesystem::exists(path));
  } catch (const garden::Error&) {
  }
  return 0;
}
