// The monitoring report and its alerts: what `slipway monitor` prints and what /api/monitoring
// answers, assembled once.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipeline/operation_support.h"
#include "slipway/http.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

// The rows of a file and the model's scores for them (the first score of each row).
Result<std::pair<data::Table, std::vector<float>>> scored_file(const model::Bundle& bundle, const std::string& path) {
  SLIPWAY_ASSIGN_OR_RETURN(auto read, data::read_rows(path));
  SLIPWAY_ASSIGN_OR_RETURN(auto predictions, bundle.predict(read.table));
  std::vector<float> scores(predictions.rows);
  for (std::size_t row = 0; row < predictions.rows; ++row) scores[row] = predictions.scores[row * predictions.columns];
  return std::make_pair(std::move(read.table), std::move(scores));
}

// The drift of each twelfth of the window's logged rows, against the same baseline.
std::vector<monitor::DriftPoint> drift_history(const model::DataProfile& profile, const monitor::BinnedData& baseline,
                                               const monitor::LoggedRequests& rows, std::int64_t from,
                                               std::int64_t window_ms, const monitor::DriftThresholds& thresholds) {
  std::vector<monitor::DriftPoint> history;
  constexpr std::int64_t kSlices = 12;
  for (std::int64_t slice = 0; slice < kSlices; ++slice) {
    std::int64_t begin = from + slice * window_ms / kSlices, end = from + (slice + 1) * window_ms / kSlices;
    std::vector<std::uint32_t> picked;
    std::vector<float> scores;
    for (std::size_t row = 0; row < rows.time_ms.size(); ++row) {
      if (rows.time_ms[row] < begin || rows.time_ms[row] >= end) continue;
      picked.push_back(static_cast<std::uint32_t>(row));
      scores.push_back(rows.scores[row]);
    }
    if (picked.empty()) continue;
    auto report =
        monitor::compare(profile, baseline, monitor::bin(profile, rows.inputs.take_rows(picked), scores), thresholds);
    monitor::DriftPoint point{begin, {}, report.prediction.distance, static_cast<double>(picked.size())};
    for (const auto& input : report.inputs) point.inputs.push_back(input.distance);
    history.push_back(std::move(point));
  }
  return history;
}

}  // namespace

