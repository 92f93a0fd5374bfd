// The management API under /api (control.h): each route parses its JSON into the request of a
// pipeline operation, calls it and encodes the result. The operation applies every check (the
// gate, the constant fallback, approvals and who may change them), exactly as for the CLI.
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "slipway/control.h"
#include "slipway/pipeline.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;
using serve::json_response;
using serve::method_not_allowed;

HttpResponse endpoint_response(const registry::Endpoint& endpoint) {
  JsonWriter json;
  registry::write_endpoint_json(json, endpoint);
  return json_response(200, json.take());
}

// Every field of `object` is among `known`, once (a typo is an error, not a silent default; a
// repeated key is refused rather than one copy silently winning).
Status check_fields(simdjson::dom::object object, std::string_view where,
                    std::initializer_list<std::string_view> known) {
  std::set<std::string_view> seen;
  for (auto field : object) {
    if (std::find(known.begin(), known.end(), field.key) == known.end()) {
      std::string names;
      for (std::string_view name : known) names += (names.empty() ? "'" : ", '") + std::string(name) + "'";
      return invalid_argument("unknown field '" + std::string(field.key.substr(0, 64)) + "' in " + std::string(where) +
                              "; it takes " + names);
    }
    if (!seen.insert(field.key).second) {
      return invalid_argument("field '" + std::string(field.key) + "' is given twice in " + std::string(where));
    }
  }
  return {};
}

// A request body: a JSON object whose fields are all among those the route takes.
class JsonBody {
 public:
  Status parse(std::string_view body, std::string_view example, std::initializer_list<std::string_view> known) {
    padded_ = simdjson::padded_string(body);
    if (parser_.parse(padded_).get(object_) != simdjson::SUCCESS) {
      return invalid_argument("the body must be a JSON object such as " + std::string(example));
    }
    return check_fields(object_, "the body", known);
  }
  bool has(std::string_view key) {
    simdjson::dom::element element;
    return object_[key].get(element) == simdjson::SUCCESS;
  }
  bool is_null(std::string_view key) {
    simdjson::dom::element element;
    return object_[key].get(element) == simdjson::SUCCESS && element.is_null();
  }
  Result<std::string> text(std::string_view key, std::string_view what) { return text_of(object_, key, what); }
  Result<double> number(std::string_view key, std::string_view what) {
    double value = 0.0;
    if (object_[key].get(value) != simdjson::SUCCESS || !std::isfinite(value)) {
      return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
    }
    return value;
  }
  // A whole number of milliseconds from 0 to `max_ms`: 0.4 is refused, not rounded to 0 (which
  // would remove a deadline).
  Result<std::int64_t> milliseconds(std::string_view key, double max_ms, std::string_view range) {
    auto value = number(key, "a whole number of milliseconds");
    if (!value.ok()) return value.status();
    if (*value != std::floor(*value) || *value < 0 || *value > max_ms) {
      return invalid_argument("'" + std::string(key) + "' must be a whole number of milliseconds " +
                              std::string(range));
    }
    return static_cast<std::int64_t>(*value);
  }
  Result<bool> boolean(std::string_view key) {
    bool value = false;
    if (object_[key].get(value) != simdjson::SUCCESS)
      return invalid_argument("'" + std::string(key) + "' must be true or false");
    return value;
  }
  Result<std::vector<double>> numbers(std::string_view key, std::string_view what) {
    simdjson::dom::array array;
    if (object_[key].get(array) != simdjson::SUCCESS)
      return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
    std::vector<double> values;
    for (auto item : array) {
      double value = 0.0;
      if (item.get(value) != simdjson::SUCCESS || values.size() >= 100)
        return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
      values.push_back(value);
    }
    return values;
  }
  Result<simdjson::dom::object> object(std::string_view key, std::string_view what) {
    simdjson::dom::object value;
    if (object_[key].get(value) != simdjson::SUCCESS)
      return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
    return value;
  }

  static Result<std::string> text_of(simdjson::dom::object object, std::string_view key, std::string_view what) {
    std::string_view value;
    if (object[key].get(value) != simdjson::SUCCESS)
      return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
    return std::string(value);
  }

 private:
  simdjson::dom::parser parser_;
  simdjson::padded_string padded_;
  simdjson::dom::object object_;
};

pipeline::Caller caller_of(const serve::ManagementCall& call) {
  pipeline::Caller caller;
  if (!call.token_name.empty()) caller.actor = "token:" + call.token_name;
  caller.may_administer = call.role == serve::Role::kAdmin;
  return caller;
}

