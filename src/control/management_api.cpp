// The management API's dispatcher (control.h): a call is matched against the declared routes
// (api.h), refused when the caller's role is below the route's, given the workspace opened as the
// route declares, and handed to the route's handler; plus the helpers the handlers share.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>

#include "control/api.h"

namespace slipway::control {

using serve::error_response;
using serve::HttpResponse;
using serve::json_response;

Result<std::string> existing_data_file(ApiCall& call, std::string_view relative, std::string_view what,
                                       std::string_view example) {
  std::string folder = call.registry->home() + "/data";
  SLIPWAY_ASSIGN_OR_RETURN(std::string path, client_named_file(folder, relative, what, example));
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return not_found("no file '" + std::string(relative) + "' in the workspace's data/ folder");
  }
  return path;
}

Status confine_spec_files(const std::string& folder, pipeline::TrainSpec& spec, bool data_required) {
  if (data_required || !spec.data.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(spec.data, client_named_file(folder, spec.data, "the spec's 'data'", "train.csv"));
  }
  if (!spec.test_data.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(spec.test_data,
                             client_named_file(folder, spec.test_data, "the spec's 'test'", "test.csv"));
  }
  if (!spec.init_model.empty() && pipeline::names_bundle_file(spec.init_model)) {
    return invalid_argument("the spec's 'init_model' names a registered model (NAME@VERSION), not a file");
  }
  return {};
}

bool is_run_id(std::string_view text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

Result<std::string> run_id_parameter(ApiCall& call) {
  const std::string& run_id = call.path_parameter("run_id");
  if (!is_run_id(run_id)) return invalid_argument("a run id is 32 lowercase hex digits");
  return run_id;
}

Result<pipeline::LoadedReference> registered_model(ApiCall& call, const std::string& reference) {
  if (pipeline::names_bundle_file(reference)) {
    return invalid_argument("'" + reference.substr(0, 64) +
                            "' must name a registered model (NAME@VERSION), not a file");
  }
  return pipeline::resolve_reference(call.registry, reference);
}

HttpResponse json_answer(JsonWriter& json) { return json_response(200, json.take()); }

HttpResponse endpoint_answer(const registry::Endpoint& endpoint) {
  JsonWriter json;
  registry::write_endpoint_json(json, endpoint);
  return json_answer(json);
}

Result<std::string> url_decoded(std::string_view text) {
  std::string decoded;
  decoded.reserve(text.size());
  for (std::size_t index = 0; index < text.size(); ++index) {
    if (text[index] == '+') {
      decoded += ' ';
    } else if (text[index] == '%') {
      unsigned code = 0;
      if (index + 2 >= text.size() ||
          std::from_chars(text.data() + index + 1, text.data() + index + 3, code, 16).ptr != text.data() + index + 3) {
        return invalid_argument("'" + std::string(text.substr(0, 64)) + "' has a '%' not followed by two hex digits");
      }
      decoded += static_cast<char>(code);
      index += 2;
    } else {
      decoded += text[index];
    }
  }
  return decoded;
}

Result<std::map<std::string, std::string, std::less<>>> parse_query(std::string_view query,
                                                                    const std::vector<ApiParameter>& declared) {
  std::map<std::string, std::string, std::less<>> values;
  while (!query.empty()) {
    std::string_view pair = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), pair.size() + 1));
    if (pair.empty()) continue;
    auto equals = pair.find('=');
    SLIPWAY_ASSIGN_OR_RETURN(std::string key, url_decoded(pair.substr(0, equals)));
    SLIPWAY_ASSIGN_OR_RETURN(
        std::string value,
        url_decoded(equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1)));
    bool known = std::any_of(declared.begin(), declared.end(),
                             [&key](const ApiParameter& parameter) { return parameter.name == key; });
    if (!known) {
      std::string names;
      for (const auto& parameter : declared) names += (names.empty() ? "" : ", ") + std::string(parameter.name);
      return invalid_argument("unknown query parameter '" + key.substr(0, 64) + "'; this route takes " +
                              (names.empty() ? std::string("none") : names));
    }
    if (!values.emplace(std::move(key), std::move(value)).second) {
      return invalid_argument("query parameter '" + std::string(pair.substr(0, equals)) + "' is given twice");
    }
  }
  return values;
}

