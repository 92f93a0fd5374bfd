// CSV reading: one sequential pass finds chunk boundaries (respecting quotes), chunks are parsed
// into field views in parallel, then each column's type is inferred and converted in parallel.
#include <fast_float/fast_float.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>

#include "slipway/data.h"

namespace slipway::data {
namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

struct ParseError {
  std::size_t line_in_chunk = 0;  // 0-based, relative to the chunk's first line
  std::size_t column = 0;         // 1-based character position in the line
  std::string message;
};

// The fields of one chunk of rows, column-major, pointing into the file or into `unescaped`.
struct Chunk {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::vector<std::vector<std::string_view>> fields;
  // Numbers are parsed while the row is in cache; numeric[c] turns false (and numbers[c] is
  // dropped) at the first field of column c that is not a number.
  std::vector<std::vector<float>> numbers;
  std::vector<char> numeric;
  std::deque<std::string> unescaped;
  // The first infinite number of each column (line relative to the chunk): an error if the column
  // ends up numeric, an ordinary category if it does not.
  std::vector<std::optional<std::pair<std::size_t, std::string_view>>> first_infinite;
  std::size_t line_count = 0;  // physical lines in the chunk, quoted newlines included
  std::optional<ParseError> error;
  // A tolerant read: every record (kept or not) is counted, and those left out listed with their
  // record index in the chunk (their line relative to the chunk, and why).
  std::size_t records = 0;
  std::vector<std::pair<std::size_t, BadRow>> left_out;
};

std::size_t count_char(std::string_view text, std::size_t begin, std::size_t end, char wanted) {
  std::size_t count = 0;
  const char* cursor = text.data() + begin;
  const char* stop = text.data() + end;
  while (cursor < stop) {
    const void* found = std::memchr(cursor, wanted, static_cast<std::size_t>(stop - cursor));
    if (found == nullptr) break;
    ++count;
    cursor = static_cast<const char*>(found) + 1;
  }
  return count;
}

// Splits [begin, text.size()) into chunks of about kChunkBytes that end just after a newline
// outside quotes, so that each chunk holds whole rows.
std::vector<Chunk> find_chunks(std::string_view text, std::size_t begin) {
  std::vector<Chunk> chunks;
  std::size_t chunk_begin = begin;
  while (chunk_begin < text.size()) {
    std::size_t target = std::min(text.size(), chunk_begin + kChunkBytes);
    bool in_quotes = count_char(text, chunk_begin, target, '"') % 2 == 1;
    std::size_t cut = target;
    while (cut < text.size()) {
      char c = text[cut++];
      if (c == '"')
        in_quotes = !in_quotes;
      else if (c == '\n' && !in_quotes)
        break;
    }
    Chunk chunk;
    chunk.begin = chunk_begin;
    chunk.end = cut;
    chunks.push_back(std::move(chunk));
    chunk_begin = cut;
  }
  return chunks;
}

// Parses one record starting at `pos`; appends its fields to `row` and returns the position after
// the record's newline. Lines are counted into `line`.
struct RecordParser {
  std::string_view text;
  std::size_t end;
  char delimiter;

  std::size_t line = 0;
  std::size_t line_start = 0;

