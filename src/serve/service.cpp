// The Service: routes a request to the v2 protocol's parts, and counts it in the metrics.
#include <algorithm>
#include <cctype>
#include <future>
#include <iterator>

#include "serve/service_state.h"

namespace slipway::serve {

HttpResponse json_response(int status, std::string body) { return {status, "application/json", std::move(body)}; }

HttpResponse error_response(int status, std::string_view message) {
  std::string body = "{\"error\":";
  append_json_string(body, message);
  body += "}";
  return json_response(status, std::move(body));
}

namespace {

int http_status_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return 503;
    case StatusCode::kResourceExhausted:
      return 429;
    default:
      return 500;
  }
}

std::string_view failure_reason_of(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return "invalid_request";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return "failed_precondition";
    case StatusCode::kPermissionDenied:
      return "forbidden";
    case StatusCode::kDataLoss:
      return "data_loss";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kResourceExhausted:
      return "queue_full";
    case StatusCode::kDeadlineExceeded:
      return "timeout";
    default:
      return "internal";
  }
}

}  // namespace

std::string without_server_paths(std::string_view message) {
  // Slipway names files quoted ("cannot open '/srv/...'"), after a colon ("...: /srv/x: not a
  // bundle") or after a word ("no request log in /srv/x"); such a path runs to the next quote,
  // space, comma or ": ". The server's own routes in sentences ("POST /v2/...") stay.
  static constexpr std::string_view kRoutes[] = {"/v1", "/v2", "/api", "/metrics", "/openapi.json"};
  std::string out;
  out.reserve(message.size());
  std::size_t at = 0;
  while (at < message.size()) {
    bool after_quote = at > 0 && (message[at - 1] == '\'' || message[at - 1] == '"');
    bool after_space = at > 0 && message[at - 1] == ' ';
    bool route = std::any_of(std::begin(kRoutes), std::end(kRoutes), [&](std::string_view prefix) {
      std::string_view rest = message.substr(at);
      if (!rest.starts_with(prefix) || rest.size() == prefix.size()) return rest.starts_with(prefix);
      char next = rest[prefix.size()];
      return next == '/' || !(std::isalnum(static_cast<unsigned char>(next)) || next == '_' || next == '-');
    });
    if (message[at] == '/' && (at == 0 || after_quote || after_space) && !route) {
      std::size_t end = std::min(message.find_first_of("'\" ,;)", at), message.find(": ", at));
      if (end == std::string_view::npos) end = message.size();
      out += "<server path>";
      at = end;
      continue;
    }
    out += message[at++];
  }
  return out;
}

HttpResponse error_response(const Status& status) {
  // Messages from the operating system name files in the server's workspace; clients get the
  // sentence without them (the server log keeps the whole one).
  if (status.code() == StatusCode::kIo || status.code() == StatusCode::kDataLoss ||
      status.code() == StatusCode::kInternal) {
    log_warn(status.message());
  }
  HttpResponse response = error_response(http_status_for(status), without_server_paths(status.message()));
  response.failure_reason = std::string(failure_reason_of(status));
  return response;
}

HttpResponse method_not_allowed(std::string_view allowed) {
  HttpResponse response = error_response(405, "use " + std::string(allowed) + " for this route");
  response.headers.emplace_back("Allow", std::string(allowed));
  return response;
}

std::vector<std::string_view> path_segments(std::string_view target) {
  auto query = target.find('?');
  if (query != std::string_view::npos) target = target.substr(0, query);
  std::vector<std::string_view> segments;
  while (!target.empty()) {
    auto slash = target.find('/');
    std::string_view segment = target.substr(0, slash);
    if (!segment.empty()) segments.push_back(segment);
    if (slash == std::string_view::npos) break;
    target.remove_prefix(slash + 1);
  }
  return segments;
}

Service::Service(registry::Registry& registry, const ServiceOptions& options)
    : state_(std::make_unique<State>(registry, options)) {
  State* state = state_.get();
  if (!options.configured_tokens.empty()) state->options.require_auth = true;
  state_->rollouts = std::make_unique<RolloutController>(registry, options.registry_refresh, [state] {
    // This server follows the rollout's change at once (a failed read keeps the old routes).
    std::lock_guard lock(state->endpoints_mutex);
    state->endpoints_fetched = {};
  });
}

Service::~Service() {
  // Queued requests are answered first (their callbacks record into the controller and the shadow
  // queue), then the controller's thread, which calls into the state, stops.
  state_->manager.stop_batching();
  state_->rollouts.reset();
}

bool Service::needs_worker(std::string_view target) {
  auto query = target.find('?');
  std::string_view path = target.substr(0, query);
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  // Management calls write to the registry.
  return ends_with("/infer") || ends_with("/load") || ends_with("/unload") || path.starts_with("/api/");
}

