// slipway monitor: skew and drift of a model's traffic (its request log) or of a file, against
// the training distribution its bundle carries, another file, or the window before.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/batch.h"
#include "slipway/http.h"
#include "slipway/monitor.h"

namespace slipway::cli {
namespace {

// [{"subject", "state": "firing"|"resolved", "value"}]: what --json prints and the webhook hears.
void write_alert_changes(JsonWriter& json, const std::vector<registry::AlertState>& changes) {
  json.begin_array();
  for (const auto& change : changes) {
    json.begin_object().key("subject").value(change.subject);
    json.key("state").value(change.firing ? "firing" : "resolved").key("value").value(change.value).end_object();
  }
  json.end_array();
}

struct MonitorResult : CommandResult {
  std::string model;
  std::string current;
  std::string reference;
  monitor::DriftReport report;
  monitor::DriftThresholds thresholds;
  std::optional<monitor::Performance> performance;  // with --id-col
  std::map<std::string, double> training_metrics;   // the bundle's test_* metrics
  std::string slice_column;                         // --slice
  std::vector<registry::AlertState> alert_changes;  // with --alert: those that fired or resolved now
  std::string webhook_status;                       // with --webhook: what it answered

  void write_json(JsonWriter& json) const override {
    auto write_drift = [&json](const monitor::InputDrift& drift) {
      json.begin_object().key("name").value(drift.name).key("type").value(data::column_type_name(drift.type));
      json.key("reference_rows").value(drift.reference_rows).key("current_rows").value(drift.current_rows);
      json.key(drift.distance_name()).value(drift.distance).key("psi").value(drift.psi);
      json.key("psi_band").value(drift.psi_band());
      json.key(drift.type == data::ColumnType::kNumeric ? "ks_p_value" : "chi_squared_p_value").value(drift.p_value);
      json.key("decided_by").value(drift.decided_by_test ? "test" : "distance").key("drifted").value(drift.drifted);
      if (!std::isnan(drift.attribution_current)) {
        json.key("attribution_training").value(drift.attribution_training);
        json.key("attribution_current").value(drift.attribution_current);
        json.key("attribution_drifted").value(drift.attribution_drifted);
      }
      json.end_object();
    };
    json.begin_object().key("model").value(model).key("current").value(current).key("reference").value(reference);
    json.key("distance_threshold").value(thresholds.distance).key("p_value_threshold").value(thresholds.p_value);
    json.key("inputs").begin_array();
    for (const auto& drift : report.inputs) write_drift(drift);
    json.end_array().key("prediction");
    write_drift(report.prediction);
    json.key("drifted_inputs").value(static_cast<std::uint64_t>(report.drifted_inputs));
    json.key("drifted_share").value(report.drifted_share);
    json.key("attribution_drifted_inputs").value(static_cast<std::uint64_t>(report.attribution_drifted_inputs));
    if (performance) {
      json.key("performance").begin_object().key("rows").value(static_cast<std::uint64_t>(performance->rows));
      json.key("unlabelled").value(static_cast<std::uint64_t>(performance->unlabelled)).key("metrics").begin_object();
      for (const auto& [name, value] : performance->metrics.values) json.key(name).value(value);
      json.end_object().key("slices").begin_array();
      for (const auto& slice : performance->slices) {
        json.begin_object().key("value").value(slice.value);
        json.key("rows").value(static_cast<std::uint64_t>(slice.rows)).key("metrics").begin_object();
        for (const auto& [name, value] : slice.metrics.values) json.key(name).value(value);
        json.end_object().end_object();
      }
      json.end_array().key("training_test_metrics").begin_object();
      for (const auto& [name, value] : training_metrics) json.key(name).value(value);
      json.end_object().end_object();
    }
    json.key("alert_changes");
    write_alert_changes(json, alert_changes);
    json.key("webhook").value(webhook_status);
    json.end_object();
  }
  void write_text(std::ostream& out) const override {
    out << "model     " << model << "\ncurrent   " << current << "\nreference " << reference << "\n\n";
    std::vector<std::vector<std::string>> rows;
    auto row_of = [&](const monitor::InputDrift& drift) {
      return std::vector<std::string>{
          drift.name,
          std::string(data::column_type_name(drift.type)),
          fmt::format("{:.0f}", drift.current_rows),
          fmt::format("{:.3f} ({})", drift.distance, drift.type == data::ColumnType::kNumeric ? "JS" : "L-inf"),
          fmt::format("{:.3f} {}", drift.psi, drift.psi_band()),
          fmt::format("{:.3g} ({})", drift.p_value, drift.type == data::ColumnType::kNumeric ? "KS" : "chi2"),
          drift.drifted ? "DRIFT" : "-"};
    };
    for (const auto& drift : report.inputs) rows.push_back(row_of(drift));
    rows.push_back(row_of(report.prediction));
    print_table(out, {"input", "type", "rows", "distance", "psi", "p-value", "drift"}, rows);
    out << fmt::format("\n{} of {} inputs drifted ({:.0f}%); the prediction {}\n", report.drifted_inputs,
                       report.inputs.size(), 100 * report.drifted_share,
                       report.prediction.drifted ? "drifted" : "did not drift");
    out << fmt::format("drift: with at most 1000 current rows a test decides (p < {}), with more the distance (> {})\n",
                       thresholds.p_value, thresholds.distance);
    bool attributions = !report.inputs.empty() && !std::isnan(report.inputs.front().attribution_current);
    if (attributions) {
      out << fmt::format("attribution drift (share of mean |TreeSHAP| moved by more than {}): {} of {} inputs",
                         thresholds.attribution, report.attribution_drifted_inputs, report.inputs.size());
      for (const auto& input : report.inputs) {
        if (input.attribution_drifted) {
          out << fmt::format("; {} {:.3f} -> {:.3f}", input.name, input.attribution_training,
                             input.attribution_current);
        }
      }
      out << "\n";
    }
    if (performance) {
      out << fmt::format("\nperformance on {} labelled rows ({} without a label):", performance->rows,
                         performance->unlabelled);
      for (const auto& [name, value] : performance->metrics.values) {
        auto test = training_metrics.find("test_" + name);
        out << " " << name << " " << format_metric(value)
            << (test == training_metrics.end() ? "" : " (test " + format_metric(test->second) + ")") << ";";
      }
      out << "\n";
      if (!performance->slices.empty()) {
        std::vector<std::string> headers = {slice_column, "rows"};
        for (const auto& [name, value] : performance->metrics.values) headers.push_back(name);
        std::vector<std::vector<std::string>> rows;
        for (const auto& slice : performance->slices) {
          // Values come from clients: a long one is cut, so the table stays a table.
          std::string value = slice.value.size() > 40 ? slice.value.substr(0, 40) + "..." : slice.value;
          std::vector<std::string> row = {value, std::to_string(slice.rows)};
          for (const auto& [name, value] : slice.metrics.values) row.push_back(format_metric(value));
          rows.push_back(std::move(row));
        }
        out << "\n";
        print_table(out, headers, rows);
      }
    }
    for (const auto& change : alert_changes) {
      out << "alert     " << change.subject << " " << (change.firing ? "FIRING" : "resolved")
          << fmt::format(" ({:.4g})", change.value) << "\n";
    }
    if (!webhook_status.empty()) out << "webhook   " << webhook_status << "\n";
  }
};

// "auc=0.7" into ("auc", 0.7).
Result<std::pair<std::string, double>> metric_limit(const std::string& text) {
  auto equals = text.find('=');
  char* end = nullptr;
  double limit = equals == std::string::npos ? 0 : std::strtod(text.c_str() + equals + 1, &end);
  if (equals == std::string::npos || equals == 0 || end != text.c_str() + text.size() || !std::isfinite(limit)) {
    return invalid_argument("a metric limit is NAME=NUMBER, such as auc=0.7, not '" + text + "'");
  }
  return std::make_pair(text.substr(0, equals), limit);
}

// The states of this run's alerts: each input and the prediction (drifted or not), and each
// metric limit given.
Result<std::vector<registry::AlertState>> alert_states(const MonitorResult& result, const MonitorFlags& flags,
                                                       const std::string& model) {
  std::vector<registry::AlertState> states;
  std::int64_t now = unix_time_ms();
  for (const auto& input : result.report.inputs) {
    states.push_back({model, "input:" + input.name, input.drifted, input.distance, now});
  }
  states.push_back({model, "prediction", result.report.prediction.drifted, result.report.prediction.distance, now});
  for (bool minimum : {true, false}) {
    for (const auto& text : minimum ? flags.min_metrics : flags.max_metrics) {
      SLIPWAY_ASSIGN_OR_RETURN(auto limit, metric_limit(text));
      if (!result.performance) return invalid_argument("metric limits need --id-col (and ingested labels)");
      double value = result.performance->metrics.get(limit.first);
      if (std::isnan(value) && result.performance->rows > 0) {
        return invalid_argument("no metric '" + limit.first + "' for this model's task");
      }
      bool firing = !std::isnan(value) && (minimum ? value < limit.second : value > limit.second);
      states.push_back({model, "metric:" + limit.first, firing, value, now});
    }
  }
  for (const auto& text : flags.max_metric_drops) {
    // How much worse than on the training run's held-out rows.
    SLIPWAY_ASSIGN_OR_RETURN(auto limit, metric_limit(text));
    if (!result.performance) return invalid_argument("metric drops need --id-col (and ingested labels)");
    auto test = result.training_metrics.find("test_" + limit.first);
    if (test == result.training_metrics.end()) {
      return invalid_argument("the bundle records no test " + limit.first + " to measure a drop from");
    }
    double drop = eval::quality_drop(limit.first, test->second, result.performance->metrics.get(limit.first));
    states.push_back({model, "metric_drop:" + limit.first, !std::isnan(drop) && drop > limit.second, drop, now});
  }
  return states;
}

// The rows of a file and the model's scores for them (the first score of each row).
Result<std::pair<data::Table, std::vector<float>>> scored_file(const model::Bundle& bundle, const std::string& path) {
  SLIPWAY_ASSIGN_OR_RETURN(auto read, data::read_rows(path));
  SLIPWAY_ASSIGN_OR_RETURN(auto predictions, bundle.predict(read.table));
  std::vector<float> scores(predictions.rows);
  for (std::size_t row = 0; row < predictions.rows; ++row) scores[row] = predictions.scores[row * predictions.columns];
  return std::make_pair(std::move(read.table), std::move(scores));
}

Result<MonitorResult> run(const GlobalOptions& global, const MonitorFlags& flags) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  // An endpoint is watched through its main version; a model through the version named.
  std::string reference = flags.reference;
  std::string endpoint;
  SLIPWAY_ASSIGN_OR_RETURN(auto found, store->endpoints().get(flags.reference));
  if (found && !pipeline::names_bundle_file(flags.reference)) {
    endpoint = flags.reference;
    reference = registry::main_route(found->routes).reference();
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, pipeline::resolve_reference(store.get(), reference));
  const model::DataProfile& profile = loaded.bundle->manifest().profile;
  if (profile.empty()) {
    return failed_precondition(loaded.description +
                               " carries no training profile (it was imported, or trained by an older slipway); "
                               "train it again to monitor it");
  }
  MonitorResult result;
  result.model = loaded.description + (endpoint.empty() ? "" : " (main version of endpoint " + endpoint + ")");
  result.thresholds.distance = flags.distance;
  result.thresholds.p_value = flags.p_value;
  SLIPWAY_RETURN_IF_ERROR(monitor::check_drift_thresholds(result.thresholds));
  result.slice_column = flags.slice;
  // A window may be days long (the log is kept a week by default).
  SLIPWAY_ASSIGN_OR_RETURN(auto window, parse_duration("--window", flags.window, 366));
  if (window.count() <= 0) return invalid_argument("--window must be longer than 0");
  std::string log_directory = flags.request_log_dir.empty() ? store->home() + "/request_log" : flags.request_log_dir;
  auto parsed_reference = registry::parse_model_reference(reference);
  std::string model_name = parsed_reference.ok() ? parsed_reference->first : "";
  std::string version = loaded.description.substr(loaded.description.find('@') + 1);
  // The ids of `table`'s rows in --id-col (empty without one).
  auto ids_of = [&](const data::Table& table) -> Result<std::vector<std::string>> {
    std::vector<std::string> ids;
    if (flags.id_column.empty()) return ids;
    const data::Column* column = table.find(flags.id_column);
    if (column == nullptr) return invalid_argument("the rows have no '" + flags.id_column + "' (--id-col)");
    for (std::size_t row = 0; row < column->size(); ++row) ids.push_back(column->text_at(row));
    return ids;
  };
  // Each row's value of --slice ("(missing)" where it has none).
  auto slice_values_of = [&](const data::Table& table, bool logged) -> Result<std::vector<std::string>> {
    std::vector<std::string> values;
    if (flags.slice.empty()) return values;
    const data::Column* column = table.find(flags.slice);
    if (column == nullptr) {
      return invalid_argument("the rows have no '" + flags.slice + "' (--slice)" +
                              (logged ? "; the request log slices by the model's inputs only" : ""));
    }
    for (std::size_t row = 0; row < column->size(); ++row) {
      values.push_back(column->is_missing(row) ? "(missing)" : column->text_at(row));
    }
    return values;
  };
  // The logged rows of [from, to) that this version answered.
  std::vector<std::string> ids;
  std::vector<std::string> slice_values;
  std::vector<float> scores;
  monitor::LoggedRequests window_rows;  // the current window's rows, for the drift over time
  auto logged = [&](std::int64_t from, std::int64_t to) -> Result<monitor::BinnedData> {
    std::vector<std::string> inputs;
    for (const auto& feature : loaded.bundle->preprocessor().features()) inputs.push_back(feature.name);
    SLIPWAY_ASSIGN_OR_RETURN(auto requests, monitor::read_request_log(log_directory, model_name, version, endpoint,
                                                                      inputs, from, to, flags.id_column));
    SLIPWAY_ASSIGN_OR_RETURN(ids, ids_of(requests.inputs));
    SLIPWAY_ASSIGN_OR_RETURN(slice_values, slice_values_of(requests.inputs, true));
    scores = requests.scores;
    auto binned = monitor::bin(profile, requests.inputs, requests.scores);
    window_rows = std::move(requests);
    return binned;
  };
  std::int64_t now = unix_time_ms();
  monitor::BinnedData current;
  data::Table current_table;  // --data's rows
  if (!flags.data.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto file, scored_file(*loaded.bundle, flags.data));
    current = monitor::bin(profile, file.first, file.second);
    SLIPWAY_ASSIGN_OR_RETURN(ids, ids_of(file.first));
    SLIPWAY_ASSIGN_OR_RETURN(slice_values, slice_values_of(file.first, false));
    scores = std::move(file.second);
    current_table = std::move(file.first);
    result.current = flags.data;
  } else {
    if (model_name.empty()) return invalid_argument("a bundle file has no request log: give --data FILE");
    SLIPWAY_ASSIGN_OR_RETURN(current, logged(now - window.count(), now));
    result.current = fmt::format("the request log of the last {}", flags.window);
  }
  if (!flags.slice.empty() && flags.id_column.empty()) {
    return invalid_argument("--slice splits the performance on labelled rows: give --id-col too");
  }
  if (!flags.id_column.empty()) {
    // Performance over the current rows whose labels have arrived.
    if (model_name.empty()) return invalid_argument("labels belong to a registered model: give NAME, not a file");
    SLIPWAY_ASSIGN_OR_RETURN(auto labels, store->models().labels(model_name));
    SLIPWAY_ASSIGN_OR_RETURN(result.performance,
                             monitor::performance(*loaded.bundle, ids, scores, labels, slice_values));
    result.training_metrics = loaded.bundle->manifest().metrics;
  }
  if (current.rows <= 0) return failed_precondition("no rows to compare in " + result.current);
  monitor::BinnedData baseline;
  if (flags.baseline == "training") {
    baseline = monitor::training_bins(profile);
    result.reference = fmt::format("the training data ({:.0f} rows)", baseline.rows);
  } else if (flags.baseline == "previous-window") {
    if (!flags.data.empty()) return invalid_argument("--baseline previous-window compares request log windows");
    SLIPWAY_ASSIGN_OR_RETURN(baseline, logged(now - 2 * window.count(), now - window.count()));
    result.reference = fmt::format("the request log of the {} before", flags.window);
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(auto file, scored_file(*loaded.bundle, flags.baseline));
    baseline = monitor::bin(profile, file.first, file.second);
    result.reference = flags.baseline;
  }
  if (baseline.rows <= 0) return failed_precondition("no rows in the baseline, " + result.reference);
  result.report = monitor::compare(profile, baseline, current, result.thresholds);
  monitor::add_attribution_drift(*loaded.bundle, flags.data.empty() ? window_rows.inputs : current_table, result.report,
                                 result.thresholds);
  if (!flags.html.empty()) {
    // Over a request log window: the drift of each twelfth of it, against the same baseline.
    std::vector<monitor::DriftPoint> history;
    constexpr std::int64_t kSlices = 12;
    std::int64_t from = now - window.count();
    for (std::int64_t slice = 0; flags.data.empty() && slice < kSlices; ++slice) {
      std::int64_t begin = from + slice * window.count() / kSlices, end = from + (slice + 1) * window.count() / kSlices;
      std::vector<std::uint32_t> rows;
      std::vector<float> slice_scores;
      for (std::size_t row = 0; row < window_rows.time_ms.size(); ++row) {
        if (window_rows.time_ms[row] < begin || window_rows.time_ms[row] >= end) continue;
        rows.push_back(static_cast<std::uint32_t>(row));
        slice_scores.push_back(window_rows.scores[row]);
      }
      if (rows.empty()) continue;
      auto report =
          monitor::compare(profile, baseline, monitor::bin(profile, window_rows.inputs.take_rows(rows), slice_scores),
                           result.thresholds);
      monitor::DriftPoint point{begin, {}, report.prediction.distance, static_cast<double>(rows.size())};
      for (const auto& input : report.inputs) point.inputs.push_back(input.distance);
      history.push_back(std::move(point));
    }
    SLIPWAY_RETURN_IF_ERROR(
        write_file_atomic(flags.html, monitor::html_report(profile, result.report, result.model, result.current,
                                                           result.reference, history, result.thresholds)));
  }
  if (flags.alert || !flags.webhook.empty()) {
    if (model_name.empty()) return invalid_argument("alerts belong to a registered model: give NAME, not a file");
    SLIPWAY_ASSIGN_OR_RETURN(auto states, alert_states(result, flags, model_name));
    SLIPWAY_ASSIGN_OR_RETURN(auto writable, open_workspace(global, WorkspaceAccess::kWrite));
    SLIPWAY_ASSIGN_OR_RETURN(auto before, writable->models().alerts());
    // Each alert is heard of once per change: a state is news when it differs from the recorded
    // one (or, firing, when there is none).
    for (const auto& state : states) {
      auto known = std::find_if(before.begin(), before.end(), [&](const registry::AlertState& recorded) {
        return recorded.model == state.model && recorded.subject == state.subject;
      });
      if (known == before.end() ? state.firing : known->firing != state.firing) result.alert_changes.push_back(state);
    }
    if (!flags.webhook.empty() && !result.alert_changes.empty()) {
      JsonWriter json;
      json.begin_object().key("model").value(result.model).key("current").value(result.current);
      json.key("reference").value(result.reference).key("alerts");
      write_alert_changes(json, result.alert_changes);
      json.end_object();
      auto answer = http::fetch("POST", flags.webhook, json.str(), {{"Content-Type", "application/json"}});
      if (!answer.ok() || answer->status / 100 != 2) {
        // Not recorded: the next run tells the webhook again.
        return unavailable("the webhook did not take the alerts (" +
                           (answer.ok() ? "status " + std::to_string(answer->status) : answer.status().message()) +
                           "); they stay unrecorded and the next run sends them again");
      }
      result.webhook_status = "answered " + std::to_string(answer->status);
    }
    SLIPWAY_RETURN_IF_ERROR(writable->models().record_alerts(states));
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
