// /api/monitoring and /api/alerts: what `slipway monitor` reports and records, over the request
// log of the workspace this server writes, through the same operations.
#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

const std::vector<ApiParameter> report_parameters = {
    {"window", R"({"type":"string","default":"1h"})", "the request log's last WINDOW (30m, 6h, 7d; at most 366d)"},
    {"baseline", R"({"type":"string","enum":["training","previous-window"],"default":"training"})",
     "the training data's profile, or the window before"},
    {"distance", R"({"type":"number","minimum":0,"maximum":1,"default":0.3})", "drift above this distance"},
    {"p_value", R"({"type":"number","minimum":0,"maximum":1,"default":0.05})", "drift below this p-value"},
    {"id_column", R"({"type":"string"})", "joins ingested labels by this input: the performance too"},
    {"slice", R"({"type":"string"})", "with id_column: the performance per value of this input"},
};

constexpr std::string_view kReportSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"current":{"type":"string"},)"
    R"("reference":{"type":"string"},"inputs":{"type":"array","items":{"type":"object"}},)"
    R"("prediction":{"type":"object"},"drifted_inputs":{"type":"integer"},"drifted_share":{"type":"number"},)"
    R"("performance":{"type":"object"}}})";
constexpr std::string_view kAlertRulesSchema =
    R"({"type":"object","additionalProperties":false,"properties":{)"
    R"("min_metrics":{"type":"object","additionalProperties":{"type":"number"},"description":"alert below"},)"
    R"("max_metrics":{"type":"object","additionalProperties":{"type":"number"},"description":"alert above"},)"
    R"("max_metric_drops":{"type":"object","additionalProperties":{"type":"number"},)"
    R"("description":"alert when this much worse than the bundle's test value"}}})";
constexpr std::string_view kAlertStatesSchema =
    R"({"type":"object","properties":{"alerts":{"type":"array","items":{"type":"object","properties":{)"
    R"("model":{"type":"string"},"subject":{"type":"string"},"state":{"type":"string","enum":["firing","resolved"]},)"
    R"("value":{"type":["number","null"]},"changed_ms":{"type":"integer"}}}},)"
    R"("changes":{"type":"array","items":{"type":"object"}}}})";

// The report the query asks for (a registered model or an endpoint, never a file of the server's).
Result<pipeline::MonitorReport> report_for(ApiCall& call) {
  SLIPWAY_ASSIGN_OR_RETURN(auto query, parse_query(call.http.query, report_parameters));
  pipeline::MonitorRequest request;
  request.reference = call.path_parameter("reference");
  request.request_log_dir = call.server->options.request_log_dir;
  if (pipeline::names_bundle_file(request.reference)) {
    return invalid_argument("monitoring watches a registered model (NAME[@VERSION|@ALIAS]) or an endpoint, not '" +
                            request.reference.substr(0, 64) + "'");
  }
  if (auto window = query.find("window"); window != query.end()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto parsed, parse_duration("window", window->second, 366));
    if (parsed.count() <= 0) return invalid_argument("'window' must be longer than 0");
    request.window_ms = parsed.count();
    request.window = window->second;
  }
  if (auto baseline = query.find("baseline"); baseline != query.end()) {
    if (baseline->second != "training" && baseline->second != "previous-window") {
      return invalid_argument("'baseline' is training or previous-window");
    }
    request.baseline = baseline->second;
  }
  for (auto [name, target] :
       {std::pair{"distance", &request.thresholds.distance}, std::pair{"p_value", &request.thresholds.p_value}}) {
    auto given = query.find(name);
    if (given == query.end()) continue;
    std::optional<double> value = parse_finite_number(given->second);
    if (!value) return invalid_argument("'" + std::string(name) + "' must be a number from 0 to 1");
    *target = *value;
  }
  if (auto id = query.find("id_column"); id != query.end()) request.id_column = id->second;
  if (auto slice = query.find("slice"); slice != query.end()) request.slice = slice->second;
  return pipeline::monitoring_report(*call.registry, request);
}

HttpResponse get_report(ApiCall& call) {
  auto report = report_for(call);
  if (!report.ok()) return error_response(report.status());
  JsonWriter json;
  pipeline::write_monitor_report_json(json, *report);
  json.end_object();
  return json_answer(json);
}