Result<MonitorReport> monitoring_report(registry::Registry& registry, const MonitorRequest& request) {
  SLIPWAY_RETURN_IF_ERROR(monitor::check_drift_thresholds(request.thresholds));
  if (request.window_ms <= 0) return invalid_argument("the window must be longer than 0");
  // An endpoint is watched through its main version; a model through the version named.
  std::string reference = request.reference;
  std::string endpoint;
  if (!names_bundle_file(request.reference)) {
    SLIPWAY_ASSIGN_OR_RETURN(auto found, registry.endpoints().get(request.reference));
    if (found) {
      endpoint = request.reference;
      reference = registry::main_route(found->routes).reference();
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, resolve_reference(&registry, reference));
  const model::DataProfile& profile = loaded.bundle->manifest().profile;
  if (profile.empty()) {
    return failed_precondition(loaded.description +
                               " carries no training profile (it was imported, or trained by an older slipway); "
                               "train it again to monitor it");
  }
  if (!request.slice.empty() && request.id_column.empty()) {
    return invalid_argument("a slice splits the performance on labelled rows: give the id column too");
  }
  MonitorReport result;
  result.bundle = loaded.bundle;
  result.model = loaded.description + (endpoint.empty() ? "" : " (main version of endpoint " + endpoint + ")");
  result.thresholds = request.thresholds;
  result.slice_column = request.slice;
  std::string log_directory =
      request.request_log_dir.empty() ? registry.home() + "/request_log" : request.request_log_dir;
  auto parsed_reference = registry::parse_model_reference(reference);
  result.model_name = parsed_reference.ok() ? parsed_reference->first : "";
  std::string version = loaded.description.substr(loaded.description.find('@') + 1);
  // The ids of `table`'s rows in the id column (empty without one).
  auto ids_of = [&](const data::Table& table) -> Result<std::vector<std::string>> {
    std::vector<std::string> ids;
    if (request.id_column.empty()) return ids;
    const data::Column* column = table.find(request.id_column);
    if (column == nullptr) return invalid_argument("the rows have no '" + request.id_column + "' (the id column)");
    for (std::size_t row = 0; row < column->size(); ++row) ids.push_back(column->text_at(row));
    return ids;
  };
  // Each row's value of the slice column ("(missing)" where it has none).
  auto slice_values_of = [&](const data::Table& table, bool logged) -> Result<std::vector<std::string>> {
    std::vector<std::string> values;
    if (request.slice.empty()) return values;
    const data::Column* column = table.find(request.slice);
    if (column == nullptr) {
      return invalid_argument("the rows have no '" + request.slice + "' (the slice column)" +
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
    SLIPWAY_ASSIGN_OR_RETURN(auto requests, monitor::read_request_log(log_directory, result.model_name, version,
                                                                      endpoint, inputs, from, to, request.id_column));
    SLIPWAY_ASSIGN_OR_RETURN(ids, ids_of(requests.inputs));
    SLIPWAY_ASSIGN_OR_RETURN(slice_values, slice_values_of(requests.inputs, true));
    scores = requests.scores;
    auto binned = monitor::bin(profile, requests.inputs, requests.scores);
    window_rows = std::move(requests);
    return binned;
  };
  std::int64_t now = unix_time_ms();
  monitor::BinnedData current;
  data::Table current_table;  // the file's rows
  if (!request.data.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto file, scored_file(*loaded.bundle, request.data));
    current = monitor::bin(profile, file.first, file.second);
    SLIPWAY_ASSIGN_OR_RETURN(ids, ids_of(file.first));
    SLIPWAY_ASSIGN_OR_RETURN(slice_values, slice_values_of(file.first, false));
    scores = std::move(file.second);
    current_table = std::move(file.first);
    result.current = request.data;
  } else {
    if (result.model_name.empty()) return invalid_argument("a bundle file has no request log: give a data file");
    SLIPWAY_ASSIGN_OR_RETURN(current, logged(now - request.window_ms, now));
    result.current = fmt::format("the request log of the last {}", request.window);
  }
  if (!request.id_column.empty()) {
    // Performance over the current rows whose labels have arrived.
    if (result.model_name.empty())
      return invalid_argument("labels belong to a registered model: give NAME, not a file");
    SLIPWAY_ASSIGN_OR_RETURN(auto labels, registry.models().labels(result.model_name));
    SLIPWAY_ASSIGN_OR_RETURN(result.performance,
                             monitor::performance(*loaded.bundle, ids, scores, labels, slice_values));
    result.training_metrics = loaded.bundle->manifest().metrics;
  }
  if (current.rows <= 0) return failed_precondition("no rows to compare in " + result.current);
  monitor::BinnedData baseline;
  if (request.baseline == "training") {
    baseline = monitor::training_bins(profile);
    result.reference = fmt::format("the training data ({:.0f} rows)", baseline.rows);
  } else if (request.baseline == "previous-window") {
    if (!request.data.empty()) return invalid_argument("the previous-window baseline compares request log windows");
    SLIPWAY_ASSIGN_OR_RETURN(baseline, logged(now - 2 * request.window_ms, now - request.window_ms));
    result.reference = fmt::format("the request log of the {} before", request.window);
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(auto file, scored_file(*loaded.bundle, request.baseline));
    baseline = monitor::bin(profile, file.first, file.second);
    result.reference = request.baseline;
  }
  if (baseline.rows <= 0) return failed_precondition("no rows in the baseline, " + result.reference);
  result.drift = monitor::compare(profile, baseline, current, result.thresholds);
  monitor::add_attribution_drift(*loaded.bundle, request.data.empty() ? window_rows.inputs : current_table,
                                 result.drift, result.thresholds);
  if (request.history && request.data.empty()) {
    result.history =
        drift_history(profile, baseline, window_rows, now - request.window_ms, request.window_ms, result.thresholds);
  }
  return result;
}

void write_monitor_report_json(JsonWriter& json, const MonitorReport& report) {
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
  json.begin_object().key("model").value(report.model).key("current").value(report.current);
  json.key("reference").value(report.reference);
  json.key("distance_threshold").value(report.thresholds.distance);
  json.key("p_value_threshold").value(report.thresholds.p_value);
  json.key("inputs").begin_array();
  for (const auto& drift : report.drift.inputs) write_drift(drift);
  json.end_array().key("prediction");
  write_drift(report.drift.prediction);
  json.key("drifted_inputs").value(static_cast<std::uint64_t>(report.drift.drifted_inputs));
  json.key("drifted_share").value(report.drift.drifted_share);
  json.key("attribution_drifted_inputs").value(static_cast<std::uint64_t>(report.drift.attribution_drifted_inputs));
  if (const auto& performance = report.performance) {
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
    for (const auto& [name, value] : report.training_metrics) json.key(name).value(value);
    json.end_object().end_object();
  }
}

Result<MetricLimit> parse_metric_limit(const std::string& text) {
  auto equals = text.find('=');
  std::optional<double> limit =
      equals == std::string::npos ? std::nullopt : parse_finite_number(std::string_view(text).substr(equals + 1));
  if (equals == std::string::npos || equals == 0 || !limit) {
    return invalid_argument("a metric limit is NAME=NUMBER, such as auc=0.7, not '" + text + "'");
  }
  return MetricLimit{text.substr(0, equals), *limit};
}

namespace {

// The states of the report's alerts: each input and the prediction (drifted or not), and each
// metric rule.
Result<std::vector<registry::AlertState>> alert_states(const MonitorReport& report, const AlertRules& rules) {
  std::vector<registry::AlertState> states;
  const std::string& model = report.model_name;
  std::int64_t now = unix_time_ms();
  for (const auto& input : report.drift.inputs) {
    states.push_back({model, "input:" + input.name, input.drifted, input.distance, now});
  }
  states.push_back({model, "prediction", report.drift.prediction.drifted, report.drift.prediction.distance, now});
  for (bool minimum : {true, false}) {
    for (const auto& limit : minimum ? rules.min_metrics : rules.max_metrics) {
      if (!report.performance) return invalid_argument("metric limits need the id column (and ingested labels)");
      // Named by the task's metrics even before a label arrives, so a rule cannot invent subjects.
      const auto& known = report.performance->metrics.values;
      if (std::none_of(known.begin(), known.end(), [&](const auto& metric) { return metric.first == limit.metric; })) {
        return invalid_argument("no metric '" + limit.metric.substr(0, 64) + "' for this model's task");
      }
      double value = report.performance->metrics.get(limit.metric);
      bool firing = !std::isnan(value) && (minimum ? value < limit.limit : value > limit.limit);
      states.push_back({model, "metric:" + limit.metric, firing, value, now});
    }
  }
  for (const auto& limit : rules.max_metric_drops) {
    // How much worse than on the training run's held-out rows.
    if (!report.performance) return invalid_argument("metric drops need the id column (and ingested labels)");
    auto test = report.training_metrics.find("test_" + limit.metric);
    if (test == report.training_metrics.end()) {
      return invalid_argument("the bundle records no test " + limit.metric + " to measure a drop from");
    }
    double drop = eval::quality_drop(limit.metric, test->second, report.performance->metrics.get(limit.metric));
    states.push_back({model, "metric_drop:" + limit.metric, !std::isnan(drop) && drop > limit.limit, drop, now});
  }
  return states;
}

}  // namespace

void write_alert_changes_json(JsonWriter& json, const std::vector<registry::AlertState>& changes) {
  json.begin_array();
  for (const auto& change : changes) {
    json.begin_object().key("subject").value(change.subject);
    json.key("state").value(change.firing ? "firing" : "resolved").key("value").value(change.value).end_object();
  }
  json.end_array();
}

Result<AlertOutcome> record_alerts(registry::Registry& registry, const MonitorReport& report, const AlertRules& rules,
                                   const Caller& caller) {
  if (report.model_name.empty()) return invalid_argument("alerts belong to a registered model: give NAME, not a file");
  AlertOutcome outcome;
  SLIPWAY_ASSIGN_OR_RETURN(outcome.states, alert_states(report, rules));
  SLIPWAY_ASSIGN_OR_RETURN(auto before, registry.models().alerts());
  // Each alert is heard of once per change: a state is news when it differs from the recorded
  // one (or, firing, when there is none).
  for (const auto& state : outcome.states) {
    auto known = std::find_if(before.begin(), before.end(), [&](const registry::AlertState& recorded) {
      return recorded.model == state.model && recorded.subject == state.subject;
    });
    if (known == before.end() ? state.firing : known->firing != state.firing) outcome.changes.push_back(state);
  }
  if (!rules.webhook.empty() && !outcome.changes.empty()) {
    JsonWriter json;
    json.begin_object().key("model").value(report.model).key("current").value(report.current);
    json.key("reference").value(report.reference).key("alerts");
    write_alert_changes_json(json, outcome.changes);
    json.end_object();
    auto answer = http::fetch("POST", rules.webhook, json.str(), {{"Content-Type", "application/json"}});
    if (!answer.ok() || answer->status / 100 != 2) {
      // Not recorded: the next run tells the webhook again.
      return unavailable("the webhook did not take the alerts (" +
                         (answer.ok() ? "status " + std::to_string(answer->status) : answer.status().message()) +
                         "); they stay unrecorded and the next run sends them again");
    }
    outcome.webhook_status = "answered " + std::to_string(answer->status);
  }
  act_as(registry, caller);
  SLIPWAY_RETURN_IF_ERROR(registry.models().record_alerts(outcome.states));
  return outcome;
}

}  // namespace slipway::pipeline
