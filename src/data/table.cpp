#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "slipway/data.h"

namespace slipway::data {

std::string_view column_type_name(ColumnType type) { return type == ColumnType::kNumeric ? "numeric" : "categorical"; }

bool Column::is_missing(std::size_t row) const {
  return type == ColumnType::kNumeric ? std::isnan(numbers[row]) : codes[row] == kMissingCode;
}

std::string Column::text_at(std::size_t row) const {
  if (is_missing(row)) return {};
  if (type == ColumnType::kCategorical) return dictionary[static_cast<std::size_t>(codes[row])];
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, numbers[row]);
  return {buffer, result.ptr};
}

const Column* Table::find(std::string_view name) const {
  for (const auto& column : columns_) {
    if (column.name == name) return &column;
  }
  return nullptr;
}

Result<std::size_t> Table::column_index(std::string_view name) const {
  for (std::size_t index = 0; index < columns_.size(); ++index) {
    if (columns_[index].name == name) return index;
  }
  std::string known;
  for (const auto& column : columns_) {
    if (!known.empty()) known += ", ";
    known += column.name;
  }
  return not_found("no column named '" + std::string(name) + "'; the columns are: " + known);
}

Status Table::add_column(Column column) {
  if (find(column.name) != nullptr) return invalid_argument("duplicate column name '" + column.name + "'");
  if (!columns_.empty() && column.size() != row_count()) {
    return invalid_argument("column '" + column.name + "' has " + std::to_string(column.size()) +
                            " rows, the table has " + std::to_string(row_count()));
  }
  columns_.push_back(std::move(column));
  return {};
}

Table Table::take_rows(std::span<const std::uint32_t> rows) const {
  Table out;
  out.columns_.reserve(columns_.size());
  for (const auto& source : columns_) {
    Column column;
    column.name = source.name;
    column.type = source.type;
    if (source.type == ColumnType::kNumeric) {
      column.numbers.reserve(rows.size());
      for (auto row : rows) column.numbers.push_back(source.numbers[row]);
    } else {
      column.dictionary = source.dictionary;
      column.codes.reserve(rows.size());
      for (auto row : rows) column.codes.push_back(source.codes[row]);
    }
    out.columns_.push_back(std::move(column));
  }
  return out;
}

std::string fingerprint(const Table& table) {
  Sha256 hasher;
  for (const auto& column : table.columns()) {
    hasher.update(column.name);
    hasher.update(column_type_name(column.type));
    if (column.type == ColumnType::kNumeric) {
      hasher.update(std::as_bytes(std::span(column.numbers)));
    } else {
      for (const auto& level : column.dictionary) {
        hasher.update(level);
        hasher.update(std::string_view("\0", 1));
      }
      hasher.update(std::as_bytes(std::span(column.codes)));
    }
  }
  auto digest = hasher.finish();
  return to_hex(digest);
}

Column column_of_cells(std::string name, std::size_t rows, Cells&& cells, bool as_text) {
  Column column;
  column.name = std::move(name);
  if (cells.texts.empty() && !as_text) {
    column.numbers.assign(rows, std::numeric_limits<float>::quiet_NaN());
    for (const auto& [row, number] : cells.numbers) column.numbers[row] = number;
    return column;
  }
  // Text anywhere makes the column categorical; its numbers become categories as written.
  std::vector<std::optional<std::string>> text(rows);
  for (auto& [row, value] : cells.texts) text[row] = std::move(value);
  for (const auto& [row, number] : cells.numbers) text[row] = fmt::format("{}", number);
  column.type = ColumnType::kCategorical;
  column.codes.assign(rows, Column::kMissingCode);
  std::unordered_map<std::string, std::int32_t> code_of;
  for (std::size_t row = 0; row < rows; ++row) {
    if (!text[row]) continue;
    auto [found, inserted] = code_of.try_emplace(*text[row], static_cast<std::int32_t>(column.dictionary.size()));
    if (inserted) column.dictionary.push_back(*text[row]);
    column.codes[row] = found->second;
  }
  return column;
}

}  // namespace slipway::data
