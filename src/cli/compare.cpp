// slipway compare: a baseline and a candidate model on a golden set, row by row and per slice.
#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

std::string format_difference(double value) {
  if (std::isinf(value)) return "inf (NaN output)";
  if (value == 0.0) return "0";
  return fmt::format("{:.3g}", value);
}

std::string format_outputs(const std::vector<float>& outputs) {
  std::string text;
  for (float output : outputs) text += (text.empty() ? "" : " ") + fmt::format("{:.6g}", output);
  return text;
}

std::string percent_of(std::size_t part, std::size_t whole) {
  return fmt::format("{} ({:.2f}%)", part, whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / whole);
}

struct CompareResult : CommandResult {
  pipeline::ModelComparison compared;
  std::string data_path;

  void write_json(JsonWriter& json) const override { pipeline::write_comparison_json(json, compared, data_path); }
  void write_text(std::ostream& out) const override {
    const auto& c = compared.comparison;
    out << "A " << compared.a.description << "\nB " << compared.b.description << "\non " << data_path << ", "
        << c.overall.rows << " rows; an output differs beyond the tolerance when |A - B| > "
        << format_difference(c.tolerance) << "\n\n";
    std::vector<std::string> headers = {"rows", "differ", "label flips", "max |A-B|", "mean |A-B|"};
    auto difference_cells = [](const eval::OutputDifferences& d) {
      return std::vector<std::string>{percent_of(d.rows_beyond_tolerance, d.rows), std::to_string(d.label_flips),
                                      format_difference(d.max_abs_difference),
                                      format_difference(d.mean_abs_difference)};
    };
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> all = {"(all)", std::to_string(c.overall.rows)};
    auto all_cells = difference_cells(c.overall);
    all.insert(all.end(), all_cells.begin(), all_cells.end());
    if (c.labelled) {
      headers.insert(headers.end(), {c.quality_metric + " A", c.quality_metric + " B", "drop"});
      double metric_a = c.metrics_a.get(c.quality_metric), metric_b = c.metrics_b.get(c.quality_metric);
      all.insert(all.end(), {format_metric(metric_a), format_metric(metric_b), format_metric(c.quality_drop)});
    }
    headers.insert(headers.begin(), "");
    rows.push_back(all);
    for (const auto& slice : c.slices) {
      std::vector<std::string> row = {c.slice_column + "=" + slice.value, std::to_string(slice.differences.rows)};
      auto cells = difference_cells(slice.differences);
      row.insert(row.end(), cells.begin(), cells.end());
      if (c.labelled) {
        row.insert(row.end(),
                   {format_metric(slice.quality_a), format_metric(slice.quality_b), format_metric(slice.quality_drop)});
      }
      rows.push_back(row);
    }
    print_table(out, headers, rows);
    if (c.labelled) {
      out << "\nquality: " << c.quality_metric << " " << format_metric(c.metrics_a.get(c.quality_metric)) << " (A) vs "
          << format_metric(c.metrics_b.get(c.quality_metric)) << " (B), drop " << format_metric(c.quality_drop)
          << " (positive: B is worse)";
      if (c.rows_missing_target > 0) out << "; " << c.rows_missing_target << " rows without a target not counted";
      out << "\n";
      if (!c.worst_slice.empty()) {
        out << "worst slice: " << c.slice_column << "=" << c.worst_slice << ", drop "
            << format_metric(c.worst_slice_drop) << "\n";
      }
    }
    if (!c.worst_rows.empty()) {
      out << "\nlargest differences (line = the file's line number):\n";
      std::vector<std::string> row_headers = {"line", "|A-B|", "A", "B"};
      bool labels = !c.worst_rows.front().label_a.empty() || !c.worst_rows.front().label_b.empty();
      if (labels) row_headers.insert(row_headers.end(), {"label A", "label B"});
      if (!c.slice_column.empty()) row_headers.push_back(c.slice_column);
      std::vector<std::vector<std::string>> listed;
      for (const auto& row : c.worst_rows) {
        std::vector<std::string> cells = {std::to_string(row.row + 2), format_difference(row.abs_difference),
                                          format_outputs(row.outputs_a), format_outputs(row.outputs_b)};
        if (labels) cells.insert(cells.end(), {row.label_a, row.label_b});
        if (!c.slice_column.empty()) cells.push_back(row.slice);
        listed.push_back(std::move(cells));
      }
      print_table(out, row_headers, listed);
    }
    out << "\n"
        << (c.within_tolerance()
                ? "ok: every output is within the tolerance"
                : std::to_string(c.overall.rows_beyond_tolerance) + " row(s) differ beyond the tolerance")
        << "\n";
  }
};

Result<CompareResult> compare(const GlobalOptions& global, const CompareOptions& options) {
  if (options.reference_a.empty() || options.reference_b.empty()) {
    return invalid_argument("compare needs two models: slipway compare REF_A REF_B --data FILE");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto a, load_reference(global, options.reference_a));
  SLIPWAY_ASSIGN_OR_RETURN(auto b, load_reference(global, options.reference_b));
  eval::ComparisonOptions comparison;
  comparison.tolerance = options.tolerance;
  comparison.slice_column = options.slice;
  comparison.worst_rows = options.worst_rows;
  CompareResult result;
  result.data_path = options.data_path;
  SLIPWAY_ASSIGN_OR_RETURN(result.compared,
                           pipeline::compare_on_file(std::move(a), std::move(b), options.data_path, comparison));
  return result;
}

}  // namespace

int run_compare(const GlobalOptions& global, const CompareOptions& options) {
  // Like diff: 0 when the outputs agree within the tolerance, 1 when they do not, 2 when the
  // comparison could not be made.
  auto result = compare(global, options);
  if (!result.ok()) {
    fail(result.status());
    return 2;
  }
  render(global, *result);
  return result->compared.comparison.within_tolerance() ? 0 : 1;
}

}  // namespace slipway::cli
