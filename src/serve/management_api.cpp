// The management API under /api (the deploy role when auth is on): endpoints, as the CLI's
// deploy, rollback and endpoints commands change and list them.
#include <simdjson.h>

#include "serve/service_state.h"

namespace slipway::serve {
namespace {

HttpResponse endpoint_response(const registry::Endpoint& endpoint) {
  JsonWriter json;
  registry::write_endpoint_json(json, endpoint);
  return json_response(200, json.take());
}

// POST /api/endpoints/NAME/deploy {"model": "NAME@VERSION", "canary": PERCENT}: the CLI's deploy.
Result<registry::Endpoint> deploy(registry::Registry& registry, const std::string& endpoint, std::string_view body) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(body);
  simdjson::dom::object request;
  if (parser.parse(padded).get(request) != simdjson::SUCCESS) {
    return invalid_argument(R"(the body must be a JSON object such as {"model": "churn@4", "canary": 10})");
  }
  std::string_view reference;
  if (request["model"].get(reference) != simdjson::SUCCESS) {
    return invalid_argument("'model' must be a model reference such as \"churn@4\"");
  }
  std::optional<double> canary;
  simdjson::dom::element share;
  if (request["canary"].get(share) == simdjson::SUCCESS) {
    double percent = 0.0;
    if (share.get(percent) != simdjson::SUCCESS) return invalid_argument("'canary' must be a number (a percentage)");
    canary = percent;
  }
  for (auto field : request) {
    if (field.key != "model" && field.key != "canary") {
      return invalid_argument("unknown field '" + std::string(field.key) + "'; deploy takes 'model' and 'canary'");
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(std::string(reference)));
  SLIPWAY_ASSIGN_OR_RETURN(auto version, registry.models().resolve(parsed.first, parsed.second));
  return registry.endpoints().deploy(endpoint, version.model, version.version, canary);
}

}  // namespace

HttpResponse Service::State::handle_management_route(std::string_view method,
                                                     const std::vector<std::string_view>& segments,
                                                     std::string_view body, const std::string& token_name) {
  // segments: api endpoints [NAME [deploy|promote|rollback]]
  if (segments.size() < 2 || segments[1] != "endpoints" || segments.size() > 4) {
    return error_response(404, "no such management route; the API has /api/endpoints");
  }
  if (segments.size() <= 3) {
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
    auto found = registry.endpoints().get(name);
    if (!found.ok()) return error_response(found.status());
    if (!found->has_value()) return error_response(404, "no endpoint named '" + name + "'");
    return endpoint_response(**found);
  }
  if (method != "POST") return method_not_allowed("POST");
  std::string name(segments[2]);
  std::string_view action = segments[3];
  if (action != "deploy" && action != "promote" && action != "rollback") {
    return error_response(404, "no such endpoint action; use deploy, promote or rollback");
  }
  // The server reads its workspace read-only; a change opens it for writing just for the call
  // (a workspace on a read-only disk says so here).
  auto writable = registry::Registry::open(registry.home(), false);
  if (!writable.ok()) return error_response(writable.status());
  registry::Registry& store = **writable;
  if (!token_name.empty()) store.set_actor("token:" + token_name);
  Result<registry::Endpoint> changed = action == "deploy"    ? deploy(store, name, body)
                                       : action == "promote" ? store.endpoints().promote(name)
                                                             : store.endpoints().rollback(name);
  if (!changed.ok()) return error_response(changed.status());
  {
    // This server follows at once; others within their refresh period.
    std::lock_guard lock(endpoints_mutex);
    endpoints_fetched = {};
  }
  return endpoint_response(*changed);
}

}  // namespace slipway::serve