void write_alert_states(JsonWriter& json, const std::vector<registry::AlertState>& states) {
  json.begin_array();
  for (const auto& state : states) {
    json.begin_object().key("model").value(state.model).key("subject").value(state.subject);
    json.key("state").value(state.firing ? "firing" : "resolved").key("value").value(state.value);
    json.key("changed_ms").value(state.changed_ms).end_object();
  }
  json.end_array();
}

Result<std::vector<pipeline::MetricLimit>> metric_limits(JsonBody& body, std::string_view key) {
  std::vector<pipeline::MetricLimit> limits;
  if (!body.has(key)) return limits;
  SLIPWAY_ASSIGN_OR_RETURN(auto object,
                           body.object(key, "an object of metric names and limits, such as {\"auc\": 0.7}"));
  for (auto field : object) {
    double limit = 0;
    if (field.value.get(limit) != simdjson::SUCCESS || !std::isfinite(limit) || limits.size() >= 32) {
      return invalid_argument("'" + std::string(key) + "' maps at most 32 metric names to finite numbers");
    }
    limits.push_back({std::string(field.key), limit});
  }
  return limits;
}

// Records the report's alert states, as `slipway monitor --alert` does (no webhook: a server
// does not post to addresses a client names).
HttpResponse record_alerts(ApiCall& call) {
  JsonBody body;
  std::string_view text =
      call.http.body.find_first_not_of(" \t\r\n") == std::string_view::npos ? std::string_view("{}") : call.http.body;
  if (auto parsed =
          body.parse(text, R"({"min_metrics": {"auc": 0.7}})", {"min_metrics", "max_metrics", "max_metric_drops"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  pipeline::AlertRules rules;
  for (auto [key, target] : {std::pair{"min_metrics", &rules.min_metrics}, std::pair{"max_metrics", &rules.max_metrics},
                             std::pair{"max_metric_drops", &rules.max_metric_drops}}) {
    auto limits = metric_limits(body, key);
    if (!limits.ok()) return error_response(limits.status());
    *target = std::move(*limits);
  }
  auto report = report_for(call);
  if (!report.ok()) return error_response(report.status());
  auto outcome = pipeline::record_alerts(*call.registry, *report, rules, call.caller);
  if (!outcome.ok()) return error_response(outcome.status());
  JsonWriter json;
  json.begin_object().key("alerts");
  write_alert_states(json, outcome->states);
  json.key("changes");
  pipeline::write_alert_changes_json(json, outcome->changes);
  json.end_object();
  return json_answer(json);
}

const std::vector<ApiParameter> alert_parameters = {
    {"model", R"({"type":"string"})", "only this model's alerts"},
};

HttpResponse list_alerts(ApiCall& call) {
  auto query = parse_query(call.http.query, alert_parameters);
  if (!query.ok()) return error_response(query.status());
  auto alerts = call.registry->models().alerts();
  if (!alerts.ok()) return error_response(alerts.status());
  if (auto model = query->find("model"); model != query->end()) {
    std::erase_if(*alerts, [&](const registry::AlertState& state) { return state.model != model->second; });
  }
  JsonWriter json;
  json.begin_object().key("alerts");
  write_alert_states(json, *alerts);
  json.end_object();
  return json_answer(json);
}

}  // namespace

void add_monitoring_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET", "/api/monitoring/{reference}", Role::kRead, false,
                    "Skew, drift and (with labels) performance of a model's or an endpoint's traffic now, from "
                    "the request log (slipway monitor)",
                    report_parameters, "", kReportSchema, get_report});
  routes.push_back({"POST", "/api/monitoring/{reference}/alerts", Role::kDeploy, true,
                    "Compute the report and record its alert states for /metrics (slipway monitor --alert)",
                    report_parameters, kAlertRulesSchema, kAlertStatesSchema, record_alerts});
  routes.push_back({"GET", "/api/alerts", Role::kRead, false,
                    "The recorded alert states: firing or resolved, since when", alert_parameters, "",
                    kAlertStatesSchema, list_alerts});
}

}  // namespace slipway::control
