// TFRecord framing (GARDEN_FUZZ_COMPRESSION picks plain, GZIP or ZLIB): the
// reader, strict and skipping corrupt records, on arbitrary bytes.
#include <string>

#include "fuzz_util.h"
#include "garden/data/tfrecord.h"

using garden::data::Compression;
using garden::data::TFRecordReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = garden_fuzz::write_file("records", garden_fuzz::as_view(data, size));
  for (bool skip : {false, true}) {
    TFRecordReader::Options options;
    options.compression = Compression::GARDEN_FUZZ_COMPRESSION;
    options.skip_corrupt = skip;
    try {
      TFRecordReader reader(path, options);
      std::string record;
      uint64_t last = 0;
      while (reader.read(record)) {
        // Every record costs at least its 16 bytes of framing.
        GARDEN_FUZZ_CHECK(reader.offset() >= last + 16 + record.size());
        last = reader.offset();
      }
    } catch (const garden::Error&) {
    }
  }
  return 0;
}