std::vector<std::string> Service::warm_up() {
  std::set<std::string> llms;
  if (state_->llm_names) llms = state_->llm_names();
  return state_->manager.load_all(llms);
}

std::optional<HttpResponse> Service::check_access(std::string_view target, std::string_view authorization) {
  return state_->authorize(role_required(path_segments(target)), authorization, nullptr);
}

void Service::set_llms(std::function<std::string()> metrics, std::function<std::set<std::string>()> names) {
  state_->extra_metrics = std::move(metrics);
  state_->llm_names = std::move(names);
}

std::string Service::metrics_text() const {
  return state_->metrics.prometheus_text() + state_->request_log.metrics_text() + state_->alert_metrics() +
         (state_->extra_metrics ? state_->extra_metrics() : std::string());
}

std::string Service::State::alert_metrics() {
  std::lock_guard lock(alerts_mutex);
  auto now = std::chrono::steady_clock::now();
  if (now - alerts_fetched >= options.registry_refresh) {
    auto listed = registry.models().alerts();
    if (listed.ok()) alerts = std::move(listed).value();  // a failed read keeps the last ones
    alerts_fetched = now;
  }
  if (alerts.empty()) return "";
  std::string out =
      "# HELP slipway_monitor_alert Monitoring alerts as slipway monitor --alert last judged them: 1 firing, 0 not.\n"
      "# TYPE slipway_monitor_alert gauge\n";
  std::string values =
      "# HELP slipway_monitor_value The value each alert was judged on: a drift distance, or a metric.\n"
      "# TYPE slipway_monitor_value gauge\n";
  for (const auto& alert : alerts) {
    std::string labels = "{model=\"" + label_value(alert.model) + "\",subject=\"" + label_value(alert.subject) + "\"}";
    out += "slipway_monitor_alert" + labels + (alert.firing ? " 1\n" : " 0\n");
    if (std::isfinite(alert.value))
      values += "slipway_monitor_value" + labels + " " + format_config_number(alert.value) + "\n";
  }
  return out + values;
}

namespace {

// The route a path belongs to, for the per-route request counters: a fixed set of names, so no
// client can grow the metrics.
std::string_view route_name(const std::vector<std::string_view>& segments) {
  if (segments.size() == 1 && segments[0] == "metrics") return "metrics";
  if (segments.size() == 1 && segments[0] == "health") return "health";
  if (!segments.empty() && segments[0] == "api") return "management";
  if (segments.size() == 1 && segments[0] == "openapi.json") return "management";
  if (segments.empty() || segments[0] != "v2") return "other";
  if (segments.size() == 1) return "server_metadata";
  if (segments[1] == "health") return "health";
  if (segments[1] == "repository") return "repository";
  if (segments[1] != "models" || segments.size() < 3) return "other";
  if (segments.size() == 3 && segments[2] == "stats") return "stats";
  std::string_view last = segments.back();
  if (last == "infer") return "infer";
  if (last == "ready") return "model_ready";
  if (last == "config") return "model_config";
  if (last == "stats") return "model_stats";
  return "model_metadata";
}

std::string_view refusal_reason(http::Refusal refusal) {
  switch (refusal) {
    case http::Refusal::kOverloaded:
      return "server_overloaded";
    case http::Refusal::kClientClosed:
      return "client_closed";
    case http::Refusal::kNoRoute:
      return "not_found";
  }
  return "internal";
}

int refusal_status(http::Refusal refusal) {
  switch (refusal) {
    case http::Refusal::kOverloaded:
      return 429;
    case http::Refusal::kClientClosed:
      return 499;  // nginx's: the client closed the connection first
    case http::Refusal::kNoRoute:
      return 404;
  }
  return 500;
}

}  // namespace

std::string_view Service::State::metric_label(std::string_view name) const {
  return manager.knows(name) ? name : std::string_view("(unknown)");
}

void Service::record_refusal(std::string_view target, http::Refusal refusal) {
  auto segments = path_segments(target);
  std::string_view route = route_name(segments);
  int status = refusal_status(refusal);
  state_->metrics.record_route(route, status, 0.0);
  if (route != "infer") return;
  // The request never reached authorization: under auth its model name is not trusted as a label.
  std::string_view model =
      state_->options.require_auth ? std::string_view("(unknown)") : state_->metric_label(segments[2]);
  state_->metrics.record(model, "", status, 0.0, 0, false, refusal_reason(refusal));
}

void Service::set_serving_configs(ModelServingConfig defaults,
                                  std::map<std::string, std::map<std::string, std::string>> overrides) {
  state_->manager.set_serving_configs(std::move(defaults), std::move(overrides));
}

