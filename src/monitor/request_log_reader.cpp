// The request log (serve/request_log.cpp writes it; docs/formats.md) read back as a table of the
// requests' inputs, with each row's first score from its answer.
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <limits>
#include <optional>
#include <unordered_map>

#include "slipway/monitor.h"

namespace slipway::monitor {
namespace {

namespace fs = std::filesystem;

// Every scalar of a (possibly nested) JSON array, in order.
void flatten(simdjson::dom::element element, std::vector<simdjson::dom::element>& out) {
  simdjson::dom::array array;
  if (element.get(array) == simdjson::SUCCESS) {
    for (auto item : array) flatten(item, out);
    return;
  }
  out.push_back(element);
}

}  // namespace

Result<LoggedRequests> read_request_log(const std::string& directory, const std::string& model,
                                        const std::string& version, const std::string& endpoint,
                                        const std::vector<std::string>& inputs_wanted, std::int64_t from_ms,
                                        std::int64_t to_ms, const std::string& id_input) {
  LoggedRequests read;
  fs::path folder = fs::path(directory) / model;
  std::error_code error;
  if (!fs::is_directory(folder, error)) {
    return not_found("no request log for '" + model + "' in " + directory +
                     "; log requests with `slipway serving-config " + model + " --request-log-rate 0.1`");
  }
  std::vector<fs::path> segments;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    if (entry.path().extension() == ".jsonl") segments.push_back(entry.path());
  }
  std::sort(segments.begin(), segments.end());  // names sort in time order
  // A segment holds records from the time in its name to at most the end of that UTC hour (it
  // rotates at the hour): those that cannot hold the window are not read.
  auto start_of = [](const fs::path& path) -> std::optional<std::int64_t> {
    std::string name = path.filename().string();
    std::tm utc{};
    if (name.size() < 15 || std::sscanf(name.c_str(), "%4d%2d%2dT%2d%2d%2d", &utc.tm_year, &utc.tm_mon, &utc.tm_mday,
                                        &utc.tm_hour, &utc.tm_min, &utc.tm_sec) != 6) {
      return std::nullopt;
    }
    utc.tm_year -= 1900;
    utc.tm_mon -= 1;
    return static_cast<std::int64_t>(timegm(&utc)) * 1000;
  };
  constexpr std::int64_t kHourMs = 3'600'000;
  std::erase_if(segments, [&](const fs::path& path) {
    auto start = start_of(path);
    return start && (*start >= to_ms || (*start / kHourMs + 1) * kHourMs <= from_ms);
  });
  std::vector<std::pair<std::string, data::Cells>> columns;  // by column_of
  std::unordered_map<std::string, std::size_t> column_of;
  for (const auto& name : inputs_wanted) {
    column_of.emplace(name, columns.size());
    columns.emplace_back(name, data::Cells{});
  }
  const std::size_t model_inputs = columns.size();  // the width of the [N, inputs] form
  if (!id_input.empty() && column_of.emplace(id_input, columns.size()).second) {
    columns.emplace_back(id_input, data::Cells{});
  }
  std::size_t rows = 0;
  simdjson::dom::parser parser;
  std::vector<simdjson::dom::element> values;
  for (const auto& path : segments) {
    auto text = read_file(path.string());
    if (!text.ok()) continue;  // deleted by retention meanwhile
    std::string_view rest = *text;
    while (!rest.empty()) {
      auto end = rest.find('\n');
      std::string_view line = rest.substr(0, end);
      rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
      if (line.empty()) continue;
      simdjson::dom::object record;
      std::int64_t time_ms = 0, status = 0;
      std::string_view logged_version, came_through;
      simdjson::dom::array inputs;
      if (parser.parse(line.data(), line.size()).get(record) != simdjson::SUCCESS ||
          record["time_ms"].get(time_ms) != simdjson::SUCCESS || record["status"].get(status) != simdjson::SUCCESS ||
          record["version"].get(logged_version) != simdjson::SUCCESS ||
          record["endpoint"].get(came_through) != simdjson::SUCCESS) {
        ++read.unreadable;
        continue;
      }
      if (time_ms < from_ms || time_ms >= to_ms || logged_version != version) continue;
      if (!endpoint.empty() && came_through != endpoint) continue;
      if (status >= 400 || record["request"]["inputs"].get(inputs) != simdjson::SUCCESS) {
        ++read.unreadable;
        continue;
      }
      // The request's rows: each input's values, flattened; the request has as many rows as its
      // longest input.
      std::size_t request_rows = 0;
      std::vector<std::pair<std::size_t, std::vector<simdjson::dom::element>>> columns_of_request;
      std::size_t input_count = 0;
      for (auto input : inputs) {
        (void)input;
        ++input_count;
      }
      for (auto input : inputs) {
        std::string_view name;
        simdjson::dom::element data;
        if (input["name"].get(name) != simdjson::SUCCESS || input["data"].get(data) != simdjson::SUCCESS) continue;
        values.clear();
        flatten(data, values);
        // The request id column is the server's to fill, never a client's input.
        if (name == kRequestIdColumn) continue;
        auto found = column_of.find(std::string(name));
        if (found != column_of.end()) {
          request_rows = std::max(request_rows, values.size());
          columns_of_request.emplace_back(found->second, values);
          continue;
        }
        // One [N, inputs] tensor under another name: its columns are the inputs, in order.
        std::size_t width = model_inputs;
        if (input_count != 1 || width == 0 || values.size() % width != 0) continue;
        std::size_t matrix_rows = values.size() / width;
        request_rows = std::max(request_rows, matrix_rows);
        for (std::size_t column = 0; column < width; ++column) {
          std::vector<simdjson::dom::element> cells;
          cells.reserve(matrix_rows);
          for (std::size_t row = 0; row < matrix_rows; ++row) cells.push_back(values[row * width + column]);
          columns_of_request.emplace_back(column, std::move(cells));
        }
      }
      std::size_t first = rows;
      rows += request_rows;
      std::string_view request_id;
      if (id_input == kRequestIdColumn && record["request"]["id"].get(request_id) == simdjson::SUCCESS) {
        data::Cells& cells = columns[column_of.at(id_input)].second;
        for (std::size_t row = 0; row < request_rows; ++row) {
          cells.texts.emplace_back(first + row, request_rows == 1
                                                    ? std::string(request_id)
                                                    : std::string(request_id) + "/" + std::to_string(row));
        }
      }
      for (const auto& [index, values_of_column] : columns_of_request) {
        data::Cells& cells = columns[index].second;
        for (std::size_t row = 0; row < values_of_column.size(); ++row) {
          double number = 0;
          std::string_view text;
          bool flag = false;
          if (values_of_column[row].get(number) == simdjson::SUCCESS) {
            cells.numbers.emplace_back(first + row, static_cast<float>(number));
          } else if (values_of_column[row].get(flag) == simdjson::SUCCESS) {
            cells.numbers.emplace_back(first + row, flag ? 1.0f : 0.0f);
          } else if (values_of_column[row].get(text) == simdjson::SUCCESS) {
            cells.texts.emplace_back(first + row, std::string(text));
          }
        }
      }
      // The answer's first score per row: the first FP32 output, its first column.
      std::vector<float> scores(request_rows, std::numeric_limits<float>::quiet_NaN());
      simdjson::dom::array outputs;
      if (record["response"]["outputs"].get(outputs) == simdjson::SUCCESS) {
        for (auto output : outputs) {
          std::string_view datatype;
          simdjson::dom::element data;
          if (output["datatype"].get(datatype) != simdjson::SUCCESS || datatype != "FP32" ||
              output["data"].get(data) != simdjson::SUCCESS) {
            continue;
          }
          values.clear();
          flatten(data, values);
          std::size_t per_row = request_rows > 0 ? std::max<std::size_t>(values.size() / request_rows, 1) : 1;
          for (std::size_t row = 0; row < request_rows && row * per_row < values.size(); ++row) {
            double score = 0;
            if (values[row * per_row].get(score) == simdjson::SUCCESS) scores[row] = static_cast<float>(score);
          }
          break;
        }
      }
      read.scores.insert(read.scores.end(), scores.begin(), scores.end());
      read.time_ms.insert(read.time_ms.end(), request_rows, time_ms);
      ++read.requests;
    }
  }
  for (auto& [name, cells] : columns) {
    SLIPWAY_RETURN_IF_ERROR(read.inputs.add_column(data::column_of_cells(std::move(name), rows, std::move(cells))));
  }
  return read;
}

}  // namespace slipway::monitor