// "gate": {"data": FILE, "metric": "auc", "thresholds": "max_drop=0.01", "slice": COLUMN}
Result<pipeline::GateRequest> gate_request(simdjson::dom::object object) {
  SLIPWAY_RETURN_IF_ERROR(check_fields(object, "'gate'", {"data", "metric", "thresholds", "slice"}));
  pipeline::GateRequest gate;
  SLIPWAY_ASSIGN_OR_RETURN(gate.data_path,
                           JsonBody::text_of(object, "data", "the path of a labelled CSV file on the server"));
  SLIPWAY_ASSIGN_OR_RETURN(gate.criteria.metric, JsonBody::text_of(object, "metric", "a metric such as \"auc\""));
  SLIPWAY_ASSIGN_OR_RETURN(auto thresholds,
                           JsonBody::text_of(object, "thresholds", "thresholds such as \"max_drop=0.01\""));
  SLIPWAY_RETURN_IF_ERROR(eval::parse_gate_thresholds(thresholds, gate.criteria));
  simdjson::dom::element slice;
  if (object["slice"].get(slice) == simdjson::SUCCESS) {
    SLIPWAY_ASSIGN_OR_RETURN(gate.slice, JsonBody::text_of(object, "slice", "a column name"));
  }
  return gate;
}

// POST /api/endpoints/NAME/deploy: the CLI's deploy of a version (a canary, or a rollout in steps),
// gated first when "gate" is given.
Result<pipeline::DeployRequest> deploy_request(const std::string& endpoint, std::string_view body) {
  JsonBody request;
  SLIPWAY_RETURN_IF_ERROR(request.parse(body, R"({"model": "churn@4", "canary": 10})",
                                        {"model", "canary", "steps", "interval_ms", "criteria", "gate"}));
  pipeline::DeployRequest deploy;
  deploy.endpoint = endpoint;
  SLIPWAY_ASSIGN_OR_RETURN(deploy.reference, request.text("model", "a model reference such as \"churn@4\""));
  if (request.has("steps")) {
    if (request.has("canary")) return invalid_argument("'steps' starts a rollout; it does not go with 'canary'");
    SLIPWAY_ASSIGN_OR_RETURN(deploy.steps,
                             request.numbers("steps", "an array of percentages ending at 100, such as [10, 50, 100]"));
    if (request.has("interval_ms")) {
      SLIPWAY_ASSIGN_OR_RETURN(deploy.interval_ms,
                               request.milliseconds("interval_ms", 86'400'000.0, "from 1,000 to a day"));
    }
    if (request.has("criteria")) {
      SLIPWAY_ASSIGN_OR_RETURN(auto text,
                               request.text("criteria", "text such as \"max_p99_ratio=2,min_requests=100\""));
      SLIPWAY_ASSIGN_OR_RETURN(deploy.criteria, registry::parse_criteria(text));
    }
  } else if (request.has("interval_ms") || request.has("criteria")) {
    return invalid_argument("'interval_ms' and 'criteria' go with 'steps'");
  }
  if (request.has("canary")) {
    SLIPWAY_ASSIGN_OR_RETURN(deploy.canary, request.number("canary", "a number (a percentage)"));
  }
  if (request.has("gate")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto object,
                             request.object("gate", R"({"data": "holdout.csv", "metric": "auc", "thresholds": "max_drop=0.01"})"));
    SLIPWAY_ASSIGN_OR_RETURN(deploy.gate, gate_request(object));
  }
  return deploy;
}

// POST /api/endpoints/NAME/settings: the CLI's deploy settings, all stored or none.
Result<pipeline::EndpointSettingsRequest> settings_request(std::string_view body) {
  JsonBody request;
  SLIPWAY_RETURN_IF_ERROR(request.parse(body, R"({"fallback": "previous", "deadline_ms": 200})",
                                        {"fallback", "deadline_ms", "owner", "require_approval", "shadow"}));
  pipeline::EndpointSettingsRequest settings;
  if (request.has("fallback")) {
    SLIPWAY_ASSIGN_OR_RETURN(settings.settings.fallback,
                             request.text("fallback", "none, main, previous, cached or constant:VALUE"));
  }
  if (request.has("deadline_ms")) {
    // The store's range: 0 (none) to an hour.
    SLIPWAY_ASSIGN_OR_RETURN(settings.settings.deadline_ms,
                             request.milliseconds("deadline_ms", 3'600'000.0, "from 0 (none) to an hour"));
  }
  if (request.has("owner")) {
    SLIPWAY_ASSIGN_OR_RETURN(settings.settings.owner, request.text("owner", "text"));
  }
  if (request.has("require_approval")) {
    SLIPWAY_ASSIGN_OR_RETURN(settings.settings.require_approval, request.boolean("require_approval"));
  }
  if (request.is_null("shadow")) {
    settings.remove_shadow = true;
  } else if (request.has("shadow")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto object, request.object("shadow", R"(null or {"model": "churn@5", "percent": 10})"));
    SLIPWAY_RETURN_IF_ERROR(check_fields(object, "'shadow'", {"model", "percent"}));
    SLIPWAY_ASSIGN_OR_RETURN(settings.shadow_reference,
                             JsonBody::text_of(object, "model", "a model reference such as \"churn@5\""));
    simdjson::dom::element share;
    if (object["percent"].get(share) == simdjson::SUCCESS && share.get(settings.shadow_percent) != simdjson::SUCCESS) {
      return invalid_argument("the shadow's 'percent' must be a number");
    }
  }
  return settings;
}