void Service::stop_batching() { state_->manager.stop_batching(); }

void Service::stop_deadlines() { state_->deadlines.stop(); }

HttpResponse Service::handle(std::string_view method, std::string_view target, std::string_view body,
                             const RequestHeaders& headers) {
  std::promise<HttpResponse> answered;
  auto response = answered.get_future();
  handle_async(method, target, body, headers, [&answered](HttpResponse done) { answered.set_value(std::move(done)); });
  return response.get();
}

void Service::handle_async(std::string_view method, std::string_view target, std::string_view body,
                           const RequestHeaders& headers, std::function<void(HttpResponse)> done) {
  std::int64_t started = monotonic_ns();
  auto segments = path_segments(target);
  std::string_view route = route_name(segments);
  State* state = state_.get();
  auto seconds_since_start = [started] { return static_cast<double>(monotonic_ns() - started) * 1e-9; };
  // Every route but inference is counted by route alone: probes must not skew inference rates.
  auto answer = [&](HttpResponse response) {
    state->metrics.record_route(route, response.status, seconds_since_start());
    done(std::move(response));
  };
  auto get_only = [&](auto make) { return method == "GET" ? make() : method_not_allowed("GET"); };

  std::string token_name;
  Role granted = Role::kAdmin;
  // Without auth every route is open: the route's role is not even looked up.
  Role required = state->options.require_auth ? role_required(segments) : Role::kOpen;
  if (auto refused = state->authorize(required, headers.authorization, &token_name, &granted)) {
    // Nothing from an unauthenticated request becomes a label.
    if (route == "infer") state->metrics.record("(unknown)", "", refused->status, 0.0, 0, false);
    return answer(std::move(*refused));
  }
  if (route == "metrics") {
    return answer(get_only([&] { return HttpResponse{200, "text/plain; version=0.0.4", metrics_text(), {}, {}}; }));
  }
  if (route == "server_metadata" && segments.size() == 1) {
    return answer(get_only([] {
      JsonWriter json;
      json.begin_object().key("name").value("slipway").key("version").value(slipway_version());
      json.key("extensions").begin_array();
      json.value("model_repository").value("statistics").value("model_configuration").value("binary_tensor_data");
      json.value("schedule_policy");
      json.end_array().end_object();
      return json_response(200, json.take());
    }));
  }
  if (route == "health" && segments.size() == 3 && (segments[2] == "live" || segments[2] == "ready")) {
    return answer(get_only([&] {
      JsonWriter json;
      json.begin_object().key(segments[2]).value(true).end_object();
      return json_response(200, json.take());
    }));
  }
  if (route == "health" && segments.size() == 1) {
    return answer(get_only([] { return json_response(200, R"({"status":"ok"})"); }));
  }
  if (route == "repository") return answer(state->handle_repository_route(method, segments, body));
  if (route == "management") {
    if (!state->options.management) return answer(error_response(404, "this server has no management API"));
    auto question = target.find('?');
    ManagementCall call{method,
                        segments,
                        question == std::string_view::npos ? std::string_view() : target.substr(question + 1),
                        body,
                        granted,
                        token_name,
                        headers.idempotency_key,
                        headers.idempotency_key_repeated};
    HttpResponse response = state->options.management(call);
    if (response.status < 400 && method != "GET") {
      // This server follows a change at once (a new endpoint route, a token created or revoked);
      // others within their refresh period.
      {
        std::lock_guard lock(state->endpoints_mutex);
        state->endpoints_fetched = {};
      }
      std::lock_guard lock(state->tokens_mutex);
      state->tokens_fetched = {};
    }
    return answer(std::move(response));
  }
  if (route == "stats") return answer(get_only([&] { return json_response(200, state->metrics.stats_json("", "")); }));
  if (segments.size() >= 3 && segments[0] == "v2" && segments[1] == "models") {
    // The labels are known once the route resolves (and only for models that exist); the
    // response may come later, from a batch executor.
    auto labels = std::make_shared<std::pair<std::string, std::string>>();
    bool inference = route == "infer";
    auto finish = [state, labels, route, seconds_since_start, inference, done = std::move(done)](HttpResponse response,
                                                                                                 std::size_t rows) {
      double seconds = seconds_since_start();
      state->metrics.record_route(route, response.status, seconds);
      if (inference) {
        const std::string& model = labels->first.empty() ? std::string("(unknown)") : labels->first;
        state->metrics.record(model, labels->second, response.status, seconds, rows, true, response.failure_reason);
      }
      done(std::move(response));
    };
    state->handle_model_route(method, segments, body, headers, labels->first, labels->second, finish);
    return;
  }
  answer(error_response(404, "no route for " + std::string(method) + " " + std::string(http::path_of(target))));
}

}  // namespace slipway::serve
