#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {

void print_json(const JsonWriter& json) { std::cout << json.str() << "\n"; }

int fail(const Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return 1;
}

int render(const GlobalOptions& global, const CommandResult& result) {
  if (global.json) {
    JsonWriter json;
    result.write_json(json);
    print_json(json);
  } else {
    result.write_text(std::cout);
  }
  return 0;
}

void print_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows) {
  print_table(std::cout, headers, rows);
}

void print_table(std::ostream& out, const std::vector<std::string>& headers,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths(headers.size());
  for (std::size_t column = 0; column < headers.size(); ++column) widths[column] = headers[column].size();
  for (const auto& row : rows) {
    for (std::size_t column = 0; column < row.size() && column < widths.size(); ++column) {
      widths[column] = std::max(widths[column], row[column].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t column = 0; column < cells.size(); ++column) {
      if (column > 0) line += "  ";
      line += cells[column];
      if (column + 1 < cells.size()) line.append(widths[column] - cells[column].size(), ' ');
    }
    out << line << "\n";
  };
  print_row(headers);
  for (const auto& row : rows) print_row(row);
}

ProgressBar::ProgressBar(std::string label, std::int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(std::max<std::int64_t>(total, 1)),
      enabled_(enabled && ::isatty(2) != 0),
      started_ns_(monotonic_ns()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(std::int64_t done, const std::string& detail) {
  if (!enabled_) return;
  std::int64_t now = monotonic_ns();
  if (drawn_ && done < total_ && now - last_draw_ns_ < 100'000'000) return;
  last_draw_ns_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  double share = std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
  int filled = static_cast<int>(share * kWidth);
  double elapsed = static_cast<double>(now - started_ns_) * 1e-9;
  std::string eta = "-";
  if (done > 0 && done < total_) {
    double remaining = elapsed / static_cast<double>(done) * static_cast<double>(total_ - done);
    eta = remaining >= 60 ? fmt::format("{}m{:02}s", static_cast<int>(remaining) / 60, static_cast<int>(remaining) % 60)
                          : fmt::format("{:.0f}s", std::ceil(remaining));
  } else if (done >= total_) {
    eta = "0s";
  }
  std::string bar = std::string(static_cast<std::size_t>(filled), '=') +
                    (filled < kWidth ? ">" + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ') : "");
  // \r and clear-to-end-of-line redraw in place.
  std::cerr << fmt::format("\r{} [{}] {}/{} {} ETA {}\x1b[K", label_, bar, done, total_, detail, eta) << std::flush;
}

void ProgressBar::finish() {
  if (!enabled_ || !drawn_) return;
  std::cerr << "\n" << std::flush;
  drawn_ = false;
  enabled_ = false;
}

std::string format_bytes(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= 1024) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  return fmt::format("{} B", bytes);
}

std::string without_negative_zero(std::string formatted) {
  if (formatted.starts_with('-') && formatted.find_first_not_of("0.", 1) == std::string::npos) formatted.erase(0, 1);
  return formatted;
}

std::string format_metric(double value) {
  if (std::isnan(value)) return "-";
  if (std::abs(value) >= 1000) return without_negative_zero(fmt::format("{:.1f}", value));
  return without_negative_zero(fmt::format("{:.4f}", value));
}

std::string format_time_ms(std::int64_t unix_ms) {
  std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S", &utc);
  return buffer;
}

void write_registered_json(JsonWriter& json, const std::optional<registry::ModelVersion>& registered) {
  if (!registered) return;
  json.key("registered").begin_object().key("model").value(registered->model);
  json.key("version").value(registered->version).end_object();
}

void print_evaluation(std::ostream& out, const eval::Evaluation& evaluation) {
  std::vector<std::string> headers = {"slice", "rows"};
  for (const auto& entry : evaluation.overall.values) headers.push_back(entry.first);
  auto row_of = [](const std::string& name, std::size_t rows, const eval::Metrics& metrics) {
    std::vector<std::string> row = {name, std::to_string(rows)};
    for (const auto& entry : metrics.values) row.push_back(format_metric(entry.second));
    return row;
  };
  std::vector<std::vector<std::string>> rows = {row_of("(all)", evaluation.rows, evaluation.overall)};
  for (const auto& slice : evaluation.slices) {
    rows.push_back(row_of(evaluation.slice_column + "=" + slice.value, slice.rows, slice.metrics));
  }
  print_table(out, headers, rows);
}

}  // namespace slipway::cli
