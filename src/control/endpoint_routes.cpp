// /api/endpoints, approvals and the audit log: each route parses its JSON into the request of a
// pipeline operation, calls it and encodes the result. The operation applies every check (the
// gate, the constant fallback, approvals and who may change them), exactly as for the CLI.

#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kEndpointSchema =
    R"({"type":"object","required":["name","revision","routes","previous"],"properties":{"name":{"type":"string"},)"
    R"("revision":{"type":"integer"},"routes":{"type":"array","items":{"type":"object"}},)"
    R"("previous":{"type":"array","items":{"type":"object"}},"updated_by":{"type":"string"},)"
    R"("updated_ms":{"type":"integer"},"last_change":{"type":"string"},"owner":{"type":"string"},)"
    R"("require_approval":{"type":"boolean"},"fallback":{"type":"string"},"deadline_ms":{"type":"integer"},)"
    R"("slo":{"type":"string"},"shadow":{"type":["object","null"]},"damage":{"type":"string"}}})";
constexpr std::string_view kDescriptionSchema =
    R"({"type":"object","properties":{"endpoint":{"type":"object"},"versions":{"type":"array","items":)"
    R"({"type":"object","properties":{"reference":{"type":"string"},"percent":{"type":"number"},)"
    R"("bundle_sha256":{"type":"string"},"run_id":{"type":"string"},"task":{"type":"string"},)"
    R"("inputs":{"type":"array","items":{"type":"string"}},"load_error":{"type":"string"},)"
    R"("version":{"type":"object"},"gates":{"type":"array"}}}},"rollout_state":{"type":"string"},)"
    R"("rollout_last_check":{"type":"string"},"rollback_command":{"type":"string"}}})";
constexpr std::string_view kRolloutSchema =
    R"({"type":"object","properties":{"endpoint":{"type":"string"},"canary":{"type":"string"},)"
    R"("stable":{"type":"string"},"steps":{"type":"array","items":{"type":"number"}},"step":{"type":"integer"},)"
    R"("state":{"type":"string","enum":["running","promoted","rolled_back","stopped"]}}})";
constexpr std::string_view kDeploySchema =
    R"({"type":"object","required":["model"],"additionalProperties":false,"properties":{)"
    R"("model":{"type":"string","description":"NAME@VERSION, NAME@ALIAS or NAME, pinned now"},)"
    R"("canary":{"type":"number","minimum":0.01,"maximum":99.99},)"
    R"("steps":{"type":"array","items":{"type":"number"},"maxItems":100},)"
    R"("interval_ms":{"type":"integer","minimum":1000,"maximum":86400000},)"
    R"("criteria":{"type":"string","examples":["max_p99_ratio=2,min_requests=100"]},)"
    R"("gate":{"type":"object","required":["data","metric","thresholds"],"additionalProperties":false,)"
    R"("properties":{"data":{"type":"string"},"metric":{"type":"string"},"thresholds":{"type":"string"},)"
    R"("slice":{"type":"string"}}}}})";
constexpr std::string_view kSettingsSchema =
    R"({"type":"object","additionalProperties":false,"properties":{"fallback":{"type":"string"},)"
    R"("deadline_ms":{"type":"integer","minimum":0,"maximum":3600000},"owner":{"type":"string","maxLength":256},)"
    R"("require_approval":{"type":"boolean"},"shadow":{"type":["object","null"],"additionalProperties":false,)"
    R"("properties":{"model":{"type":"string"},"percent":{"type":"number"}}}}})";
constexpr std::string_view kApprovalSchema =
    R"({"type":"object","required":["note"],"additionalProperties":false,)"
    R"("properties":{"note":{"type":"string","minLength":1,"maxLength":1000}}})";
constexpr std::string_view kApprovalAnswerSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"version":{"type":"integer"},)"
    R"("approval":{"type":["object","null"]}}})";
