#include <cmath>
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {

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
