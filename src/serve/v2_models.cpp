// One model's routes: metadata, readiness, inference, statistics and configuration.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "serve/service_state.h"

namespace slipway::serve {
namespace {

// Shape [-1], or [-1, columns] for a per-class output.
void write_tensor_metadata(JsonWriter& json, std::string_view name, std::string_view datatype,
                           std::size_t columns = 1) {
  json.begin_object().key("name").value(name).key("datatype").value(datatype);
  json.key("shape").begin_array().value(-1);
  if (columns > 1) json.value(static_cast<std::uint64_t>(columns));
  json.end_array();
}

}  // namespace

void write_tensors_metadata(JsonWriter& json, const model::Bundle& bundle) {
  json.key("inputs").begin_array();
  for (const auto& feature : bundle.preprocessor().features()) {
    write_tensor_metadata(json, feature.name, feature.type == data::ColumnType::kNumeric ? "FP32" : "BYTES");
    json.end_object();
  }
  json.end_array();
  json.key("outputs").begin_array();
  const auto& class_labels = bundle.manifest().class_labels;
  bool multiclass = bundle.task() == model::Task::kMulticlassClassification;
  for (const auto& output : outputs_of(bundle)) {
    bool per_class = output.datatype == "FP32" && multiclass;
    write_tensor_metadata(json, output.name, output.datatype, per_class ? bundle.model().output_count() : 1);
    if (bundle.task() != model::Task::kRegression) {
      // Clients need the class order of the probability columns (multiclass) and which class a
      // binary probability is for.
      json.key("parameters").begin_object().key("class_labels").begin_array();
      for (const auto& label : class_labels) json.value(label);
      json.end_array();
      if (!multiclass && output.datatype == "FP32" && class_labels.size() == 2) {
        json.key("positive_class").value(class_labels[1]);
      }
      json.end_object();
    }
    json.end_object();
  }
  json.end_array();
}

namespace {

std::string model_metadata(const Servable& servable, bool single_version) {
  const LoadedModel& loaded = *servable.model;
  const model::Bundle& bundle = *loaded.bundle;
  JsonWriter json;
  json.begin_object();
  json.key("name").value(loaded.name);
  json.key("versions").begin_array();
  if (single_version) {
    json.value(loaded.version_text);
  } else {
    for (auto version : *servable.versions) json.value(std::to_string(version));
  }
  json.end_array();
  json.key("platform").value("slipway_" + std::string(bundle.model().family()));
  write_tensors_metadata(json, bundle);
  json.key("parameters").begin_object();
  json.key("task").value(model::task_name(bundle.task()));
  json.key("target").value(bundle.manifest().target);
  json.key("version").value(loaded.version_text);
  json.end_object();
  json.end_object();
  return json.take();
}

}  // namespace

void Service::State::handle_model_route(std::string_view method, const std::vector<std::string_view>& segments,
                                        std::string_view body, const RequestHeaders& headers, std::string& metric_model,
                                        std::string& metric_version, const Finish& finish) {
  auto answer = [&](HttpResponse response) { finish(std::move(response), 0); };
  // segments: v2 models NAME [versions V] [ready|infer|stats|config]
  std::string name(segments[2]);
  std::size_t next = 3;
  std::optional<std::int64_t> version;
  if (segments.size() > next && segments[next] == "versions") {
    if (segments.size() <= next + 1) return answer(error_response(404, "the path needs a version after 'versions/'"));
    std::string_view text = segments[next + 1];
    std::int64_t number = 0;
    auto parsed = std::from_chars(text.data(), text.data() + text.size(), number);
    if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size() || number < 1) {
      return answer(error_response(400, "model version '" + std::string(text) + "' is not a positive integer"));
    }
    version = number;
    next += 2;
  }
  std::string_view action = segments.size() > next ? segments[next] : std::string_view{};
  if (segments.size() > next + 1 ||
      (!action.empty() && action != "ready" && action != "infer" && action != "stats" && action != "config")) {
    return answer(error_response(404, "no such model route"));
  }
  std::string_view wanted_method = action == "infer" ? "POST" : "GET";
  if (method != wanted_method) return answer(method_not_allowed(wanted_method));
  if (action == "stats") {
    return answer(json_response(200, metrics.stats_json(name, version ? std::to_string(*version) : "")));
  }
  auto ready_answer = [&](bool ready) {
    JsonWriter json;
    json.begin_object().key("name").value(name).key("ready").value(ready).end_object();
    return answer(json_response(200, json.take()));
  };
  // An endpoint answers its name's unversioned routes (a model of the same name keeps its
  // versioned ones): infer by the request's route, the rest by the main route.
  std::string model_name = name;
  std::string route_reference;
  std::shared_ptr<const registry::Endpoint> endpoint = version ? nullptr : endpoint_named(name);
  if (endpoint != nullptr) {
    const registry::EndpointRoute& route =
        action == "infer" ? pick_route(*endpoint, headers.route_key) : main_route(*endpoint);
    model_name = route.model;
    version = route.version;
    route_reference = route.reference();
  }
  auto servable = manager.acquire(model_name, version);
  if (!servable.ok() && endpoint != nullptr && action == "infer") {
    // A route that cannot serve (a failed load, over the memory budget) fails the request like a
    // model error: the analysis sees it, and the fallback answers.
    metrics.record_endpoint(name, route_reference);
    rollouts->record(name, route_reference, true, 0.0, {});
  }
  if (!servable.ok() && endpoint != nullptr && action == "infer" && endpoint->fallback != "none") {
    metric_model = model_name;
    metric_version = std::to_string(*version);
    HttpResponse failure = error_response(servable.status());
    failure.headers.emplace_back("X-Slipway-Version", route_reference);
    return fall_back(endpoint, route_reference, ServerMetrics::FallbackReason::kError,
                     std::make_shared<KeptRequest>(body, headers), std::move(failure), finish);
  }
  if (!servable.ok()) {
    // Only models that exist become labels (a version that does not exist is NotFound).
    bool known = manager.knows(model_name) && servable.status().code() != StatusCode::kNotFound;
    if (known) {
      metric_model = model_name;
      metric_version = version ? std::to_string(*version) : "";
      // A model that exists but cannot serve now (unloaded, over the memory budget, a failed
      // load) is not ready: that is an answer, not an error.
      if (action == "ready") return ready_answer(false);
    }
    return answer(error_response(servable.status()));
  }
  metric_model = model_name;
  metric_version = servable->model->version_text;
  if (action == "ready") return ready_answer(true);
  if (action == "infer") {
    Finish logged = logging(*servable->model, endpoint != nullptr ? name : std::string(), body, headers, finish);
    if (endpoint != nullptr) return infer_endpoint(endpoint, *servable, body, headers, logged);
    return infer(*servable, body, headers, logged);
  }
  if (action == "config") return answer(json_response(200, config_json(*servable->model)));
  answer(json_response(200, model_metadata(*servable, version.has_value())));
}