  bool parse(std::size_t& pos, std::vector<std::string_view>& row, std::deque<std::string>& unescaped,
             std::optional<ParseError>& error) {
    row.clear();
    while (true) {
      if (pos < end && text[pos] == '"') {
        std::size_t open_line = line;
        std::size_t open_column = pos - line_start + 1;
        std::size_t content_begin = ++pos;
        bool has_escaped_quote = false;
        while (true) {
          if (pos >= end) {
            error = ParseError{open_line, open_column, "unterminated quoted field (the quote opens here)"};
            return false;
          }
          char c = text[pos];
          if (c == '"') {
            if (pos + 1 < end && text[pos + 1] == '"') {
              has_escaped_quote = true;
              pos += 2;
              continue;
            }
            break;
          }
          if (c == '\n') {
            ++line;
            line_start = pos + 1;
          }
          ++pos;
        }
        std::string_view content = text.substr(content_begin, pos - content_begin);
        ++pos;  // closing quote
        if (has_escaped_quote) {
          std::string value;
          value.reserve(content.size());
          for (std::size_t i = 0; i < content.size(); ++i) {
            value.push_back(content[i]);
            if (content[i] == '"') ++i;
          }
          unescaped.push_back(std::move(value));
          content = unescaped.back();
        }
        row.push_back(content);
        if (pos < end && text[pos] == '\r') ++pos;
        if (pos < end && text[pos] != delimiter && text[pos] != '\n') {
          error =
              ParseError{line, pos - line_start + 1,
                         "unexpected character after a closing quote (expected a delimiter or the end of the line)"};
          return false;
        }
      } else {
        std::size_t field_begin = pos;
        while (pos < end && text[pos] != delimiter && text[pos] != '\n') {
          if (text[pos] == '"') {
            error = ParseError{line, pos - line_start + 1, "quote inside an unquoted field"};
            return false;
          }
          ++pos;
        }
        std::size_t field_end = pos;
        if (field_end > field_begin && text[field_end - 1] == '\r') --field_end;
        row.push_back(text.substr(field_begin, field_end - field_begin));
      }
      if (pos >= end) return true;
      if (text[pos] == '\n') {
        ++pos;
        ++line;
        line_start = pos;
        return true;
      }
      ++pos;  // delimiter
    }
  }
};

bool is_blank_line(std::string_view text, std::size_t pos, std::size_t end) {
  return pos < end && (text[pos] == '\n' || (text[pos] == '\r' && pos + 1 < end && text[pos + 1] == '\n'));
}

bool is_missing_value(std::string_view field, const std::vector<std::string>& missing_values) {
  for (const auto& missing : missing_values) {
    if (field == missing) return true;
  }
  return false;
}

std::string_view trim_spaces(std::string_view field) {
  while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
  while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
  return field;
}

// The field as a number, or nullopt when it is not one (then the column is categorical).
std::optional<float> parse_number(std::string_view field, const std::vector<std::string>& missing_values) {
  if (is_missing_value(field, missing_values)) return std::numeric_limits<float>::quiet_NaN();
  std::string_view trimmed = trim_spaces(field);
  double value = 0;
  auto result = fast_float::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), value);
  if (trimmed.empty() || result.ec != std::errc() || result.ptr != trimmed.data() + trimmed.size()) return std::nullopt;
  return static_cast<float>(value);
}

void parse_chunk(std::string_view text, const CsvOptions& options, std::size_t column_count, bool tolerant,
                 Chunk& chunk) {
  chunk.fields.assign(column_count, {});
  chunk.numbers.assign(column_count, {});
  chunk.numeric.assign(column_count, 1);
  chunk.first_infinite.assign(column_count, std::nullopt);
  char delimiter = options.delimiter;
  RecordParser parser{text, chunk.end, delimiter};
  parser.line_start = chunk.begin;
  std::vector<std::string_view> row;
  std::size_t pos = chunk.begin;
  while (pos < chunk.end) {
    if (is_blank_line(text, pos, chunk.end)) {
      pos = static_cast<const char*>(std::memchr(text.data() + pos, '\n', chunk.end - pos)) - text.data() + 1;
      ++parser.line;
      parser.line_start = pos;
      continue;
    }
    std::size_t record_line = parser.line;
    if (!parser.parse(pos, row, chunk.unescaped, chunk.error)) break;
    if (row.size() != column_count) {
      std::string reason =
          "expected " + std::to_string(column_count) + " fields as in the header, found " + std::to_string(row.size());
      if (tolerant) {
        chunk.left_out.push_back({chunk.records++, BadRow{0, record_line, std::move(reason)}});
        continue;
      }
      chunk.error = ParseError{record_line, 0, std::move(reason)};
      break;
    }
    ++chunk.records;
    for (std::size_t column = 0; column < column_count; ++column) {
      chunk.fields[column].push_back(row[column]);
      if (!chunk.numeric[column]) continue;
      if (auto number = parse_number(row[column], options.missing_values)) {
        if (std::isinf(*number) && !chunk.first_infinite[column]) {
          chunk.first_infinite[column].emplace(record_line, row[column]);
        }
        chunk.numbers[column].push_back(*number);
      } else {
        chunk.numeric[column] = 0;
        chunk.numbers[column] = {};
      }
    }
  }
  chunk.line_count = parser.line;
}