// %XX and '+' in a query value.
Result<std::string> url_decoded(std::string_view value) {
  std::string decoded;
  for (std::size_t index = 0; index < value.size(); ++index) {
    if (value[index] == '+') {
      decoded += ' ';
    } else if (value[index] == '%') {
      unsigned code = 0;
      if (index + 2 >= value.size() ||
          std::from_chars(value.data() + index + 1, value.data() + index + 3, code, 16).ptr !=
              value.data() + index + 3) {
        return invalid_argument("a query value has a '%' that is not followed by two hex digits");
      }
      decoded += static_cast<char>(code);
      index += 2;
    } else {
      decoded += value[index];
    }
  }
  return decoded;
}

// GET /api/audit?model=NAME&since_ms=T&limit=N: the audit log, oldest first.
HttpResponse audit(registry::Registry& registry, std::string_view query) {
  constexpr std::int64_t kMaxLimit = 100'000;
  registry::AuditFilter filter;
  while (!query.empty()) {
    std::string_view pair = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), pair.size() + 1));
    auto equals = pair.find('=');
    std::string_view key = pair.substr(0, equals);
    std::string_view value = equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1);
    auto integer = [&](std::int64_t& out, std::int64_t least, std::int64_t most) {
      auto parsed = std::from_chars(value.data(), value.data() + value.size(), out);
      return parsed.ec == std::errc() && parsed.ptr == value.data() + value.size() && out >= least && out <= most;
    };
    std::int64_t number = 0;
    if (key == "model") {
      auto model = url_decoded(value);
      if (!model.ok()) return error_response(model.status());
      filter.model = std::move(*model);
    } else if (key == "since_ms" && integer(number, 0, INT64_MAX)) {
      filter.since_ms = number;
    } else if (key == "limit" && integer(number, 1, kMaxLimit)) {
      filter.limit = static_cast<std::size_t>(number);
    } else {
      return error_response(400, "the audit log takes model=NAME, since_ms=UNIX_MS (0 or more) and limit=N (1 to "
                                 "100000), not '" +
                                     std::string(pair.substr(0, 64)) + "'");
    }
  }
  auto entries = registry.audit().query(filter);
  if (!entries.ok()) return error_response(entries.status());
  JsonWriter json;
  json.begin_array();
  for (const auto& entry : *entries) {
    json.begin_object().key("time_ms").value(entry.time_ms).key("actor").value(entry.actor);
    json.key("action").value(entry.action).key("detail").value(entry.detail).end_object();
  }
  json.end_array();
  return json_response(200, json.take());
}

// POST /api/models/NAME/versions/V/approval {"note": "..."} approves; DELETE revokes.
HttpResponse approval(registry::Registry& store, const serve::ManagementCall& call) {
  std::string_view version_text = call.segments[4];
  std::int64_t version = 0;
  auto parsed = std::from_chars(version_text.data(), version_text.data() + version_text.size(), version);
  if (parsed.ec != std::errc() || parsed.ptr != version_text.data() + version_text.size() || version < 1) {
    return error_response(400, "model version '" + std::string(version_text.substr(0, 64)) +
                                   "' is not a positive integer");
  }
  pipeline::ApprovalRequest request;
  request.model = std::string(call.segments[2]);
  request.version = version;
  request.revoke = call.method == "DELETE";
  if (!request.revoke) {
    JsonBody body;
    if (auto valid = body.parse(call.body, R"({"note": "AUC +0.01 on the November holdout"})", {"note"}); !valid.ok()) {
      return error_response(valid);
    }
    auto note = body.text("note", "text saying why the version is approved");
    if (!note.ok()) return error_response(note.status());
    request.note = std::move(*note);
  }
  auto record = pipeline::set_approval(store, request, caller_of(call));
  if (!record.ok()) return error_response(record.status());
  JsonWriter json;
  json.begin_object().key("model").value(request.model).key("version").value(version).key("approval");
  if (record->approval) {
    json.begin_object().key("approver").value(record->approval->approver).key("note").value(record->approval->note);
    json.key("approved_ms").value(record->approval->approved_ms).end_object();
  } else {
    json.null();
  }
  json.end_object();
  return json_response(200, json.take());
}

