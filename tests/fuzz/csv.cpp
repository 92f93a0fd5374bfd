// libFuzzer target: any bytes as a CSV file. The reader must return a table or an error, never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "slipway/data.h"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(bytes), size);
  slipway::data::CsvOptions options;
  options.thread_count = 2;
  auto table = slipway::data::parse_csv(text, "fuzz.csv", options);
  if (table.ok() && table->row_count() > 0) {
    for (const auto& column : table->columns()) (void)column.text_at(table->row_count() - 1);
  }
  return 0;
}