Column build_column(std::string name, const std::vector<Chunk>& chunks, std::size_t column_index,
                    const std::vector<std::string>& missing_values, bool as_text) {
  Column column;
  column.name = std::move(name);
  std::size_t rows = 0;
  for (const auto& chunk : chunks) rows += chunk.fields[column_index].size();

  bool numeric = !as_text;
  for (const auto& chunk : chunks) numeric = numeric && chunk.numeric[column_index];
  if (numeric) {
    column.numbers.reserve(rows);
    for (const auto& chunk : chunks) {
      column.numbers.insert(column.numbers.end(), chunk.numbers[column_index].begin(),
                            chunk.numbers[column_index].end());
    }
    return column;
  }

  column.type = ColumnType::kCategorical;
  column.codes.reserve(rows);
  std::unordered_map<std::string_view, std::int32_t> code_of;
  for (const auto& chunk : chunks) {
    for (std::string_view field : chunk.fields[column_index]) {
      if (is_missing_value(field, missing_values)) {
        column.codes.push_back(Column::kMissingCode);
        continue;
      }
      auto [it, inserted] = code_of.try_emplace(field, static_cast<std::int32_t>(column.dictionary.size()));
      if (inserted) column.dictionary.emplace_back(field);
      column.codes.push_back(it->second);
    }
  }
  return column;
}

std::string location(std::string_view source_name, std::size_t line, std::size_t column) {
  std::string out = std::string(source_name) + ":" + std::to_string(line);
  if (column > 0) out += ":" + std::to_string(column);
  return out;
}

// The line and byte column of the first byte that breaks UTF-8 (the slow path, for the message).
std::pair<std::size_t, std::size_t> first_invalid_utf8(std::string_view text) {
  std::size_t line = 1;
  std::size_t line_start = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t length = utf8_character_length(text, pos);
    if (length == 0) return {line, pos - line_start + 1};
    if (text[pos] == '\n') {
      ++line;
      line_start = pos + 1;
    }
    pos += length;
  }
  return {line, 0};
}

}  // namespace

namespace {

// parse_csv, and with `tolerant` (read_csv_rows) the rows left out and where each kept one came from.
Result<Table> parse_csv_text(std::string_view text, std::string_view source_name, const CsvOptions& options,
                             TolerantTable* tolerant) {
  if (text.size() >= 3 && std::memcmp(text.data(), "\xEF\xBB\xBF", 3) == 0) text.remove_prefix(3);
  if (text.empty()) return invalid_argument(std::string(source_name) + " is empty; a header row was expected");
  // Names and categories end up in bundle manifests and JSON answers, which must be UTF-8: a
  // Latin-1 file would train a model that no command could load. Validation runs at GB/s.
  if (!simdjson::validate_utf8(text)) {
    auto [line, column] = first_invalid_utf8(text);
    return invalid_argument(location(source_name, line, column) +
                            ": the file is not UTF-8 (is it Latin-1 or Windows-1252?); convert it, e.g. with "
                            "`iconv -f latin1 -t utf-8`");
  }

  RecordParser header_parser{text, text.size(), options.delimiter};
  std::vector<std::string_view> header_fields;
  std::deque<std::string> header_storage;
  std::optional<ParseError> header_error;
  std::size_t pos = 0;
  if (!header_parser.parse(pos, header_fields, header_storage, header_error)) {
    return invalid_argument(location(source_name, 1 + header_error->line_in_chunk, header_error->column) + ": " +
                            header_error->message);
  }
  // Classic Mac files end lines with a lone CR: the whole file would read as one header line.
  std::string_view first_line = text.substr(0, text.find('\n'));
  if (auto cr = first_line.find('\r'); cr != std::string_view::npos && cr + 1 < first_line.size()) {
    return invalid_argument(location(source_name, 1, 0) +
                            ": the file uses CR-only line endings (old Mac style); convert them to LF or CRLF, "
                            "e.g. with `tr '\\r' '\\n'`");
  }
  std::vector<std::string> names;
  for (std::size_t index = 0; index < header_fields.size(); ++index) {
    std::string name(trim_spaces(header_fields[index]));
    if (name.empty()) name = "column_" + std::to_string(index + 1);
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return invalid_argument(location(source_name, 1, 0) + ": the header names column '" + name + "' twice");
    }
    names.push_back(std::move(name));
  }
  std::size_t first_data_line = 1 + header_parser.line;

