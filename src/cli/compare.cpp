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

void write_differences_json(JsonWriter& json, const eval::OutputDifferences& differences) {
  json.begin_object()
      .key("rows")
      .value(static_cast<std::uint64_t>(differences.rows))
      .key("rows_beyond_tolerance")
      .value(static_cast<std::uint64_t>(differences.rows_beyond_tolerance))
      .key("label_flips")
      .value(static_cast<std::uint64_t>(differences.label_flips))
      .key("max_abs_difference")
      .value(differences.max_abs_difference)
      .key("mean_abs_difference")
      .value(differences.mean_abs_difference)
      .end_object();
}

void write_metrics_json(JsonWriter& json, const eval::Metrics& metrics) {
  json.begin_object();
  for (const auto& [name, value] : metrics.values) json.key(name).value(value);
  json.end_object();
}

struct CompareResult : CommandResult {
  std::string model_a, model_b, sha256_a, sha256_b, data_path;
  eval::Comparison comparison;

  void write_json(JsonWriter& json) const override {
    const auto& c = comparison;
    json.begin_object();
    json.key("a").begin_object().key("model").value(model_a).key("bundle_sha256").value(sha256_a).end_object();
    json.key("b").begin_object().key("model").value(model_b).key("bundle_sha256").value(sha256_b).end_object();
    json.key("data").value(data_path).key("tolerance").value(c.tolerance);
    json.key("within_tolerance").value(c.within_tolerance());
    json.key("differences");
    write_differences_json(json, c.overall);
    if (c.labelled) {
      json.key("quality").begin_object();
      json.key("metric").value(c.quality_metric).key("drop").value(c.quality_drop);
      json.key("rows_missing_target").value(static_cast<std::uint64_t>(c.rows_missing_target));
      json.key("a");
      write_metrics_json(json, c.metrics_a);
      json.key("b");
      write_metrics_json(json, c.metrics_b);
      json.end_object();
    }
    if (!c.slice_column.empty()) {
      json.key("slice_column").value(c.slice_column).key("slices").begin_array();
      for (const auto& slice : c.slices) {
        json.begin_object().key("value").value(slice.value).key("differences");
        write_differences_json(json, slice.differences);
        if (c.labelled) {
          json.key("labelled_rows").value(static_cast<std::uint64_t>(slice.labelled_rows));
          json.key("quality_a").value(slice.quality_a).key("quality_b").value(slice.quality_b);
          json.key("quality_drop").value(slice.quality_drop);
        }
        json.end_object();
      }
      json.end_array();
      if (!c.worst_slice.empty())
        json.key("worst_slice").value(c.worst_slice).key("worst_slice_drop").value(c.worst_slice_drop);
    }
    json.key("worst_rows").begin_array();
    for (const auto& row : c.worst_rows) {
      json.begin_object().key("row").value(static_cast<std::uint64_t>(row.row));
      json.key("line").value(static_cast<std::uint64_t>(row.row + 2));
      json.key("abs_difference").value(row.abs_difference);
      json.key("outputs_a").begin_array();
      for (float output : row.outputs_a) json.value(output);
      json.end_array().key("outputs_b").begin_array();
      for (float output : row.outputs_b) json.value(output);
      json.end_array();
      if (!row.label_a.empty() || !row.label_b.empty())
        json.key("label_a").value(row.label_a).key("label_b").value(row.label_b);
      if (!c.slice_column.empty()) json.key("slice").value(row.slice);
      json.end_object();
    }
    json.end_array().end_object();
  }

  void write_text(std::ostream& out) const override {
    const auto& c = comparison;
    out << "A " << model_a << "\nB " << model_b << "\non " << data_path << ", " << c.overall.rows
        << " rows; an output differs beyond the tolerance when |A - B| > " << format_difference(c.tolerance) << "\n\n";
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
  SLIPWAY_ASSIGN_OR_RETURN(auto table, pipeline::read_table(options.data_path));
  CompareResult result;
  result.model_a = a.description;
  result.model_b = b.description;
  result.sha256_a = a.sha256;
  result.sha256_b = b.sha256;
  result.data_path = options.data_path;
  eval::ComparisonOptions comparison;
  comparison.tolerance = options.tolerance;
  comparison.slice_column = options.slice;
  comparison.worst_rows = options.worst_rows;
  SLIPWAY_ASSIGN_OR_RETURN(result.comparison, eval::compare(*a.bundle, *b.bundle, table, comparison));
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
  return result->comparison.within_tolerance() ? 0 : 1;
}

}  // namespace slipway::cli
