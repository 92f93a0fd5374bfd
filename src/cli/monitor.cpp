// slipway monitor: skew and drift of a model's traffic (its request log) or of a file, against
// the training distribution its bundle carries, another file, or the window before.
#include <cmath>
#include <optional>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/monitor.h"

namespace slipway::cli {
namespace {

struct MonitorResult : CommandResult {
  pipeline::MonitorReport report;
  std::optional<pipeline::AlertOutcome> alerts;  // with --alert or --webhook

  void write_json(JsonWriter& json) const override {
    pipeline::write_monitor_report_json(json, report);
    json.key("alert_changes");
    pipeline::write_alert_changes_json(json, alerts ? alerts->changes : std::vector<registry::AlertState>{});
    json.key("webhook").value(alerts ? alerts->webhook_status : "");
    json.end_object();
  }
  void write_text(std::ostream& out) const override {
    const monitor::DriftReport& drift = report.drift;
    out << "model     " << report.model << "\ncurrent   " << report.current << "\nreference " << report.reference
        << "\n\n";
    std::vector<std::vector<std::string>> rows;
    auto row_of = [&](const monitor::InputDrift& input) {
      return std::vector<std::string>{
          input.name,
          std::string(data::column_type_name(input.type)),
          fmt::format("{:.0f}", input.current_rows),
          fmt::format("{:.3f} ({})", input.distance, input.type == data::ColumnType::kNumeric ? "JS" : "L-inf"),
          fmt::format("{:.3f} {}", input.psi, input.psi_band()),
          fmt::format("{:.3g} ({})", input.p_value, input.type == data::ColumnType::kNumeric ? "KS" : "chi2"),
          input.drifted ? "DRIFT" : "-"};
    };
    for (const auto& input : drift.inputs) rows.push_back(row_of(input));
    rows.push_back(row_of(drift.prediction));
    print_table(out, {"input", "type", "rows", "distance", "psi", "p-value", "drift"}, rows);
    out << fmt::format("\n{} of {} inputs drifted ({:.0f}%); the prediction {}\n", drift.drifted_inputs,
                       drift.inputs.size(), 100 * drift.drifted_share,
                       drift.prediction.drifted ? "drifted" : "did not drift");
    out << fmt::format("drift: with at most 1000 current rows a test decides (p < {}), with more the distance (> {})\n",
                       report.thresholds.p_value, report.thresholds.distance);
    bool attributions = !drift.inputs.empty() && !std::isnan(drift.inputs.front().attribution_current);
    if (attributions) {
      out << fmt::format("attribution drift (share of mean |TreeSHAP| moved by more than {}): {} of {} inputs",
                         report.thresholds.attribution, drift.attribution_drifted_inputs, drift.inputs.size());
      for (const auto& input : drift.inputs) {
        if (input.attribution_drifted) {
          out << fmt::format("; {} {:.3f} -> {:.3f}", input.name, input.attribution_training,
                             input.attribution_current);
        }
      }
      out << "\n";
    }
    if (const auto& performance = report.performance) {
      out << fmt::format("\nperformance on {} labelled rows ({} without a label):", performance->rows,
                         performance->unlabelled);
      for (const auto& [name, value] : performance->metrics.values) {
        auto test = report.training_metrics.find("test_" + name);
        out << " " << name << " " << format_metric(value)
            << (test == report.training_metrics.end() ? "" : " (test " + format_metric(test->second) + ")") << ";";
      }
      out << "\n";
      if (!performance->slices.empty()) {
        std::vector<std::string> headers = {report.slice_column, "rows"};
        for (const auto& [name, value] : performance->metrics.values) headers.push_back(name);
        std::vector<std::vector<std::string>> slice_rows;
        for (const auto& slice : performance->slices) {
          // Values come from clients: a long one is cut, so the table stays a table.
          std::string value = slice.value.size() > 40 ? slice.value.substr(0, 40) + "..." : slice.value;
          std::vector<std::string> row = {value, std::to_string(slice.rows)};
          for (const auto& [name, metric] : slice.metrics.values) row.push_back(format_metric(metric));
          slice_rows.push_back(std::move(row));
        }
        out << "\n";
        print_table(out, headers, slice_rows);
      }
    }
    if (!alerts) return;
    for (const auto& change : alerts->changes) {
      out << "alert     " << change.subject << " " << (change.firing ? "FIRING" : "resolved")
          << fmt::format(" ({:.4g})", change.value) << "\n";
    }
    if (!alerts->webhook_status.empty()) out << "webhook   " << alerts->webhook_status << "\n";
  }
};

Result<std::vector<pipeline::MetricLimit>> metric_limits(const std::vector<std::string>& texts) {
  std::vector<pipeline::MetricLimit> limits;
  for (const auto& text : texts) {
    SLIPWAY_ASSIGN_OR_RETURN(auto limit, pipeline::parse_metric_limit(text));
    limits.push_back(std::move(limit));
  }
  return limits;
}

Result<MonitorResult> run(const GlobalOptions& global, const MonitorFlags& flags) {
  if (!flags.slice.empty() && flags.id_column.empty()) {
    return invalid_argument("--slice splits the performance on labelled rows: give --id-col too");
  }
  pipeline::MonitorRequest request;
  request.reference = flags.reference;
  request.data = flags.data;
  // A window may be days long (the log is kept a week by default).
  SLIPWAY_ASSIGN_OR_RETURN(auto window, parse_duration("--window", flags.window, 366));
  if (window.count() <= 0) return invalid_argument("--window must be longer than 0");
  request.window_ms = window.count();
  request.window = flags.window;
  request.baseline = flags.baseline;
  request.request_log_dir = flags.request_log_dir;
  request.thresholds.distance = flags.distance;
  request.thresholds.p_value = flags.p_value;
  request.id_column = flags.id_column;
  request.slice = flags.slice;
  request.history = !flags.html.empty();
  pipeline::AlertRules rules;
  SLIPWAY_ASSIGN_OR_RETURN(rules.min_metrics, metric_limits(flags.min_metrics));
  SLIPWAY_ASSIGN_OR_RETURN(rules.max_metrics, metric_limits(flags.max_metrics));
  SLIPWAY_ASSIGN_OR_RETURN(rules.max_metric_drops, metric_limits(flags.max_metric_drops));
  rules.webhook = flags.webhook;
  bool alerting = flags.alert || !flags.webhook.empty();
  SLIPWAY_ASSIGN_OR_RETURN(auto store,
                           open_workspace(global, alerting ? WorkspaceAccess::kWrite : WorkspaceAccess::kReadOnly));
  MonitorResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.report, pipeline::monitoring_report(*store, request));
  if (!flags.html.empty()) {
    const auto& report = result.report;
    SLIPWAY_RETURN_IF_ERROR(write_file_atomic(
        flags.html, monitor::html_report(report.bundle->manifest().profile, report.drift, report.model, report.current,
                                         report.reference, report.history, report.thresholds)));
  }
  if (alerting) {
    SLIPWAY_ASSIGN_OR_RETURN(result.alerts, pipeline::record_alerts(*store, result.report, rules, pipeline::Caller{}));
  }
  return result;
}

struct LabelsResult : CommandResult {
  std::string model;
  std::size_t read = 0, added = 0, skipped = 0;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model).key("labels").value(static_cast<std::uint64_t>(read));
    json.key("new").value(static_cast<std::uint64_t>(added)).key("skipped").value(static_cast<std::uint64_t>(skipped));
    json.end_object();
  }
  void write_text(std::ostream& out) const override {
    out << fmt::format("{} labels for {} ({} new, {} replaced); {} rows skipped (no id or no label)\n", read, model,
                       added, read - added, skipped);
  }
};

Result<LabelsResult> ingest(const GlobalOptions& global, const LabelFlags& flags) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  SLIPWAY_ASSIGN_OR_RETURN(auto outcome, pipeline::ingest_labels_file(*store, flags.model, flags.path, flags.id_column,
                                                                      flags.label_column, pipeline::Caller{}));
  LabelsResult result;
  result.model = flags.model;
  result.read = outcome.recorded;
  result.added = outcome.added;
  result.skipped = outcome.skipped;
  return result;
}

}  // namespace

int run_labels_ingest(const GlobalOptions& global, const LabelFlags& flags) {
  return render(global, ingest(global, flags));
}

int run_monitor(const GlobalOptions& global, const MonitorFlags& flags) { return render(global, run(global, flags)); }

}  // namespace slipway::cli