HttpResponse read_endpoints(registry::Registry& registry, const serve::ManagementCall& call) {
  const auto& segments = call.segments;
  if (segments.size() == 2) {
    auto listed = registry.endpoints().list();
    if (!listed.ok()) return error_response(listed.status());
    JsonWriter json;
    json.begin_array();
    for (const auto& endpoint : *listed) registry::write_endpoint_json(json, endpoint);
    json.end_array();
    return json_response(200, json.take());
  }
  std::string name(segments[2]);
  if (segments.size() == 4) {
    auto rollout = registry.endpoints().rollout(name);
    if (!rollout.ok()) return error_response(rollout.status());
    if (!rollout->has_value()) return error_response(404, "endpoint '" + name + "' has had no rollout");
    JsonWriter json;
    registry::write_rollout_json(json, **rollout);
    return json_response(200, json.take());
  }
  auto found = registry.endpoints().get(name);
  if (!found.ok()) return error_response(found.status());
  if (!found->has_value()) return error_response(404, "no endpoint named '" + name + "'");
  return endpoint_response(**found);
}

HttpResponse change_endpoint(registry::Registry& store, const serve::ManagementCall& call) {
  std::string name(call.segments[2]);
  std::string_view action = call.segments[3];
  pipeline::Caller caller = caller_of(call);
  if (action == "deploy") {
    auto request = deploy_request(name, call.body);
    if (!request.ok()) return error_response(request.status());
    auto outcome = pipeline::deploy(store, *request, caller);
    if (!outcome.ok()) return error_response(outcome.status());
    if (!outcome->rollout) return endpoint_response(outcome->endpoint);
    JsonWriter json;
    registry::write_rollout_json(json, *outcome->rollout);
    return json_response(200, json.take());
  }
  if (action == "settings") {
    auto request = settings_request(call.body);
    if (!request.ok()) return error_response(request.status());
    auto changed = pipeline::configure_endpoint(store, name, *request, caller);
    return changed.ok() ? endpoint_response(*changed) : error_response(changed.status());
  }
  if (action == "promote") {
    pipeline::DeployRequest request;
    request.endpoint = name;
    request.promote = true;
    auto outcome = pipeline::deploy(store, request, caller);
    return outcome.ok() ? endpoint_response(outcome->endpoint) : error_response(outcome.status());
  }
  auto changed = pipeline::rollback(store, name, caller);
  return changed.ok() ? endpoint_response(*changed) : error_response(changed.status());
}

HttpResponse handle(const std::string& home, const serve::ManagementCall& call) {
  // segments: api endpoints [NAME [rollout|deploy|promote|rollback|settings]]
  //           api models NAME versions V approval
  //           api audit
  constexpr std::string_view kRoutes =
      "no such management route; the API has /api/endpoints[/NAME[/rollout|deploy|promote|rollback|settings]], "
      "/api/models/NAME/versions/V/approval and /api/audit";
  const auto& segments = call.segments;
  std::string_view area = segments.size() >= 2 ? segments[1] : std::string_view();
  bool approval_route =
      area == "models" && segments.size() == 6 && segments[3] == "versions" && segments[5] == "approval";
  bool endpoint_route = area == "endpoints" && segments.size() <= 4;
  bool audit_route = area == "audit" && segments.size() == 2;
  if (!(approval_route || endpoint_route || audit_route)) return error_response(404, kRoutes);
  std::string_view action = endpoint_route && segments.size() == 4 ? segments[3] : std::string_view();
  bool reads = audit_route || (endpoint_route && (segments.size() <= 3 || action == "rollout"));
  if (reads) {
    if (call.method != "GET") return method_not_allowed("GET");
    auto registry = registry::Registry::open(home, registry::OpenOptions{.create = false, .read_only = true});
    if (!registry.ok()) return error_response(registry.status());
    return audit_route ? audit(**registry, call.query) : read_endpoints(**registry, call);
  }
  if (approval_route && call.method != "POST" && call.method != "DELETE") return method_not_allowed("POST, DELETE");
  if (endpoint_route && call.method != "POST") return method_not_allowed("POST");
  if (endpoint_route && action != "deploy" && action != "promote" && action != "rollback" && action != "settings") {
    return error_response(404, "no such endpoint action; use rollout, deploy, promote, rollback or settings");
  }
  // The server reads its workspace read-only; a change opens it for writing just for the call
  // (a workspace on a read-only disk says so here).
  auto writable = registry::Registry::open(home, false);
  if (!writable.ok()) return error_response(writable.status());
  return approval_route ? approval(**writable, call) : change_endpoint(**writable, call);
}

}  // namespace

serve::ManagementHandler management_api(std::string home) {
  return [home = std::move(home)](const serve::ManagementCall& call) { return handle(home, call); };
}

}  // namespace slipway::control