  std::vector<Chunk> chunks = find_chunks(text, pos);
  int threads = options.thread_count > 0 ? options.thread_count : default_thread_count();
  parallel_for(chunks.size(), threads, [&](std::size_t index) {
    parse_chunk(text, options, names.size(), tolerant != nullptr, chunks[index]);
  });

  std::size_t chunk_first_line = first_data_line;
  for (const auto& chunk : chunks) {
    if (chunk.error) {
      const auto& error = *chunk.error;
      return invalid_argument(location(source_name, chunk_first_line + error.line_in_chunk, error.column) + ": " +
                              error.message);
    }
    chunk_first_line += chunk.line_count;
  }
  chunk_first_line = first_data_line;
  if (tolerant != nullptr) {
    std::size_t rows_before = 0;
    for (auto& chunk : chunks) {
      auto left_out = chunk.left_out.begin();
      for (std::size_t record = 0; record < chunk.records; ++record) {
        if (left_out != chunk.left_out.end() && left_out->first == record) {
          BadRow bad = std::move(left_out->second);
          bad.row = rows_before + record + 1;
          bad.line += chunk_first_line;
          tolerant->bad_rows.push_back(std::move(bad));
          ++left_out;
        } else {
          tolerant->source_rows.push_back(rows_before + record + 1);
        }
      }
      rows_before += chunk.records;
      chunk_first_line += chunk.line_count;
    }
  }
  chunk_first_line = first_data_line;
  for (const auto& chunk : chunks) {
    if (tolerant != nullptr) break;  // infinite numbers are the caller's to judge
    for (std::size_t column = 0; column < names.size(); ++column) {
      if (!chunk.first_infinite[column]) continue;
      bool numeric =
          std::all_of(chunks.begin(), chunks.end(), [&](const Chunk& each) { return each.numeric[column]; }) &&
          std::find(options.text_columns.begin(), options.text_columns.end(), names[column]) ==
              options.text_columns.end();
      if (!numeric) continue;
      const auto& [line, field] = *chunk.first_infinite[column];
      return invalid_argument(location(source_name, chunk_first_line + line, 0) + ": column '" + names[column] +
                              "' holds '" + std::string(trim_spaces(field)) +
                              "', which is infinite as a 32-bit float; use finite numbers (an empty field "
                              "is a missing value)");
    }
    chunk_first_line += chunk.line_count;
  }

  std::vector<Column> columns(names.size());
  parallel_for(names.size(), threads, [&](std::size_t index) {
    bool as_text =
        std::find(options.text_columns.begin(), options.text_columns.end(), names[index]) != options.text_columns.end();
    columns[index] = build_column(names[index], chunks, index, options.missing_values, as_text);
  });
  Table table;
  for (auto& column : columns) SLIPWAY_RETURN_IF_ERROR(table.add_column(std::move(column)));
  return table;
}

}  // namespace

Result<Table> parse_csv(std::string_view text, std::string_view source_name, const CsvOptions& options) {
  return parse_csv_text(text, source_name, options, nullptr);
}

Result<TolerantTable> parse_csv_rows(std::string_view text, std::string_view source_name, const CsvOptions& options) {
  TolerantTable read;
  SLIPWAY_ASSIGN_OR_RETURN(read.table, parse_csv_text(text, source_name, options, &read));
  return read;
}

Result<TolerantTable> read_csv_rows(const std::string& path, const CsvOptions& options) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_csv_rows(text, path, options);
}

Result<Table> read_csv(const std::string& path, const CsvOptions& options) {
  // Read, not mapped: a mapped file truncated by another program mid-parse would kill the
  // process with SIGBUS; a read turns that into an error.
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_csv(text, path, options);
}

}  // namespace slipway::data
