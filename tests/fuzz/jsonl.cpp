// libFuzzer target: any bytes as a JSON Lines file, and as a CSV file read row by row. The
// tolerant readers must return a table (every row kept or reported) or an error, never crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "slipway/data.h"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(bytes), size);
  for (bool jsonl : {true, false}) {
    auto read = jsonl ? slipway::data::parse_jsonl_rows(text, "fuzz.jsonl")
                      : slipway::data::parse_csv_rows(text, "fuzz.csv", {.thread_count = 2});
    if (!read.ok()) continue;
    // Every kept row has its number, and the numbers of kept and bad rows never repeat.
    // (A table without columns has no rows to count: `{}` lines are kept rows of nothing.)
    if (read->table.column_count() > 0 && read->source_rows.size() != read->table.row_count()) std::abort();
    for (std::size_t row = 1; row < read->source_rows.size(); ++row) {
      if (read->source_rows[row] <= read->source_rows[row - 1]) std::abort();
    }
    for (const auto& column : read->table.columns()) {
      if (column.size() != read->table.row_count()) std::abort();
      if (column.size() > 0) (void)column.text_at(column.size() - 1);
    }
  }
  return 0;
}
