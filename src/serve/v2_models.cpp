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

namespace {

using Finish = std::function<void(HttpResponse response, std::size_t rows)>;

// The completion of a request `failed_route` failed and `main_route` answered instead.
Finish degraded_finish(const Finish& finish, const std::string& failed_route, const std::string& main_route) {
  return [finish, failed_route, main_route](HttpResponse degraded, std::size_t rows) {
    degraded.headers.emplace_back("X-Slipway-Version", main_route);
    degraded.headers.emplace_back("X-Slipway-Degraded", "fallback: " + failed_route + " failed");
    finish(std::move(degraded), rows);
  };
}

}  // namespace

void Service::State::mirror_to_shadow(const std::string& endpoint, const registry::EndpointRoute& shadow,
                                      const std::shared_ptr<const std::pair<std::string, std::string>>& request,
                                      const std::shared_ptr<const std::vector<float>>& live_scores) {
  using Outcome = ServerMetrics::ShadowOutcome;
  std::string route = shadow.reference();
  std::size_t bytes = request->first.size() + live_scores->size() * sizeof(float);
  // Acquired here, at normal priority: a first load of the shadow version takes the model's load
  // lock, which the low-priority shadow thread must never hold.
  std::int64_t started = monotonic_ns();
  auto acquired = manager.acquire(shadow.model, shadow.version);
  if (!acquired.ok()) return metrics.record_shadow(endpoint, route, Outcome::kFailed);
  bool posted = shadows.try_post(
      [this, endpoint, route, request, live_scores, servable = std::move(acquired).value(), started] {
        const model::Bundle& bundle = *servable.model->bundle;
        bool binary = bundle.task() == model::Task::kBinaryClassification;
        std::size_t columns =
            bundle.task() == model::Task::kMulticlassClassification ? bundle.model().output_count() : 0;
        auto shadow_scores = std::make_shared<std::vector<float>>();
        RequestHeaders headers;
        headers.inference_header_length = request->second;
        auto compare = [this, endpoint, route, started, live_scores, shadow_scores, binary, columns](
                           const HttpResponse& response, std::size_t) mutable {
          const std::vector<float>& live = *live_scores;
          const std::vector<float>& mirrored = *shadow_scores;
          if (response.status >= 400 || (!live.empty() && mirrored.size() != live.size())) {
            return metrics.record_shadow(endpoint, route, Outcome::kFailed);
          }
          // A live answer from the response cache brought no scores: nothing to compare.
          std::vector<double> differences(live.size());
          if (live.empty()) binary = false;
          for (std::size_t index = 0; index < live.size(); ++index) {
            differences[index] = std::abs(static_cast<double>(live[index]) - mirrored[index]);
          }
          // Labels compare for classifiers: the same side of 0.5, or the same most probable class.
          std::size_t rows = 0, agreeing = 0;
          if (binary) {
            rows = live.size();
            for (std::size_t row = 0; row < rows; ++row) agreeing += (live[row] >= 0.5f) == (mirrored[row] >= 0.5f);
          } else if (columns > 0 && !live.empty()) {
            rows = live.size() / columns;
            auto width = static_cast<std::ptrdiff_t>(columns);
            for (std::size_t row = 0; row < rows; ++row) {
              auto live_row = live.begin() + static_cast<std::ptrdiff_t>(row) * width;
              auto mirrored_row = mirrored.begin() + static_cast<std::ptrdiff_t>(row) * width;
              agreeing += std::max_element(live_row, live_row + width) - live_row ==
                          std::max_element(mirrored_row, mirrored_row + width) - mirrored_row;
            }
          }
          metrics.record_shadow(endpoint, route, Outcome::kAnswered,
                                static_cast<double>(monotonic_ns() - started) * 1e-9, rows, agreeing, differences);
        };
        infer(servable, request->first, headers, compare,
              [shadow_scores](const model::Predictions& predictions) { *shadow_scores = predictions.scores; });
      },
      bytes);
  if (!posted) metrics.record_shadow(endpoint, route, Outcome::kDropped);
}

