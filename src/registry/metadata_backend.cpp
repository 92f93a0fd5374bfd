#include "registry/metadata_backend.h"

#include <cmath>
#include <limits>

namespace slipway::registry {

SqlValue SqlValue::real_or_null(double number) { return std::isfinite(number) ? SqlValue(number) : SqlValue(); }

bool SqlRow::is_null(std::size_t column) const { return std::holds_alternative<std::monostate>(cells_.at(column)); }

std::string SqlRow::text(std::size_t column) const {
  const Cell& cell = cells_.at(column);
  if (const auto* text = std::get_if<std::string>(&cell)) return *text;
  if (const auto* integer = std::get_if<std::int64_t>(&cell)) return std::to_string(*integer);
  if (const auto* real = std::get_if<double>(&cell)) return std::to_string(*real);
  return "";
}

std::int64_t SqlRow::integer(std::size_t column) const {
  const Cell& cell = cells_.at(column);
  if (const auto* integer = std::get_if<std::int64_t>(&cell)) return *integer;
  if (const auto* real = std::get_if<double>(&cell)) return static_cast<std::int64_t>(*real);
  if (const auto* text = std::get_if<std::string>(&cell)) return std::strtoll(text->c_str(), nullptr, 10);
  return 0;
}

double SqlRow::real(std::size_t column) const {
  const Cell& cell = cells_.at(column);
  if (const auto* real = std::get_if<double>(&cell)) return *real;
  if (const auto* integer = std::get_if<std::int64_t>(&cell)) return static_cast<double>(*integer);
  if (const auto* text = std::get_if<std::string>(&cell)) return std::strtod(text->c_str(), nullptr);
  return std::numeric_limits<double>::quiet_NaN();
}

Result<std::optional<SqlRow>> SqlTransaction::query_row(std::string_view sql, SqlParams params) {
  SLIPWAY_ASSIGN_OR_RETURN(auto rows, query(sql, params));
  if (rows.empty()) return std::optional<SqlRow>();
  return std::optional<SqlRow>(std::move(rows.front()));
}

}  // namespace slipway::registry
