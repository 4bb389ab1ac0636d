// CSV (RFC 4180, the tabular task's and TensorFX's files) on arbitrary
// bytes: every row has the header's width, every field parses as a double
// or is refused.
#include <cmath>
#include <vector>

#include "fuzz_util.h"
#include "garden/data/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = garden_fuzz::write_file("table.csv", garden_fuzz::as_view(data, size));
  for (char delimiter : {',', '\t'}) {
    try {
      garden::data::CsvReader reader(path, delimiter);
      GARDEN_FUZZ_CHECK(!reader.header().empty());
      std::vector<std::string> fields;
      int64_t line = 1;
      while (reader.next(fields)) {
        GARDEN_FUZZ_CHECK(fields.size() == reader.header().size());
        GARDEN_FUZZ_CHECK(reader.line() > line);
        line = reader.line();
        for (const auto& field : fields) {
          double value = 0;
          if (garden::data::parse_double(field, value)) GARDEN_FUZZ_CHECK(std::isfinite(value));
        }
      }
      reader.column(reader.header().front());
    } catch (const garden::Error&) {
    }
  }
  return 0;
}
