// The OpenAPI 3.1 document (GET /openapi.json), generated from the route declarations: the
// management API's (api.h), the serving protocol's (serve::protocol_routes) and the OpenAI
// protocol's (serve::OpenAiApi::routes). Nothing here is written beside the routes by hand: a
// route added to a table is documented, with its role, parameters and body.
#include <set>

#include "control/api.h"

namespace slipway::control {
namespace {

constexpr std::string_view kErrorSchema =
    R"({"type":"object","required":["error"],"properties":{"error":{"type":"string"}}})";
// OpenAI's error shape, which the /v1 routes answer with.
constexpr std::string_view kOpenAiErrorSchema =
    R"({"type":"object","required":["error"],"properties":{"error":{"type":"object","properties":{)"
    R"("message":{"type":"string"},"type":{"type":"string"},"param":{"type":["string","null"]},)"
    R"("code":{"type":["string","null"]}}}}})";

// "get_api_endpoints_endpoint_deploy" from GET /api/endpoints/{endpoint}/deploy: unique, since a
// method and a path name one route.
std::string operation_id(std::string_view method, std::string_view path) {
  std::string id;
  for (char c : method) id += static_cast<char>(c - 'A' + 'a');
  for (char c : path) {
    bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (word) {
      id += c;
    } else if (!id.empty() && id.back() != '_') {
      id += '_';
    }
  }
  while (!id.empty() && id.back() == '_') id.pop_back();
  return id;
}

std::vector<std::string> path_parameters(std::string_view path) {
  std::vector<std::string> names;
  for (auto open = path.find('{'); open != std::string_view::npos; open = path.find('{', open + 1)) {
    auto close = path.find('}', open);
    names.emplace_back(path.substr(open + 1, close - open - 1));
  }
  return names;
}

std::string lower(std::string_view method) {
  std::string text(method);
  for (char& c : text) c = static_cast<char>(c - 'A' + 'a');
  return text;
}

// One operation. `route` may be null for a protocol route (no query, no declared body).
void write_operation(JsonWriter& json, std::string_view method, std::string_view path, serve::Role role,
                     std::string_view summary, std::string_view tag, const ApiRoute* route,
                     std::string_view error_schema) {
  json.key(lower(method)).begin_object();
  json.key("operationId").value(operation_id(method, path)).key("summary").value(summary);
  json.key("tags").begin_array().value(tag).end_array();
  // The role a token needs under --auth (slipway serve --auth); without --auth every route is open.
  json.key("x-slipway-role").value(serve::role_name(role));
  json.key("security").begin_array();
  if (role != serve::Role::kOpen) json.begin_object().key("bearer").begin_array().end_array().end_object();
  json.end_array();
  json.key("parameters").begin_array();
  for (const auto& name : path_parameters(path)) {
    json.begin_object().key("name").value(name).key("in").value("path").key("required").value(true);
    json.key("schema").begin_object().key("type").value("string").end_object().end_object();
  }
  if (route != nullptr) {
    for (const auto& parameter : route->query) {
      json.begin_object().key("name").value(parameter.name).key("in").value("query").key("required").value(false);
      json.key("description").value(parameter.description).key("schema").raw(parameter.schema).end_object();
    }
  }
  json.end_array();
  std::string_view request = route != nullptr ? route->request_schema : std::string_view();
  if (route == nullptr && method == "POST") request = R"({"type":"object"})";
  if (!request.empty()) {
    json.key("requestBody").begin_object().key("required").value(request == "binary").key("content").begin_object();
    if (request == "binary") {
      json.key("application/octet-stream")
          .begin_object()
          .key("schema")
          .raw(R"({"contentMediaType":"application/octet-stream"})");
    } else {
      json.key("application/json").begin_object().key("schema").raw(request);
    }
    json.end_object().end_object().end_object();
  }
  json.key("responses").begin_object();
  std::string_view answer = route != nullptr ? route->response_schema : std::string_view(R"({"type":"object"})");
  bool text = path == "/metrics";
  bool accepted = route != nullptr && route->accepts;
  json.key(accepted ? "202" : "200")
      .begin_object()
      .key("description")
      .value(accepted ? "accepted: it goes on" : "the answer");
  json.key("content").begin_object();
  if (answer == "binary") {
    // A file (an export): its bytes, or a JSON document for the formats that are JSON.
    json.key("application/octet-stream").begin_object().key("schema");
    json.raw(R"({"contentMediaType":"application/octet-stream"})").end_object();
    json.key("application/json").begin_object().key("schema").raw(R"({"type":"object"})").end_object();
  } else {
    json.key(text ? "text/plain" : "application/json").begin_object().key("schema");
    json.raw(text ? std::string_view(R"({"type":"string"})") : answer).end_object();
  }
  json.end_object().end_object();
  if (accepted) {
    json.key("200").begin_object().key("description").value("answered at once: nothing to start, or a retry");
    json.key("content").begin_object().key("application/json").begin_object().key("schema").raw(answer);
    json.end_object().end_object().end_object();
  }
  if (route != nullptr && route->creates) {
    json.key("201").begin_object().key("description").value("created").key("content").begin_object();
    json.key("application/json").begin_object().key("schema").raw(answer).end_object().end_object().end_object();
  }
  for (std::string_view range : {"4XX", "5XX"}) {
    json.key(range).begin_object().key("description").value(range == "4XX" ? "refused, with the reason" : "failed");
    json.key("content").begin_object().key("application/json").begin_object().key("schema").raw(error_schema);
    json.end_object().end_object().end_object();
  }
  json.end_object().end_object();
}

}  // namespace

std::string openapi_document() {
  struct Operation {
    std::string_view method, path;
    serve::Role role;
    std::string_view summary, tag;
    const ApiRoute* route;
    std::string_view error_schema;
  };
  std::vector<Operation> operations;
  for (const auto& route : api_routes()) {
    std::string_view tag = route.path == "/openapi.json" ? "documentation" : "management";
    operations.push_back({route.method, route.path, route.role, route.summary, tag, &route, kErrorSchema});
  }
  for (const auto& route : serve::protocol_routes()) {
    std::string_view tag = route.path == "/metrics" ? "metrics" : "inference (KServe v2)";
    operations.push_back({route.method, route.path, route.role, route.summary, tag, nullptr, kErrorSchema});
  }
  for (const auto& route : serve::OpenAiApi::routes()) {
    operations.push_back(
        {route.method, route.path, route.role, route.summary, "LLMs (OpenAI)", nullptr, kOpenAiErrorSchema});
  }
  // Paths in their declared order; a path's methods together.
  std::vector<std::string_view> paths;
  std::set<std::string_view> seen;
  for (const auto& operation : operations) {
    if (seen.insert(operation.path).second) paths.push_back(operation.path);
  }
  JsonWriter json;
  json.begin_object().key("openapi").value("3.1.0");
  json.key("info").begin_object().key("title").value("Slipway").key("version").value(slipway_version());
  json.key("description")
      .value(
          "Slipway's HTTP API: the management API (/api), KServe v2 inference (/v2), the OpenAI API for "
          "LLMs (/v1) and Prometheus metrics. Under `slipway serve --auth` each operation needs a bearer "
          "token whose role is at least its x-slipway-role (predict < read < deploy < admin).");
  json.end_object();
  json.key("paths").begin_object();
  for (std::string_view path : paths) {
    json.key(path).begin_object();
    for (const auto& operation : operations) {
      if (operation.path != path) continue;
      write_operation(json, operation.method, operation.path, operation.role, operation.summary, operation.tag,
                      operation.route, operation.error_schema);
    }
    json.end_object();
  }
  json.end_object();
  json.key("components").begin_object().key("securitySchemes").begin_object().key("bearer").begin_object();
  json.key("type").value("http").key("scheme").value("bearer");
  json.key("description").value("A token from `slipway token create NAME --role ROLE`");
  json.end_object().end_object().end_object();
  json.end_object();
  return json.take();
}

}  // namespace slipway::control
