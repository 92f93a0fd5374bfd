// JSON Lines into a Table: one object per line, row by row, with bad lines reported, not fatal.
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "slipway/data.h"

namespace slipway::data {
namespace {

// Keys are columns: a file with more distinct keys than this is not a table.
constexpr std::size_t kMaxKeys = 4096;

// One column as read, sparse (rows that lack the key hold nothing), until the table is built.
struct PendingColumn {
  std::string name;
  bool as_text = false;  // one of the caller's text columns
  Cells cells;           // strings, and numbers of a text column, as text
};

// The number token that follows "key": in a JSON line, when it reads back as `value` (a key that
// is written with escapes, or also appears inside a string, may not be found: then nullopt).
std::optional<std::string_view> number_token(std::string_view line, std::string_view key, double value) {
  const std::string quoted = "\"" + std::string(key) + "\"";
  for (std::size_t at = line.find(quoted); at != std::string_view::npos; at = line.find(quoted, at + 1)) {
    // A quote after an odd run of backslashes is inside a string ("a\"id": ...), not a key's.
    std::size_t backslashes = 0;
    while (backslashes < at && line[at - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 1) continue;
    std::size_t pos = line.find_first_not_of(" \t", at + quoted.size());
    if (pos == std::string_view::npos || line[pos] != ':') continue;
    pos = line.find_first_not_of(" \t", pos + 1);
    if (pos == std::string_view::npos) continue;
    std::size_t end = line.find_first_not_of("+-.0123456789eE", pos);
    std::string_view token = line.substr(pos, (end == std::string_view::npos ? line.size() : end) - pos);
    double parsed = 0;
    auto [stop, error] = std::from_chars(token.data(), token.data() + token.size(), parsed);
    if (!token.empty() && error == std::errc() && stop == token.data() + token.size() && parsed == value) return token;
  }
  return std::nullopt;
}

// A JSON number in a text column, as written (1.0 stays "1.0", as a CSV file's does; an id keeps
// every digit).
std::string number_text(simdjson::dom::element value, std::string_view line, std::string_view key) {
  std::int64_t integer = 0;
  std::uint64_t unsigned_integer = 0;
  if (value.get(integer) == simdjson::SUCCESS) return std::to_string(integer);
  if (value.get(unsigned_integer) == simdjson::SUCCESS) return std::to_string(unsigned_integer);
  if (auto written = number_token(line, key, double(value))) return std::string(*written);
  return fmt::format("{}", double(value));
}

}  // namespace

Result<TolerantTable> read_jsonl_rows(const std::string& path, const std::vector<std::string>& text_columns) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_jsonl_rows(text, path, text_columns);
}

Result<TolerantTable> parse_jsonl_rows(std::string_view text, std::string_view source_name,
                                       const std::vector<std::string>& text_columns) {
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
  std::unordered_set<std::string_view> keys;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
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
    keys.clear();
    for (auto field : object) {
      auto type = field.value.type();
      if (type == simdjson::dom::element_type::ARRAY || type == simdjson::dom::element_type::OBJECT) {
        problem = "field '" + std::string(field.key) + "' holds an array or object, not a value";
        break;
      }
      if (!keys.insert(field.key).second) {
        problem = "field '" + std::string(field.key) + "' appears twice";
        break;
      }
    }
    if (!problem.empty()) {
      bad(std::move(problem));
      continue;
    }
    std::size_t row = kept++;
    for (auto field : object) {
      auto [found, inserted] = column_of.try_emplace(std::string(field.key), columns.size());
      if (inserted) {
        if (columns.size() == kMaxKeys) {
          return invalid_argument(std::string(source_name) + ":" + std::to_string(line) + ": more than " +
                                  std::to_string(kMaxKeys) + " distinct keys; JSON Lines input is one table");
        }
        bool as_text = std::find(text_columns.begin(), text_columns.end(), field.key) != text_columns.end();
        columns.push_back(PendingColumn{std::string(field.key), as_text, {}});
      }
      PendingColumn& column = columns[found->second];
      simdjson::dom::element value = field.value;
      switch (value.type()) {
        case simdjson::dom::element_type::INT64:
        case simdjson::dom::element_type::UINT64:
        case simdjson::dom::element_type::DOUBLE:
          if (column.as_text) {
            column.cells.texts.emplace_back(row, number_text(value, record, field.key));
          } else {
            column.cells.numbers.emplace_back(row, static_cast<float>(double(value)));
          }
          break;
        case simdjson::dom::element_type::BOOL:
          column.cells.numbers.emplace_back(row, bool(value) ? 1.0f : 0.0f);
          break;
        case simdjson::dom::element_type::STRING:
          column.cells.texts.emplace_back(row, std::string(std::string_view(value)));
          break;
        default:  // null: missing
          break;
      }
    }
    read.source_rows.push_back(data_row);
  }
  for (auto& column : columns) {
    SLIPWAY_RETURN_IF_ERROR(
        read.table.add_column(column_of_cells(std::move(column.name), kept, std::move(column.cells), column.as_text)));
  }
  return read;
}

bool is_json_lines(std::string_view path) {
  std::string extension = std::filesystem::path(path).extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return extension == ".jsonl" || extension == ".ndjson";
}

Result<TolerantTable> parse_rows(std::string_view text, const std::string& path,
                                 const std::vector<std::string>& text_columns) {
  if (is_json_lines(path)) return parse_jsonl_rows(text, path, text_columns);
  return parse_csv_rows(text, path, {.text_columns = text_columns});
}

Result<TolerantTable> read_rows(const std::string& path, const std::vector<std::string>& text_columns) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_rows(text, path, text_columns);
}

}  // namespace slipway::data
