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

void print_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows) {
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
    std::cout << line << "\n";
  };
  print_row(headers);
  for (const auto& row : rows) print_row(row);
}

ProgressBar::ProgressBar(std::string label, std::int64_t total, bool enabled)
    : label_(std::move(label)), total_(std::max<std::int64_t>(total, 1)), enabled_(enabled && ::isatty(2) != 0),
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

std::string format_metric(double value) {
  if (std::isnan(value)) return "-";
  if (std::abs(value) >= 1000) return fmt::format("{:.1f}", value);
  return fmt::format("{:.4f}", value);
}

std::string format_time_ms(std::int64_t unix_ms) {
  std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S", &utc);
  return buffer;
}

}  // namespace slipway::cli