namespace {

// A logged body above this is recorded by its size alone: the log never holds a copy of a huge
// request (the request's own memory is bounded by the server; a second copy would not be).
constexpr std::size_t kMaxLoggedBody = std::size_t{1} << 20;
// A failed request may be anything: the first bytes are enough to see what was wrong.
constexpr std::size_t kMaxLoggedFailure = 4096;

// Bytes that may not be JSON (a request that failed), as a JSON string that always is.
std::string as_json_text(std::string_view bytes) {
  std::string printable(bytes.substr(0, kMaxLoggedFailure));
  for (char& c : printable) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) c = '?';
  }
  std::string out;
  append_json_string(out, printable);
  return out;
}

}  // namespace

Service::State::Finish Service::State::logging(const LoadedModel& loaded, const std::string& endpoint,
                                               std::string_view body, const RequestHeaders& headers,
                                               const Finish& finish) {
  double rate = loaded.config.request_log_rate;
  // Binary tensors are not logged: the log is JSON Lines a reader can take apart.
  if (rate <= 0 || !headers.inference_header_length.empty() || !sampled(rate * 100)) return finish;
  auto request = std::make_shared<std::string>(body.size() <= kMaxLoggedBody ? body : std::string_view());
  std::size_t request_bytes = body.size();
  std::int64_t started = monotonic_ns();
  return [this, request, request_bytes, started, model = loaded.name, version = loaded.version_text, endpoint, finish](
             HttpResponse response, std::size_t rows) {
    RequestLog::Record record;
    record.time_ms = unix_time_ms();
    record.latency_ms = static_cast<double>(monotonic_ns() - started) * 1e-6;
    record.model = model;
    record.version = version;
    record.endpoint = endpoint;
    record.status = response.status;
    bool degraded = false;
    for (const auto& [name, value] : response.headers) {
      // A fallback's answer is the answering version's, not the route's; a cached or constant
      // one is no model's, and is not logged as if it were.
      if (name == "X-Slipway-Version" && value.find('@') != std::string::npos) {
        record.model = value.substr(0, value.rfind('@'));
        record.version = value.substr(value.rfind('@') + 1);
      }
      degraded = degraded || name == "X-Slipway-Degraded";
    }
    bool answered_by_a_version = !degraded || record.model != model || record.version != version;
    if (response.status < 400 && request_bytes <= kMaxLoggedBody) {
      // Parsed, so JSON: its newlines are whitespace, and a log line must be one line.
      std::replace(request->begin(), request->end(), '\n', ' ');
      std::replace(request->begin(), request->end(), '\r', ' ');
      record.request = std::move(*request);
    } else if (response.status >= 400) {
      record.request = as_json_text(*request);
    }
    if (response.content_type == "application/json" && response.body.size() <= kMaxLoggedBody) {
      record.response = response.body;
    }
    finish(std::move(response), rows);
    // After the answer is on its way: the log is never on the latency path beyond this copy.
    if (answered_by_a_version) request_log.post(std::move(record));
  };
}

}  // namespace slipway::serve