constexpr std::string_view kAuditSchema =
    R"({"type":"object","properties":{"entries":{"type":"array","items":{"type":"object","properties":{)"
    R"("id":{"type":"integer"},"time_ms":{"type":"integer"},"actor":{"type":"string"},)"
    R"("action":{"type":"string"},"detail":{"type":"string"}}}},"next_page_token":{"type":"string"}}})";
constexpr std::string_view kGateSchema =
    R"({"type":"object","required":["baseline","data","metric","thresholds"],"additionalProperties":false,)"
    R"("properties":{"baseline":{"type":"string"},"data":{"type":"string"},"metric":{"type":"string"},)"
    R"("thresholds":{"type":"string"},"slice":{"type":"string"}}})";
constexpr std::string_view kGateAnswerSchema =
    R"({"type":"object","properties":{"candidate":{"type":"string"},"baseline":{"type":"string"},)"
    R"("data":{"type":"string"},"passed":{"type":"boolean"},"report_sha256":{"type":"string"}}})";
constexpr std::string_view kEmptyBody = R"({"type":"object","additionalProperties":false})";

// "gate": {"data": FILE, "metric": "auc", "thresholds": "max_drop=0.01", "slice": COLUMN}, and
// with `baseline` (a gate of its own) "baseline": REFERENCE.
Result<pipeline::GateRequest> gate_request(simdjson::dom::object object, bool baseline = false) {
  // A gate of its own was checked whole as the body (JsonBody::parse); a deploy's is checked here.
  if (!baseline) {
    SLIPWAY_RETURN_IF_ERROR(check_fields(object, "'gate'", {"data", "metric", "thresholds", "slice"}));
  }
  pipeline::GateRequest gate;
  if (baseline) {
    SLIPWAY_ASSIGN_OR_RETURN(gate.baseline, JsonBody::text_of(object, "baseline", "the version to compare with"));
  }
  SLIPWAY_ASSIGN_OR_RETURN(gate.data_path,
                           JsonBody::text_of(object, "data", "a labelled CSV file in the workspace's data/ folder"));
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

Result<pipeline::DeployRequest> deploy_request(const std::string& endpoint, std::string_view body) {
  JsonBody request;
  SLIPWAY_RETURN_IF_ERROR(request.parse(body, R"({"model": "churn@4", "canary": 10})",
                                        {"model", "canary", "steps", "interval_ms", "criteria", "gate"}));
  pipeline::DeployRequest deploy;
  deploy.endpoint = endpoint;
  SLIPWAY_ASSIGN_OR_RETURN(deploy.reference, request.text("model", "a model reference such as \"churn@4\""));
  if (request.has("steps")) {
    if (request.has("canary")) return invalid_argument("'steps' starts a rollout; it does not go with 'canary'");
    SLIPWAY_ASSIGN_OR_RETURN(
        deploy.steps, request.numbers("steps", "an array of percentages ending at 100, such as [10, 50, 100]", 100));
    if (request.has("interval_ms")) {
      SLIPWAY_ASSIGN_OR_RETURN(
          deploy.interval_ms,
          request.integer("interval_ms", 1000, 86'400'000, "a whole number of milliseconds from 1,000 to a day"));
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
    SLIPWAY_ASSIGN_OR_RETURN(
        auto object,
        request.object("gate", R"({"data": "holdout.csv", "metric": "auc", "thresholds": "max_drop=0.01"})"));
    SLIPWAY_ASSIGN_OR_RETURN(deploy.gate, gate_request(object));
  }
  return deploy;
}

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
    SLIPWAY_ASSIGN_OR_RETURN(
        settings.settings.deadline_ms,
        request.integer("deadline_ms", 0, 3'600'000, "a whole number of milliseconds from 0 (none) to an hour"));
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

HttpResponse list_endpoints(ApiCall& call) {
  auto listed = call.registry->endpoints().list();
  if (!listed.ok()) return error_response(listed.status());
  JsonWriter json;
  json.begin_array();
  for (const auto& endpoint : *listed) registry::write_endpoint_json(json, endpoint);
  json.end_array();
  return json_answer(json);
}

HttpResponse get_endpoint(ApiCall& call) {
  const std::string& name = call.path_parameter("endpoint");
  auto found = call.registry->endpoints().get(name);
  if (!found.ok()) return error_response(found.status());
  if (!found->has_value()) return error_response(404, "no endpoint named '" + name + "'");
  return endpoint_answer(**found);
}

HttpResponse describe(ApiCall& call) {
  auto described = pipeline::describe_endpoint(*call.registry, call.path_parameter("endpoint"));
  if (!described.ok()) return error_response(described.status());
  JsonWriter json;
  pipeline::write_endpoint_description_json(json, *described);
  return json_answer(json);
}

HttpResponse get_rollout(ApiCall& call) {
  const std::string& name = call.path_parameter("endpoint");
  auto rollout = call.registry->endpoints().rollout(name);
  if (!rollout.ok()) return error_response(rollout.status());
  if (!rollout->has_value()) return error_response(404, "endpoint '" + name + "' has had no rollout");
  JsonWriter json;
  registry::write_rollout_json(json, **rollout);
  return json_answer(json);
}

HttpResponse deploy(ApiCall& call) {
  auto request = deploy_request(call.path_parameter("endpoint"), call.http.body);
  if (!request.ok()) return error_response(request.status());
  if (request->gate) {
    auto placed = client_named_file(call.registry->home() + "/data", request->gate->data_path, "the gate's 'data'",
                                    "holdout.csv");
    if (!placed.ok()) return error_response(placed.status());
    request->gate->data_path = std::move(*placed);
  }
  auto outcome = pipeline::deploy(*call.registry, *request, call.caller);
  if (!outcome.ok()) return error_response(outcome.status());
  if (!outcome->rollout) return endpoint_answer(outcome->endpoint);
  JsonWriter json;
  registry::write_rollout_json(json, *outcome->rollout);
  return json_answer(json);
}

HttpResponse change_settings(ApiCall& call) {
  auto request = settings_request(call.http.body);
  if (!request.ok()) return error_response(request.status());
  auto changed = pipeline::configure_endpoint(*call.registry, call.path_parameter("endpoint"), *request, call.caller);
  return changed.ok() ? endpoint_answer(*changed) : error_response(changed.status());
}

HttpResponse promote(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  pipeline::DeployRequest request;
  request.endpoint = call.path_parameter("endpoint");
  request.promote = true;
  auto outcome = pipeline::deploy(*call.registry, request, call.caller);
  return outcome.ok() ? endpoint_answer(outcome->endpoint) : error_response(outcome.status());
}

HttpResponse rollback(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  auto changed = pipeline::rollback(*call.registry, call.path_parameter("endpoint"), call.caller);
  return changed.ok() ? endpoint_answer(*changed) : error_response(changed.status());
}

Result<pipeline::ApprovalRequest> approval_request(ApiCall& call, bool revoke) {
  pipeline::ApprovalRequest request;
  request.model = call.path_parameter("model");
  SLIPWAY_ASSIGN_OR_RETURN(request.version, parse_integer(call.path_parameter("version"), "version", 1, INT64_MAX));
  request.revoke = revoke;
  if (!revoke) {
    JsonBody body;
    SLIPWAY_RETURN_IF_ERROR(body.parse(call.http.body, R"({"note": "AUC +0.01 on the November holdout"})", {"note"}));
    SLIPWAY_ASSIGN_OR_RETURN(request.note, body.text("note", "text saying why the version is approved"));
  }
  return request;
}

HttpResponse change_approval(ApiCall& call, bool revoke) {
  auto request = approval_request(call, revoke);
  if (!request.ok()) return error_response(request.status());
  auto record = pipeline::set_approval(*call.registry, *request, call.caller);
  if (!record.ok()) return error_response(record.status());
  JsonWriter json;
  json.begin_object().key("model").value(request->model).key("version").value(request->version).key("approval");
  if (record->approval) {
    json.begin_object().key("approver").value(record->approval->approver).key("note").value(record->approval->note);
    json.key("approved_ms").value(record->approval->approved_ms).end_object();
  } else {
    json.null();
  }
  json.end_object();
  return json_answer(json);
}

HttpResponse approve(ApiCall& call) { return change_approval(call, false); }
HttpResponse revoke(ApiCall& call) { return change_approval(call, true); }

const std::vector<ApiParameter> audit_query = {
    {"model", R"({"type":"string"})", "Only entries about this model"},
    {"since_ms", R"({"type":"integer","minimum":0})", "Only entries at or after this Unix time in milliseconds"},
    {"limit", R"({"type":"integer","minimum":1,"maximum":1000})", "Entries in a page (default 100)"},
    {"page_token", R"({"type":"string"})", "next_page_token of the page before"},
};

// GET /api/audit: the audit log, newest first, a page at a time.
HttpResponse audit(ApiCall& call) {
  auto query = parse_query(call.http.query, audit_query);
  if (!query.ok()) return error_response(query.status());
  registry::AuditFilter filter;
  filter.limit = 100;
  std::int64_t before_id = 0;
  for (const auto& [key, value] : *query) {
    if (key == "model") {
      filter.model = value;
      continue;
    }
    auto number = parse_integer(value, key, key == "since_ms" ? 0 : 1, key == "limit" ? 1000 : INT64_MAX);
    if (!number.ok()) {
      return error_response(key == "page_token"
                                ? invalid_argument("the page token is not one this server gave; start again without it")
                                : number.status());
    }
    if (key == "since_ms") filter.since_ms = *number;
    if (key == "limit") filter.limit = static_cast<std::size_t>(*number);
    if (key == "page_token") before_id = *number;
  }
  filter.newest_first = true;
  filter.before_id = before_id;
  std::size_t page_size = filter.limit;
  filter.limit = page_size + 1;  // one more says whether another page follows
  auto entries = call.registry->audit().query(filter);
  if (!entries.ok()) return error_response(entries.status());
  JsonWriter json;
  json.begin_object().key("entries").begin_array();
  for (std::size_t index = 0; index < entries->size() && index < page_size; ++index) {
    const auto& entry = (*entries)[index];
    json.begin_object().key("id").value(entry.id).key("time_ms").value(entry.time_ms).key("actor").value(entry.actor);
    json.key("action").value(entry.action).key("detail").value(entry.detail).end_object();
  }
  json.end_array();
  if (entries->size() > page_size) json.key("next_page_token").value(std::to_string((*entries)[page_size - 1].id));
  json.end_object();
  return json_answer(json);
}

// POST /api/models/{model}/versions/{version}/gate: the candidate against a baseline on rows of
// the workspace's data/ folder, recorded with the candidate (slipway gate).
HttpResponse gate(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body,
                               R"({"baseline": "churn@3", "data": "holdout.csv", "metric": "auc", )"
                               R"("thresholds": "max_drop=0.01"})",
                               {"baseline", "data", "metric", "thresholds", "slice"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  auto request = gate_request(body.fields(), true);
  if (!request.ok()) return error_response(request.status());
  auto version = parse_integer(call.path_parameter("version"), "version", 1, INT64_MAX);
  if (!version.ok()) return error_response(version.status());
  request->candidate = call.path_parameter("model") + "@" + std::to_string(*version);
  std::string data = request->data_path;
  for (const std::string* reference : {&request->candidate, &request->baseline}) {
    if (auto parsed = registry::parse_model_reference(*reference); !parsed.ok()) return error_response(parsed.status());
    if (pipeline::names_bundle_file(*reference)) {
      return error_response(
          400, "a gate compares registered versions, not files such as '" + reference->substr(0, 64) + "'");
    }
  }
  auto placed = client_named_file(call.registry->home() + "/data", data, "'data'", "holdout.csv");
  if (!placed.ok()) return error_response(placed.status());
  request->data_path = std::move(*placed);
  auto outcome = pipeline::run_gate(call.registry, *request, call.caller);
  if (!outcome.ok()) return error_response(outcome.status());
  outcome->data_path = data;  // as the client named it, not where the server keeps it
  JsonWriter json;
  pipeline::write_gate_outcome_json(json, *outcome);
  return json_answer(json);
}

}  // namespace

void add_endpoint_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"POST",
                    "/api/models/{model}/versions/{version}/gate",
                    Role::kDeploy,
                    true,
                    "Gate the version against a baseline on a labelled file of the workspace's data/ folder; "
                    "the report is recorded with the version, passed or not (slipway gate --record)",
                    {},
                    kGateSchema,
                    kGateAnswerSchema,
                    gate});
  std::string_view endpoint_list = R"({"type":"array","items":{"type":"object"}})";
  routes.push_back(
      {"GET", "/api/endpoints", Role::kRead, false, "Every endpoint, by name", {}, "", endpoint_list, list_endpoints});
  routes.push_back(
      {"GET", "/api/endpoints/{endpoint}", Role::kRead, false, "One endpoint", {}, "", kEndpointSchema, get_endpoint});
  routes.push_back({"GET",
                    "/api/endpoints/{endpoint}/description",
                    Role::kRead,
                    false,
                    "What an on-call engineer needs: the versions served with their inputs, approvals and gates, the "
                    "rollout, how to roll back (slipway describe)",
                    {},
                    "",
                    kDescriptionSchema,
                    describe});
  routes.push_back({"GET",
                    "/api/endpoints/{endpoint}/rollout",
                    Role::kRead,
                    false,
                    "The endpoint's latest rollout (slipway rollout status)",
                    {},
                    "",
                    kRolloutSchema,
                    get_rollout});
  routes.push_back({"POST",
                    "/api/endpoints/{endpoint}/deploy",
                    Role::kDeploy,
                    true,
                    "Route the endpoint to a version: all traffic, a canary share, or a rollout in steps; gated "
                    "first when asked (slipway deploy)",
                    {},
                    kDeploySchema,
                    kEndpointSchema,
                    deploy});
  routes.push_back({"POST",
                    "/api/endpoints/{endpoint}/promote",
                    Role::kDeploy,
                    true,
                    "The canary takes all traffic (slipway deploy --promote)",
                    {},
                    kEmptyBody,
                    kEndpointSchema,
                    promote});
  routes.push_back({"POST",
                    "/api/endpoints/{endpoint}/rollback",
                    Role::kDeploy,
                    true,
                    "Back to the routes the last change replaced (slipway rollback)",
                    {},
                    kEmptyBody,
                    kEndpointSchema,
                    rollback});
  routes.push_back({"POST",
                    "/api/endpoints/{endpoint}/settings",
                    Role::kDeploy,
                    true,
                    "Fallback, deadline, owner, approval requirement (lifting it: admin) and shadow, all or none",
                    {},
                    kSettingsSchema,
                    kEndpointSchema,
                    change_settings});
  routes.push_back({"POST",
                    "/api/models/{model}/versions/{version}/approval",
                    Role::kAdmin,
                    true,
                    "Approve a version, with a note (slipway approve)",
                    {},
                    kApprovalSchema,
                    kApprovalAnswerSchema,
                    approve});
  routes.push_back({"DELETE",
                    "/api/models/{model}/versions/{version}/approval",
                    Role::kAdmin,
                    true,
                    "Withdraw a version's approval (slipway approve --revoke)",
                    {},
                    "",
                    kApprovalAnswerSchema,
                    revoke});
  routes.push_back({"GET", "/api/audit", Role::kRead, false,
                    "The audit log, newest first, a page at a time (slipway audit)", audit_query, "", kAuditSchema,
                    audit});
}

}  // namespace slipway::control