Result<std::int64_t> parse_integer(std::string_view text, std::string_view name, std::int64_t least,
                                   std::int64_t most) {
  std::int64_t value = 0;
  auto parsed = std::from_chars(text.data(), text.data() + text.size(), value);
  if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size() || value < least || value > most) {
    return invalid_argument("'" + std::string(name) + "' must be a whole number from " + std::to_string(least) +
                            " to " + std::to_string(most) + ", not '" + std::string(text.substr(0, 32)) + "'");
  }
  return value;
}

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

Result<std::string> client_named_file(const std::string& folder, std::string_view relative, std::string_view what,
                                      std::string_view example) {
  bool valid = !relative.empty() && relative.size() <= 256 && relative.front() != '/';
  for (std::size_t start = 0; valid && start <= relative.size();) {
    std::size_t slash = std::min(relative.find('/', start), relative.size());
    std::string_view part = relative.substr(start, slash - start);
    valid = !part.empty() && part != "." && part != "..";
    start = slash + 1;
  }
  for (char c : relative) valid = valid && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f && c != '\\';
  if (!valid) {
    return invalid_argument(std::string(what) + " is a file in the workspace's " +
                            folder.substr(folder.rfind('/') + 1) +
                            "/ folder, named by a relative path without '..' "
                            "(such as \"" +
                            std::string(example) + "\"), not '" + std::string(relative.substr(0, 64)) + "'");
  }
  return folder + "/" + std::string(relative);
}

Status check_no_body(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return {};
  JsonBody request;
  return request.parse(body, "{}", {});
}

Status JsonBody::parse(std::string_view body, std::string_view example, std::initializer_list<std::string_view> known) {
  padded_ = simdjson::padded_string(body);
  if (parser_.parse(padded_).get(object_) != simdjson::SUCCESS) {
    return invalid_argument("the body must be a JSON object such as " + std::string(example));
  }
  return check_fields(object_, "the body", known);
}

bool JsonBody::has(std::string_view key) {
  simdjson::dom::element element;
  return object_[key].get(element) == simdjson::SUCCESS;
}

bool JsonBody::is_null(std::string_view key) {
  simdjson::dom::element element;
  return object_[key].get(element) == simdjson::SUCCESS && element.is_null();
}

Result<std::string> JsonBody::text_of(simdjson::dom::object object, std::string_view key, std::string_view what) {
  std::string_view value;
  if (object[key].get(value) != simdjson::SUCCESS) {
    return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
  }
  return std::string(value);
}

Result<std::string> JsonBody::text(std::string_view key, std::string_view what) { return text_of(object_, key, what); }

Result<double> JsonBody::number(std::string_view key, std::string_view what) {
  double value = 0.0;
  if (object_[key].get(value) != simdjson::SUCCESS || !std::isfinite(value)) {
    return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
  }
  return value;
}

Result<std::int64_t> JsonBody::integer(std::string_view key, double least, double most, std::string_view what) {
  auto value = number(key, what);
  if (!value.ok()) return value.status();
  if (*value != std::floor(*value) || *value < least || *value > most) {
    return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
  }
  return static_cast<std::int64_t>(*value);
}

Result<bool> JsonBody::boolean(std::string_view key) {
  bool value = false;
  if (object_[key].get(value) != simdjson::SUCCESS) {
    return invalid_argument("'" + std::string(key) + "' must be true or false");
  }
  return value;
}