void Service::State::infer_endpoint(const registry::Endpoint& endpoint, const Servable& servable, std::string_view body,
                                    const RequestHeaders& headers, const Finish& finish) {
  const LoadedModel& loaded = *servable.model;
  std::string route = loaded.name + "@" + loaded.version_text;
  metrics.record_endpoint(endpoint.name, route);
  const registry::EndpointRoute& main = main_route(endpoint);
  // A failure of another route is answered by the main one when the endpoint says so: the request
  // is kept for that (only then, and only for those routes).
  bool may_fall_back = endpoint.fallback == "main" && main.reference() != route;
  bool mirror = !endpoint.shadow.model.empty() && sampled(endpoint.shadow.percent);
  auto kept = may_fall_back || mirror ? std::make_shared<std::pair<std::string, std::string>>(
                                            std::string(body), std::string(headers.inference_header_length))
                                      : nullptr;
  auto scores = std::make_shared<std::vector<float>>();
  auto observe = [scores, mirror](const model::Predictions& predictions) {
    // The analysis samples a few scores; a shadow compares all of them.
    std::size_t count = mirror ? predictions.scores.size() : std::min<std::size_t>(predictions.scores.size(), 16);
    scores->assign(predictions.scores.begin(), predictions.scores.begin() + static_cast<std::ptrdiff_t>(count));
  };
  std::int64_t started = monotonic_ns();
  auto answered =
      [this, name = endpoint.name, route, main = main.reference(), main_model = main.model, main_version = main.version,
       kept, scores, started, may_fall_back, repeated_header = headers.inference_header_length_repeated,
       shadow = mirror ? endpoint.shadow : registry::EndpointRoute{}, finish](HttpResponse response, std::size_t rows) {
        bool failed = response.status >= 400;
        // The canary analysis sees the route's own answer, before any fallback.
        rollouts->record(name, route, failed, static_cast<double>(monotonic_ns() - started) * 1e-6, *scores);
        // Every answer says which version gave it.
        response.headers.emplace_back("X-Slipway-Version", route);
        if (!failed && !shadow.model.empty()) {
          finish(std::move(response), rows);
          // After the live answer is on its way, never before it.
          mirror_to_shadow(name, shadow, kept, scores);
          return;
        }
        if (!failed || !may_fall_back) return finish(std::move(response), rows);
        auto fallback = manager.acquire(main_model, main_version);
        if (!fallback.ok()) return finish(std::move(response), rows);
        metrics.record_fallback(name, route);
        RequestHeaders kept_headers;
        kept_headers.inference_header_length = kept->second;
        kept_headers.inference_header_length_repeated = repeated_header;
        infer(*fallback, kept->first, kept_headers, degraded_finish(finish, route, main));
      };
  infer(servable, body, headers, answered, observe);
}

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
    // model error: the analysis sees it, and the main route answers where the endpoint falls back.
    metrics.record_endpoint(name, route_reference);
    rollouts->record(name, route_reference, true, 0.0, {});
    const registry::EndpointRoute& main = main_route(*endpoint);
    if (endpoint->fallback == "main" && main.reference() != route_reference) {
      if (auto fallback = manager.acquire(main.model, main.version); fallback.ok()) {
        metrics.record_fallback(name, route_reference);
        metric_model = main.model;
        metric_version = fallback->model->version_text;
        return infer(*fallback, body, headers, degraded_finish(finish, route_reference, main.reference()));
      }
    }
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
  if (action == "infer" && endpoint != nullptr) return infer_endpoint(*endpoint, *servable, body, headers, finish);
  if (action == "infer") return infer(*servable, body, headers, finish);
  if (action == "config") return answer(json_response(200, config_json(*servable->model)));
  answer(json_response(200, model_metadata(*servable, version.has_value())));
}

}  // namespace slipway::serve
