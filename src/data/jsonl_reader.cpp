// JSON Lines into a Table: one object per line, row by row, with bad lines reported, not fatal.
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "slipway/data.h"

namespace slipway::data {
namespace {

// One column as read: per row a number, a text, or missing, until the table is built.
struct PendingColumn {
  std::string name;
  std::vector<float> numbers;      // per row; NaN when the row's value is text or missing
  std::vector<std::string> texts;  // per row; the value as text ("" with is_text false)
  std::vector<char> is_text;
  bool any_text = false;

  void pad_to(std::size_t rows) {
    numbers.resize(rows, std::numeric_limits<float>::quiet_NaN());
    texts.resize(rows);
    is_text.resize(rows, 0);
  }
};

Column build(PendingColumn& pending) {
  Column column;
  column.name = std::move(pending.name);
  if (!pending.any_text) {
    column.numbers = std::move(pending.numbers);
    return column;
  }
  // Text anywhere makes the column categorical; its numbers become categories as written.
  column.type = ColumnType::kCategorical;
  column.codes.reserve(pending.numbers.size());
  std::unordered_map<std::string, std::int32_t> code_of;
  for (std::size_t row = 0; row < pending.numbers.size(); ++row) {
    std::string text = pending.is_text[row] != 0          ? std::move(pending.texts[row])
                       : std::isnan(pending.numbers[row]) ? std::string()
                                                          : fmt::format("{}", pending.numbers[row]);
    if (pending.is_text[row] == 0 && text.empty()) {
      column.codes.push_back(Column::kMissingCode);
      continue;
    }
    auto [found, inserted] = code_of.try_emplace(text, static_cast<std::int32_t>(column.dictionary.size()));
    if (inserted) column.dictionary.push_back(text);
    column.codes.push_back(found->second);
  }
  return column;
}

}  // namespace

Result<TolerantTable> read_jsonl_rows(const std::string& path) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_jsonl_rows(text, path);
}

Result<TolerantTable> parse_jsonl_rows(std::string_view text, std::string_view source_name) {
  if (!simdjson::validate_utf8(text.data(), text.size())) {
    return invalid_argument(std::string(source_name) +
                            " is not UTF-8; JSON Lines must be (convert it, e.g. with `iconv -t utf-8`)");
  }
  TolerantTable read;
  std::vector<PendingColumn> columns;
  std::unordered_map<std::string, std::size_t> column_of;
  simdjson::dom::parser parser;
  std::size_t kept = 0;
  std::size_t data_row = 0;
  std::size_t line = 0;
  std::size_t pos = 0;
  // Values of the current line, checked whole before any is kept.
  std::vector<std::pair<std::size_t, simdjson::dom::element>> values;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view record(text.data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (!record.empty() && record.back() == '\r') record.remove_suffix(1);
    if (record.find_first_not_of(" \t") == std::string_view::npos) continue;
    ++data_row;
    auto bad = [&](std::string reason) { read.bad_rows.push_back({data_row, line, std::move(reason)}); };
    simdjson::dom::object object;
    auto error = parser.parse(record.data(), record.size()).get(object);
    if (error != simdjson::SUCCESS) {
      bad(error == simdjson::INCORRECT_TYPE
              ? "the line is not a JSON object"
              : std::string("the line is not valid JSON (") + simdjson::error_message(error) + ")");
      continue;
    }
    // Checked whole first, so a bad line adds no column.
    std::string problem;
    std::vector<std::string_view> keys;
    for (auto field : object) {
      auto type = field.value.type();
      if (type == simdjson::dom::element_type::ARRAY || type == simdjson::dom::element_type::OBJECT) {
        problem = "field '" + std::string(field.key) + "' holds an array or object, not a value";
        break;
      }
      if (std::find(keys.begin(), keys.end(), field.key) != keys.end()) {
        problem = "field '" + std::string(field.key) + "' appears twice";
        break;
      }
      keys.push_back(field.key);
    }
    if (!problem.empty()) {
      bad(std::move(problem));
      continue;
    }
    values.clear();
    for (auto field : object) {
      auto [found, inserted] = column_of.try_emplace(std::string(field.key), columns.size());
      if (inserted) {
        columns.push_back(PendingColumn{std::string(field.key), {}, {}, {}, false});
        columns.back().pad_to(kept);
      }
      values.emplace_back(found->second, field.value);
    }
    ++kept;
    for (auto& column : columns) column.pad_to(kept);
    for (const auto& [index, value] : values) {
      PendingColumn& column = columns[index];
      std::size_t row = kept - 1;
      switch (value.type()) {
        case simdjson::dom::element_type::INT64:
        case simdjson::dom::element_type::UINT64:
        case simdjson::dom::element_type::DOUBLE:
          column.numbers[row] = static_cast<float>(double(value));
          break;
        case simdjson::dom::element_type::BOOL:
          column.numbers[row] = bool(value) ? 1.0f : 0.0f;
          break;
        case simdjson::dom::element_type::STRING:
          column.texts[row] = std::string(std::string_view(value));
          column.is_text[row] = 1;
          column.any_text = true;
          break;
        default:  // null: missing
          break;
      }
    }
    read.source_rows.push_back(data_row);
  }
  for (auto& column : columns) SLIPWAY_RETURN_IF_ERROR(read.table.add_column(build(column)));
  return read;
}

}  // namespace slipway::data