Result<std::vector<double>> JsonBody::numbers(std::string_view key, std::string_view what, std::size_t max_count) {
  simdjson::dom::array array;
  if (object_[key].get(array) != simdjson::SUCCESS || array.size() > max_count) {
    return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
  }
  std::vector<double> values;
  for (auto item : array) {
    double value = 0.0;
    if (item.get(value) != simdjson::SUCCESS) {
      return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
    }
    values.push_back(value);
  }
  return values;
}

Result<simdjson::dom::object> JsonBody::object(std::string_view key, std::string_view what) {
  simdjson::dom::object value;
  if (object_[key].get(value) != simdjson::SUCCESS) {
    return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
  }
  return value;
}

Result<simdjson::dom::array> JsonBody::array(std::string_view key, std::string_view what) {
  simdjson::dom::array value;
  if (object_[key].get(value) != simdjson::SUCCESS) {
    return invalid_argument("'" + std::string(key) + "' must be " + std::string(what));
  }
  return value;
}

Result<std::map<std::string, std::string>> JsonBody::text_map(std::string_view key, std::size_t max_count) {
  std::string what = "an object of at most " + std::to_string(max_count) + " text values, such as {\"lr\": \"0.01\"}";
  SLIPWAY_ASSIGN_OR_RETURN(auto object, this->object(key, what));
  std::map<std::string, std::string> values;
  for (auto field : object) {
    std::string_view value;
    if (field.value.get(value) != simdjson::SUCCESS || values.size() >= max_count) {
      return invalid_argument("'" + std::string(key) + "' must be " + what);
    }
    if (!values.emplace(std::string(field.key), std::string(value)).second) {
      return invalid_argument("'" + std::string(key) + "' names '" + std::string(field.key.substr(0, 64)) + "' twice");
    }
  }
  return values;
}

namespace {

HttpResponse openapi(ApiCall&) { return serve::HttpResponse{200, "application/json", openapi_document(), {}, {}}; }

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> segments;
  while (!path.empty()) {
    if (path.front() == '/') {
      path.remove_prefix(1);
      continue;
    }
    auto slash = path.find('/');
    segments.push_back(path.substr(0, slash));
    path.remove_prefix(slash == std::string_view::npos ? path.size() : slash);
  }
  return segments;
}

