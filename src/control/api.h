// The management API's routes, declared once (private to control): the dispatcher matches and
// authorizes a call with the declaration, and the OpenAPI document is generated from the same
// declarations, so a route cannot answer without being documented or be documented without
// answering (tests/control checks both against the running server).
#pragma once

#include <simdjson.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/control.h"
#include "slipway/pipeline.h"

namespace slipway::control {

struct ApiParameter {
  std::string_view name;
  std::string_view schema;  // JSON Schema, e.g. {"type":"integer","minimum":1}
  std::string_view description;
};

struct ApiCall;
using ApiHandler = serve::HttpResponse (*)(ApiCall& call);

struct ApiRoute {
  std::string_view method;  // GET, POST, PUT or DELETE
  std::string_view path;    // "/api/endpoints/{endpoint}/deploy": each {name} is one path segment
  serve::Role role;         // the least role that may call it
  bool writes = false;      // opens the workspace for writing (a read opens it read-only)
  std::string_view summary;
  std::vector<ApiParameter> query;  // optional query parameters
  // The body: a JSON Schema (the body is a JSON object), "binary" (raw bytes), or empty (none).
  std::string_view request_schema;
  std::string_view response_schema;  // of the 200 answer
  ApiHandler handle = nullptr;
  bool creates = false;  // answers 201 when it made something (200 when a retry found it made)
};

// A matched call, as a handler sees it.
struct ApiCall {
  const serve::ManagementCall& http;
  std::map<std::string, std::string, std::less<>> path;  // the {name} segments, percent-decoded
  registry::Registry* registry = nullptr;                // opened as the route declares
  pipeline::Caller caller;

  const std::string& path_parameter(std::string_view name) const { return path.find(name)->second; }
};

// Every route under /api, and /openapi.json.
const std::vector<ApiRoute>& api_routes();
// Each area's routes (endpoint_routes.cpp, model_routes.cpp, run_routes.cpp; tokens, labels,
// annotations and retrain policies in governance_routes.cpp).
void add_endpoint_routes(std::vector<ApiRoute>& routes);
void add_model_routes(std::vector<ApiRoute>& routes);
void add_run_routes(std::vector<ApiRoute>& routes);
void add_governance_routes(std::vector<ApiRoute>& routes);  // governance_routes.cpp

// The OpenAPI 3.1 document of /api (these declarations), /v2 (serve's) and /v1 (the OpenAI
// protocol's), as JSON (openapi.cpp).
std::string openapi_document();

// %XX and '+' decoded; InvalidArgument for a '%' without two hex digits.
Result<std::string> url_decoded(std::string_view text);

// The query string as decoded pairs, each key among those the route declares (a typo is an
// error, not a silent default), once.
Result<std::map<std::string, std::string, std::less<>>> parse_query(std::string_view query,
                                                                    const std::vector<ApiParameter>& declared);
// A whole number from `least` to `most`, named in the error.
Result<std::int64_t> parse_integer(std::string_view text, std::string_view name, std::int64_t least, std::int64_t most);

// A route that takes no body: nothing, or {}. Anything else is refused, so a client that meant to
// send options learns they were not read.
Status check_no_body(std::string_view body);

// JSON answers.
serve::HttpResponse json_answer(JsonWriter& json);
serve::HttpResponse endpoint_answer(const registry::Endpoint& endpoint);

// Every field of `object` is among `known`, once (a typo is an error, not a silent default; a
// repeated key is refused rather than one copy silently winning).
Status check_fields(simdjson::dom::object object, std::string_view where,
                    std::initializer_list<std::string_view> known);

// A request body: a JSON object whose fields are all among those the route takes.
class JsonBody {
 public:
  Status parse(std::string_view body, std::string_view example, std::initializer_list<std::string_view> known);
  bool has(std::string_view key);
  bool is_null(std::string_view key);
  Result<std::string> text(std::string_view key, std::string_view what);
  Result<double> number(std::string_view key, std::string_view what);
  // A whole number from `least` to `most`: 0.4 is refused, not rounded (which could remove a
  // deadline).
  Result<std::int64_t> integer(std::string_view key, double least, double most, std::string_view what);
  Result<bool> boolean(std::string_view key);
  Result<std::vector<double>> numbers(std::string_view key, std::string_view what, std::size_t max_count);
  Result<simdjson::dom::object> object(std::string_view key, std::string_view what);
  // {"KEY": "text", ...}: at most `max_count` entries.
  Result<std::map<std::string, std::string>> text_map(std::string_view key, std::size_t max_count);
  Result<simdjson::dom::array> array(std::string_view key, std::string_view what);

  static Result<std::string> text_of(simdjson::dom::object object, std::string_view key, std::string_view what);

 private:
  simdjson::dom::parser parser_;
  simdjson::padded_string padded_;
  simdjson::dom::object object_;
};

}  // namespace slipway::control
