// slipway/data.h — tables, the CSV reader, train/test splits and their leakage report.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/core.h"

namespace slipway::data {

enum class ColumnType { kNumeric, kCategorical };

std::string_view column_type_name(ColumnType type);

// One column of a Table. Numeric values are float32 with NaN for missing; categorical values are
// codes into `dictionary` with kMissingCode for missing. Only the vector matching `type` is used.
struct Column {
  static constexpr std::int32_t kMissingCode = -1;

  std::string name;
  ColumnType type = ColumnType::kNumeric;
  std::vector<float> numbers;
  std::vector<std::int32_t> codes;
  std::vector<std::string> dictionary;

  std::size_t size() const { return type == ColumnType::kNumeric ? numbers.size() : codes.size(); }
  bool is_missing(std::size_t row) const;
  // The value as text: the category, the number in shortest round-trip form, or "" when missing.
  std::string text_at(std::size_t row) const;
};

// A columnar table. Every column has row_count() rows.
class Table {
 public:
  std::size_t row_count() const { return columns_.empty() ? 0 : columns_.front().size(); }
  std::size_t column_count() const { return columns_.size(); }
  const Column& column(std::size_t index) const { return columns_[index]; }
  const std::vector<Column>& columns() const { return columns_; }

  // nullptr when there is no column of that name.
  const Column* find(std::string_view name) const;
  // NotFound naming the columns that do exist.
  Result<std::size_t> column_index(std::string_view name) const;

  // Adds a column; InvalidArgument if the name is taken or the length differs from the others.
  Status add_column(Column column);

  // A new table holding the given rows, in the given order. Rows must be < row_count().
  Table take_rows(std::span<const std::uint32_t> rows) const;

 private:
  std::vector<Column> columns_;
};

// ---------------------------------------------------------------------------------------------
// CSV.

struct CsvOptions {
  char delimiter = ',';
  // Unquoted or quoted fields equal to one of these are missing values.
  std::vector<std::string> missing_values = {"", "NA"};
  // 0 = default_thread_count().
  int thread_count = 0;
  // Columns read as text exactly as written, whatever they hold (identifiers such as 00123 or
  // 12345678901, which a float would change).
  std::vector<std::string> text_columns;
};

// Reads a CSV file with a header row. The file is read whole, then parsed in parallel chunks.
// A column is numeric when every non-missing field parses as a number, otherwise categorical
// (dictionary in order of first appearance, so the result does not depend on thread count).
// Errors name the place: "file.csv:LINE:COLUMN: what was wrong". Infinite values in a numeric
// column (inf, or beyond float32's range such as 1e300) are refused with the column and line: no
// model can use them. "nan" reads as missing. A file with CR-only line endings is refused.
Result<Table> read_csv(const std::string& path, const CsvOptions& options = {});
// The same, for text already in memory; `source_name` is used in error messages.
Result<Table> parse_csv(std::string_view text, std::string_view source_name, const CsvOptions& options = {});

// A column of `rows` rows from the values some of them hold (the others missing): numeric, unless
// any value is text or `as_text`, when it is categorical with its numbers as written (shortest
// form). For readers that meet values row by row (JSON Lines, the request log).
struct Cells {
  std::vector<std::pair<std::size_t, float>> numbers;      // (row, value)
  std::vector<std::pair<std::size_t, std::string>> texts;  // (row, text)
};
Column column_of_cells(std::string name, std::size_t rows, Cells&& cells, bool as_text = false);

// A row a tolerant read left out, and why.
struct BadRow {
  std::size_t row = 0;   // the data row's number in the file, from 1 (the header is not counted)
  std::size_t line = 0;  // its first line in the file
  std::string reason;
};

// What a tolerant read gives: the table of the rows it kept, the input row each came from, and
// the rows it left out.
struct TolerantTable {
  Table table;
  std::vector<std::size_t> source_rows;  // per table row, its data row number (from 1)
  std::vector<BadRow> bad_rows;
};

// read_csv for readers that judge rows one by one (batch scoring): a row whose field count
// differs from the header's is left out and reported instead of refusing the file, and infinite
// numbers stay in numeric columns (as ±inf) for the caller to judge. A file that is not CSV (not
// UTF-8, an unterminated quote, CR-only line endings) is still refused.
Result<TolerantTable> read_csv_rows(const std::string& path, const CsvOptions& options = {});
// The same, for text already in memory; `source_name` is used in error messages.
Result<TolerantTable> parse_csv_rows(std::string_view text, std::string_view source_name,
                                     const CsvOptions& options = {});

// ---------------------------------------------------------------------------------------------
// JSON Lines: one JSON object per line, its keys the columns (in order of first appearance; a
// key a row lacks is missing there). Numbers are numeric, booleans 1 and 0, strings text
// (a column holding any text is categorical, its numbers kept as text), null missing. A line
// that is not a JSON object, or holds an array or object as a value, is a bad row. Blank lines
// are skipped.
// At most 4,096 distinct keys: a file with more is refused. `text_columns` as CsvOptions'.
Result<TolerantTable> read_jsonl_rows(const std::string& path, const std::vector<std::string>& text_columns = {});
Result<TolerantTable> parse_jsonl_rows(std::string_view text, std::string_view source_name,
                                       const std::vector<std::string>& text_columns = {});

// Whether `path` names JSON Lines: it ends in .jsonl or .ndjson, in any case.
bool is_json_lines(std::string_view path);
// Rows from a file read either way: JSON Lines for a path ending in .jsonl or .ndjson (any case),
// CSV otherwise; `text_columns` read as written.
Result<TolerantTable> read_rows(const std::string& path, const std::vector<std::string>& text_columns = {});
// The same for the file's bytes, already read.
Result<TolerantTable> parse_rows(std::string_view text, const std::string& path,
                                 const std::vector<std::string>& text_columns = {});

// ---------------------------------------------------------------------------------------------
// Splits.

enum class SplitKind { kRandom, kStratified, kTime, kGroup };

struct SplitSpec {
  SplitKind kind = SplitKind::kRandom;
  std::string column;  // the time column for kTime, the group column for kGroup
  double test_fraction = 0.2;
  std::uint64_t seed = 42;
};

// Parses "random", "stratified", "time:COL" or "group:COL".
Result<SplitSpec> parse_split_kind(std::string_view text);
std::string describe_split(const SplitSpec& spec);

struct Split {
  std::vector<std::uint32_t> train_rows;
  std::vector<std::uint32_t> test_rows;
};

// Splits the rows of `table`. `target_column` is used by stratified splits. Deterministic for a
// seed. Time splits put every row whose time is later than all training rows in test (ties never
// straddle the cut); group splits never put one group on both sides.
Result<Split> split_rows(const Table& table, const SplitSpec& spec, std::string_view target_column);

// What a split might leak from test into train. A clean split has every count at zero.
struct LeakageReport {
  std::size_t duplicate_test_rows = 0;   // test rows with an exact copy (every column) in train
  std::size_t groups_on_both_sides = 0;  // group splits only
  std::size_t test_rows_not_later = 0;   // time splits only: test rows not later than all of train
};

LeakageReport check_leakage(const Table& table, const Split& split, const SplitSpec& spec);

// A fingerprint of the table's content (sha256 over names, types and values), independent of
// how the file was formatted. Used as the run's data fingerprint.
std::string fingerprint(const Table& table);

}  // namespace slipway::data