// Whether `route` has the call's path; its {name} segments go to `parameters`.
bool matches(const ApiRoute& route, const std::vector<std::string_view>& segments,
             std::map<std::string, std::string, std::less<>>& parameters) {
  std::vector<std::string_view> pattern = split_path(route.path);
  if (pattern.size() != segments.size()) return false;
  std::map<std::string, std::string, std::less<>> found;
  for (std::size_t index = 0; index < pattern.size(); ++index) {
    std::string_view part = pattern[index];
    if (part.size() > 2 && part.front() == '{' && part.back() == '}') {
      auto decoded = url_decoded(segments[index]);
      // A name is one segment: an encoded '/' would let a name climb into a path (a bundle file
      // rather than a registered model), and no name holds a control character.
      if (!decoded.ok() || decoded->empty()) return false;
      if (std::any_of(decoded->begin(), decoded->end(),
                      [](char c) { return c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
        return false;
      }
      found.emplace(std::string(part.substr(1, part.size() - 2)), std::move(*decoded));
    } else if (part != segments[index]) {
      return false;
    }
  }
  parameters = std::move(found);
  return true;
}

// Calls the route's handler with the workspace opened as the route declares.
HttpResponse handle(const ApiRoute& route, ApiCall& call) {
  const std::string& home = call.server->options.home;
  // The server reads its workspace read-only; a change opens it for writing just for the call
  // (a workspace on a read-only disk says so here).
  auto registry = route.writes
                      ? registry::Registry::open(home, false)
                      : registry::Registry::open(home, registry::OpenOptions{.create = false, .read_only = true});
  if (!registry.ok()) return error_response(registry.status());
  call.registry = registry->get();
  return route.handle(call);
}

// 1 to 255 printable ASCII characters (a UUID, as clients send, fits).
Status check_idempotency_key(std::string_view key) {
  bool printable = key.size() <= IdempotencyCache::kMaxKeyBytes;
  for (char c : key) printable = printable && c >= 0x21 && c <= 0x7e;
  if (printable) return {};
  return invalid_argument("Idempotency-Key must be 1 to 255 printable ASCII characters without spaces, such as a UUID");
}

HttpResponse dispatch(ApiServer& server, const serve::ManagementCall& http) {
  const ApiRoute* route = nullptr;
  std::string allowed;
  std::map<std::string, std::string, std::less<>> parameters;
  for (const auto& candidate : api_routes()) {
    std::map<std::string, std::string, std::less<>> found;
    if (!matches(candidate, http.segments, found)) continue;
    allowed += (allowed.empty() ? "" : ", ") + std::string(candidate.method);
    if (candidate.method == http.method && route == nullptr) {
      route = &candidate;
      parameters = std::move(found);
    }
  }
  if (route == nullptr && allowed.empty()) {
    return error_response(404, "no such management route; GET /openapi.json lists every route");
  }
  if (route == nullptr) return serve::method_not_allowed(allowed);
  if (static_cast<int>(http.role) < static_cast<int>(route->role)) {
    return error_response(403, "the token's role '" + std::string(serve::role_name(http.role)) +
                                   "' may not do this; it needs the role '" +
                                   std::string(serve::role_name(route->role)) + "'");
  }
  ApiCall call{http, std::move(parameters), nullptr, {}, &server};
  if (!http.token_name.empty()) call.caller.actor = "token:" + http.token_name;
  call.caller.may_administer = http.role == serve::Role::kAdmin;
  if (route->handle == openapi) return route->handle(call);
  if (http.method == "GET") return handle(*route, call);
  if (http.idempotency_key_repeated) return error_response(400, "Idempotency-Key is sent more than once");
  if (http.idempotency_key.empty()) return handle(*route, call);
  if (auto valid = check_idempotency_key(http.idempotency_key); !valid.ok()) return error_response(valid);
  // Keys are the caller's own: another token's key never replays this one's answer.
  std::string key = http.token_name + '\n' + std::string(http.idempotency_key);
  std::string fingerprint(http.method);
  for (std::string_view segment : http.segments) fingerprint.append("/").append(segment);
  fingerprint.append("?").append(http.query).append(" ").append(sha256_hex(http.body));
  if (auto earlier = server.idempotency.begin(key, fingerprint)) return std::move(*earlier);
  // Finished whatever happens: a key left in flight would answer 409 to every retry.
  struct Finish {
    IdempotencyCache& cache;
    const std::string& key;
    HttpResponse answer = error_response(500, "the request failed");
    ~Finish() { cache.finish(key, answer); }
  } finish{server.idempotency, key};
  finish.answer = handle(*route, call);
  return finish.answer;
}

}  // namespace

const std::vector<ApiRoute>& api_routes() {
  static const std::vector<ApiRoute> kRoutes = [] {
    std::vector<ApiRoute> routes;
    add_endpoint_routes(routes);
    add_model_routes(routes);
    add_run_routes(routes);
    add_governance_routes(routes);
    add_monitoring_routes(routes);
    add_batch_routes(routes);
    add_training_routes(routes);
    add_workspace_routes(routes);
    add_evaluation_routes(routes);
    add_retraining_routes(routes);
    add_optimization_routes(routes);
    add_study_routes(routes);
    routes.push_back({"GET",
                      "/openapi.json",
                      serve::Role::kOpen,
                      false,
                      "This document: OpenAPI 3.1 for /api, /v2 and /v1",
                      {},
                      "",
                      R"({"type":"object"})",
                      openapi});
    return routes;
  }();
  return kRoutes;
}

serve::ManagementHandler management_api(ManagementOptions options) {
  auto server = std::make_shared<ApiServer>(std::move(options));
  return [server](const serve::ManagementCall& call) { return dispatch(*server, call); };
}

}  // namespace slipway::control
