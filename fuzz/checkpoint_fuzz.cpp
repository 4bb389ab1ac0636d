// Garden's checkpoint files on arbitrary bytes: refused with one line naming
// the file, or read with every tensor's CRC verified; what was read writes
// and reads back the same.
#include "fuzz_util.h"
#include "garden/core/checkpoint.h"
#include "tensor_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = garden_fuzz::write_file("ckpt-1", garden_fuzz::as_view(data, size));
  garden::CheckpointData read;
  try {
    read = garden::read_checkpoint_file(path);
  } catch (const garden::Error& e) {
    GARDEN_FUZZ_CHECK(std::string(e.what()).find(path) != std::string::npos);
    return 0;
  }
  const std::string copy = garden_fuzz::scratch("ckpt-2");
  garden::write_checkpoint_file(copy, read);
  const garden::CheckpointData again = garden::read_checkpoint_file(copy);
  GARDEN_FUZZ_CHECK(again.meta == read.meta);
  garden_fuzz::check_same_tensors(read.tensors, again.tensors);
  return 0;
}
