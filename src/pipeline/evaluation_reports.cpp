// The JSON of evaluations and comparisons (pipeline.h): what `slipway eval --json` and `slipway
// compare --json` print and the management API answers, written once.
#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

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

}  // namespace

void write_evaluation_json(JsonWriter& json, const eval::Evaluation& evaluation) {
  json.begin_object();
  json.key("rows").value(static_cast<std::uint64_t>(evaluation.rows));
  json.key("rows_missing_target").value(static_cast<std::uint64_t>(evaluation.rows_missing_target));
  json.key("overall");
  write_metrics_json(json, evaluation.overall);
  if (!evaluation.slice_column.empty()) {
    json.key("slice_column").value(evaluation.slice_column);
    json.key("slices").begin_array();
    for (const auto& slice : evaluation.slices) {
      json.begin_object().key("value").value(slice.value).key("rows").value(static_cast<std::uint64_t>(slice.rows));
      json.key("metrics");
      write_metrics_json(json, slice.metrics);
      json.end_object();
    }
    json.end_array();
  }
  json.end_object();
}

void write_evaluation_outcome_json(JsonWriter& json, const EvaluationOutcome& outcome) {
  json.begin_object().key("model").value(outcome.model).key("bundle_sha256").value(outcome.bundle_sha256);
  json.key("cached").value(outcome.cached);
  json.key("metrics");
  write_evaluation_json(json, outcome.evaluation);
  json.end_object();
}

Result<ModelComparison> compare_on_file(LoadedReference a, LoadedReference b, const std::string& data_path,
                                        const eval::ComparisonOptions& options) {
  SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(data_path));
  ModelComparison compared{std::move(a), std::move(b), data_path, {}};
  SLIPWAY_ASSIGN_OR_RETURN(compared.comparison, eval::compare(*compared.a.bundle, *compared.b.bundle, table, options));
  return compared;
}

void write_comparison_json(JsonWriter& json, const ModelComparison& compared, std::string_view data_name) {
  const auto& c = compared.comparison;
  json.begin_object();
  json.key("a").begin_object().key("model").value(compared.a.description);
  json.key("bundle_sha256").value(compared.a.sha256).end_object();
  json.key("b").begin_object().key("model").value(compared.b.description);
  json.key("bundle_sha256").value(compared.b.sha256).end_object();
  json.key("data").value(data_name).key("tolerance").value(c.tolerance);
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

}  // namespace slipway::pipeline
