// The management API under /api (the deploy role when auth is on; approvals the admin role):
// endpoints as the CLI's deploy, rollback, endpoints and rollout status commands change and list
// them, approvals as `slipway approve`, and the audit log as `slipway audit`.
#include <simdjson.h>

#include <charconv>
#include <cmath>

#include "serve/service_state.h"

namespace slipway::serve {
namespace {

HttpResponse endpoint_response(const registry::Endpoint& endpoint) {
  JsonWriter json;
  registry::write_endpoint_json(json, endpoint);
  return json_response(200, json.take());
}

// A request body: a JSON object whose fields are all among `known` (a typo is an error, not a
// silent default).
class JsonBody {
 public:
  Status parse(std::string_view body, std::string_view example, std::initializer_list<std::string_view> known) {
    padded_ = simdjson::padded_string(body);
    if (parser_.parse(padded_).get(object_) != simdjson::SUCCESS) {
      return invalid_argument("the body must be a JSON object such as " + std::string(example));
    }
    for (auto field : object_) {
      if (std::find(known.begin(), known.end(), field.key) == known.end()) {
        std::string names;
        for (std::string_view name : known) names += (names.empty() ? "'" : ", '") + std::string(name) + "'";
        return invalid_argument("unknown field '" + std::string(field.key) + "'; this call takes " + names);
      }
    }
    return {};
  }
  bool has(std::string_view key) {
    simdjson::dom::element element;
    return object_[key].get(element) == simdjson::SUCCESS;
  }
  bool is_null(std::string_view key) {
    simdjson::dom::element element;
    return object_[key].get(element) == simdjson::SUCCESS && element.is_null();
  }
  Result<std::string> text(std::string_view key, std::string_view what) {
    std::string_view value;
    if (object_[key].get(value) != simdjson::SUCCESS)
      return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
    return std::string(value);
  }
  Result<double> number(std::string_view key, std::string_view what) {
    double value = 0.0;
    if (object_[key].get(value) != simdjson::SUCCESS || !std::isfinite(value)) {
      return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
    }
    return value;
  }
  // A whole number of milliseconds from 0 to a day (what any interval or deadline here may be).
  Result<std::int64_t> milliseconds(std::string_view key) {
    constexpr double kDayMs = 86'400'000.0;
    auto value = number(key, "a number of milliseconds from 0 to a day");
    if (!value.ok()) return value.status();
    if (*value < 0 || *value > kDayMs) return invalid_argument("'" + std::string(key) + "' must be from 0 to a day");
    return static_cast<std::int64_t>(std::llround(*value));
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
      if (item.get(value) != simdjson::SUCCESS)
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

 private:
  simdjson::dom::parser parser_;
  simdjson::padded_string padded_;
  simdjson::dom::object object_;
};

Result<registry::ModelVersion> resolve(registry::Registry& registry, const std::string& reference) {
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
  return registry.models().resolve(parsed.first, parsed.second);
}

// POST /api/endpoints/NAME/deploy {"model": "NAME@VERSION", "canary": PERCENT} or, for a rollout
// in steps, {"model", "steps": [10, 50, 100], "interval_ms": 120000, "criteria": "max_p99_ratio=2"}:
// the CLI's deploy.
HttpResponse deploy(registry::Registry& registry, const std::string& endpoint, std::string_view body) {
  JsonBody request;
  if (auto parsed = request.parse(body, R"({"model": "churn@4", "canary": 10})",
                                  {"model", "canary", "steps", "interval_ms", "criteria"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  auto reference = request.text("model", "a model reference such as \"churn@4\"");
  if (!reference.ok()) return error_response(reference.status());
  auto version = resolve(registry, *reference);
  if (!version.ok()) return error_response(version.status());
  if (request.has("steps")) {
    if (request.has("canary")) return error_response(400, "'steps' starts a rollout; it does not go with 'canary'");
    auto steps = request.numbers("steps", "an array of percentages ending at 100, such as [10, 50, 100]");
    if (!steps.ok()) return error_response(steps.status());
    std::int64_t interval_ms = 120'000;
    if (request.has("interval_ms")) {
      auto interval = request.milliseconds("interval_ms");
      if (!interval.ok()) return error_response(interval.status());
      interval_ms = *interval;
    }
    registry::RolloutCriteria criteria;
    if (request.has("criteria")) {
      auto text = request.text("criteria", "text such as \"max_p99_ratio=2,min_requests=100\"");
      if (!text.ok()) return error_response(text.status());
      auto parsed = registry::parse_criteria(*text);
      if (!parsed.ok()) return error_response(parsed.status());
      criteria = *parsed;
    }
    auto rollout =
        registry.endpoints().start_rollout(endpoint, version->model, version->version, *steps, interval_ms, criteria);
    if (!rollout.ok()) return error_response(rollout.status());
    JsonWriter json;
    registry::write_rollout_json(json, *rollout);
    return json_response(200, json.take());
  }
  if (request.has("interval_ms") || request.has("criteria")) {
    return error_response(400, "'interval_ms' and 'criteria' go with 'steps'");
  }
  std::optional<double> canary;
  if (request.has("canary")) {
    auto percent = request.number("canary", "a number (a percentage)");
    if (!percent.ok()) return error_response(percent.status());
    canary = *percent;
  }
  auto changed = registry.endpoints().deploy(endpoint, version->model, version->version, canary);
  return changed.ok() ? endpoint_response(*changed) : error_response(changed.status());
}

}  // namespace

// POST /api/endpoints/NAME/settings {"fallback", "deadline_ms", "owner", "require_approval",
// "shadow": {"model": "NAME@VERSION", "percent": 10} or null}: the CLI's deploy settings, all
// stored or none.
HttpResponse Service::State::change_endpoint_settings(registry::Registry& store, const std::string& endpoint,
                                                      std::string_view body) {
  JsonBody request;
  if (auto parsed = request.parse(body, R"({"fallback": "previous", "deadline_ms": 200})",
                                  {"fallback", "deadline_ms", "owner", "require_approval", "shadow"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  auto current = store.endpoints().get(endpoint);
  if (!current.ok()) return error_response(current.status());
  if (!current->has_value()) return error_response(404, "no endpoint named '" + endpoint + "'");
  registry::EndpointSettings settings;
  if (request.has("fallback")) {
    auto text = request.text("fallback", "none, main, previous, cached or constant:VALUE");
    if (!text.ok()) return error_response(text.status());
    if (auto valid = registry::validate_fallback(*text); !valid.ok()) return error_response(valid);
    if (text->starts_with("constant:")) {
      // The constant must fit what the endpoint serves: checked against its main version.
      const registry::EndpointRoute& main = main_route(**current);
      auto servable = manager.acquire(main.model, main.version);
      if (!servable.ok()) return error_response(servable.status());
      auto scores = constant_fallback_scores(*servable->model->bundle, std::string_view(*text).substr(9));
      if (!scores.ok()) return error_response(scores.status());
    }
    settings.fallback = std::move(*text);
  }
  if (request.has("deadline_ms")) {
    auto deadline = request.milliseconds("deadline_ms");
    if (!deadline.ok()) return error_response(deadline.status());
    settings.deadline_ms = *deadline;
  }
  if (request.has("owner")) {
    auto owner = request.text("owner", "text");
    if (!owner.ok()) return error_response(owner.status());
    settings.owner = std::move(*owner);
  }
  if (request.has("require_approval")) {
    auto required = request.boolean("require_approval");
    if (!required.ok()) return error_response(required.status());
    settings.require_approval = *required;
  }
  if (request.is_null("shadow")) {
    settings.shadow = registry::EndpointRoute{};
  } else if (request.has("shadow")) {
    auto object = request.object("shadow", R"(null or {"model": "churn@5", "percent": 10})");
    if (!object.ok()) return error_response(object.status());
    std::string_view reference;
    double percent = 100.0;
    if ((*object)["model"].get(reference) != simdjson::SUCCESS) {
      return error_response(400, "'shadow' needs 'model', a reference such as \"churn@5\"");
    }
    simdjson::dom::element share;
    if ((*object)["percent"].get(share) == simdjson::SUCCESS && share.get(percent) != simdjson::SUCCESS) {
      return error_response(400, "the shadow's 'percent' must be a number");
    }
    auto version = resolve(store, std::string(reference));
    if (!version.ok()) return error_response(version.status());
    settings.shadow = registry::EndpointRoute{version->model, version->version, percent};
  }
  if (auto changed = store.endpoints().configure(endpoint, settings); !changed.ok()) return error_response(changed);
  auto updated = store.endpoints().get(endpoint);
  if (!updated.ok()) return error_response(updated.status());
  return endpoint_response(**updated);
}

namespace {

// GET /api/audit?model=NAME&since_ms=T&limit=N: the audit log, oldest first.
HttpResponse audit(registry::Registry& registry, std::string_view query) {
  registry::AuditFilter filter;
  while (!query.empty()) {
    std::string_view pair = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), pair.size() + 1));
    auto equals = pair.find('=');
    std::string_view key = pair.substr(0, equals);
    std::string_view value = equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1);
    auto integer = [&](std::int64_t& out) {
      auto parsed = std::from_chars(value.data(), value.data() + value.size(), out);
      return parsed.ec == std::errc() && parsed.ptr == value.data() + value.size() && out >= 0;
    };
    std::int64_t number = 0;
    if (key == "model") {
      filter.model = std::string(value);
    } else if (key == "since_ms" && integer(number)) {
      filter.since_ms = number;
    } else if (key == "limit" && integer(number)) {
      filter.limit = static_cast<std::size_t>(number);
    } else {
      return error_response(400, "the audit log takes model=NAME, since_ms=UNIX_MS and limit=N (non-negative), not '" +
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
HttpResponse approval(registry::Registry& store, std::string_view method, const std::string& model,
                      std::string_view version_text, std::string_view body) {
  std::int64_t version = 0;
  auto parsed = std::from_chars(version_text.data(), version_text.data() + version_text.size(), version);
  if (parsed.ec != std::errc() || parsed.ptr != version_text.data() + version_text.size() || version < 1) {
    return error_response(400, "model version '" + std::string(version_text) + "' is not a positive integer");
  }
  Status changed;
  if (method == "DELETE") {
    changed = store.models().revoke_approval(model, version);
  } else {
    JsonBody request;
    if (auto valid = request.parse(body, R"({"note": "AUC +0.01 on the November holdout"})", {"note"}); !valid.ok()) {
      return error_response(valid);
    }
    auto note = request.text("note", "text saying why the version is approved");
    if (!note.ok()) return error_response(note.status());
    changed = store.models().approve(model, version, *note);
  }
  if (!changed.ok()) return error_response(changed);
  auto record = store.models().resolve(model, {version, ""});
  if (!record.ok()) return error_response(record.status());
  JsonWriter json;
  json.begin_object().key("model").value(model).key("version").value(version).key("approval");
  if (record->approval) {
    json.begin_object().key("approver").value(record->approval->approver).key("note").value(record->approval->note);
    json.key("approved_ms").value(record->approval->approved_ms).end_object();
  } else {
    json.null();
  }
  json.end_object();
  return json_response(200, json.take());
}

}  // namespace

HttpResponse Service::State::handle_management_route(std::string_view method,
                                                     const std::vector<std::string_view>& segments,
                                                     std::string_view query, std::string_view body,
                                                     const std::string& token_name) {
  // segments: api endpoints [NAME [rollout|deploy|promote|rollback|settings]]
  //           api models NAME versions V approval
  //           api audit
  constexpr std::string_view kRoutes =
      "no such management route; the API has /api/endpoints[/NAME[/rollout|deploy|promote|rollback|settings]], "
      "/api/models/NAME/versions/V/approval and /api/audit";
  std::string_view area = segments.size() >= 2 ? segments[1] : std::string_view();
  bool approval_route =
      area == "models" && segments.size() == 6 && segments[3] == "versions" && segments[5] == "approval";
  bool endpoint_route = area == "endpoints" && segments.size() <= 4;
  if (!(approval_route || endpoint_route || (area == "audit" && segments.size() == 2))) {
    return error_response(404, kRoutes);
  }
  if (area == "audit") {
    if (method != "GET") return method_not_allowed("GET");
    return audit(registry, query);
  }
  std::string_view action = endpoint_route && segments.size() == 4 ? segments[3] : std::string_view();
  if (endpoint_route && (segments.size() <= 3 || action == "rollout")) {
    if (method != "GET") return method_not_allowed("GET");
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
    if (action == "rollout") {
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
  if (approval_route && method != "POST" && method != "DELETE") return method_not_allowed("POST, DELETE");
  if (endpoint_route && method != "POST") return method_not_allowed("POST");
  if (endpoint_route && action != "deploy" && action != "promote" && action != "rollback" && action != "settings") {
    return error_response(404, "no such endpoint action; use rollout, deploy, promote, rollback or settings");
  }
  // The server reads its workspace read-only; a change opens it for writing just for the call
  // (a workspace on a read-only disk says so here).
  auto writable = registry::Registry::open(registry.home(), false);
  if (!writable.ok()) return error_response(writable.status());
  registry::Registry& store = **writable;
  if (!token_name.empty()) store.set_actor("token:" + token_name);
  if (approval_route) return approval(store, method, std::string(segments[2]), segments[4], body);
  std::string name(segments[2]);
  HttpResponse response;
  if (action == "deploy") {
    response = deploy(store, name, body);
  } else if (action == "settings") {
    response = change_endpoint_settings(store, name, body);
  } else {
    auto changed = action == "promote" ? store.endpoints().promote(name) : store.endpoints().rollback(name);
    response = changed.ok() ? endpoint_response(*changed) : error_response(changed.status());
  }
  if (response.status < 400) {
    // This server follows at once; others within their refresh period.
    std::lock_guard lock(endpoints_mutex);
    endpoints_fetched = {};
  }
  return response;
}

}  // namespace slipway::serve
