// Inference through an endpoint: the route's answer, recorded for the rollout analysis and the
// shadow comparison; the fallback when the route fails or misses the endpoint's deadline.
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>

#include "serve/service_state.h"

namespace slipway::serve {

using FallbackReason = ServerMetrics::FallbackReason;
using FallbackAnswer = ServerMetrics::FallbackAnswer;

KeptRequest::KeptRequest(std::string_view request_body, const RequestHeaders& headers)
    : header_length(headers.inference_header_length), header_length_repeated(headers.inference_header_length_repeated) {
  // Padded, so the JSON is parsed in place when the copy is inferred.
  body.reserve(request_body.size() + simdjson::SIMDJSON_PADDING);
  body.assign(request_body);
}

RequestHeaders KeptRequest::headers() const {
  RequestHeaders headers;
  headers.inference_header_length = header_length;
  headers.inference_header_length_repeated = header_length_repeated;
  headers.body_padding = body.capacity() - body.size();
  return headers;
}

Result<std::vector<float>> constant_fallback_scores(const model::Bundle& bundle, std::string_view value) {
  const std::vector<std::string>& labels = bundle.manifest().class_labels;
  double number = 0.0;
  auto parsed = std::from_chars(value.data(), value.data() + value.size(), number);
  bool is_number = parsed.ec == std::errc() && parsed.ptr == value.data() + value.size() && std::isfinite(number);
  switch (bundle.task()) {
    case model::Task::kRegression:
      if (is_number) return std::vector<float>{static_cast<float>(number)};
      return invalid_argument("the constant fallback of a regression model is a finite number, not '" +
                              std::string(value) + "'");
    case model::Task::kBinaryClassification:
      if (labels.size() == 2 && value == labels[1]) return std::vector<float>{1.0f};
      if (labels.size() == 2 && value == labels[0]) return std::vector<float>{0.0f};
      if (is_number && number >= 0.0 && number <= 1.0) return std::vector<float>{static_cast<float>(number)};
      return invalid_argument(
          "the constant fallback of a binary classifier is P(positive), between 0 and 1, or a "
          "class label, not '" +
          std::string(value) + "'");
    case model::Task::kMulticlassClassification: {
      auto found = std::find(labels.begin(), labels.end(), value);
      if (found == labels.end()) {
        return invalid_argument("the constant fallback of a multiclass model is one of its class labels, not '" +
                                std::string(value) + "'");
      }
      std::vector<float> scores(labels.size(), 0.0f);
      scores[static_cast<std::size_t>(found - labels.begin())] = 1.0f;
      return scores;
    }
  }
  return invalid_argument("no constant fallback for this task");
}

namespace {

using Finish = std::function<void(HttpResponse response, std::size_t rows)>;

// The completion of a request the fallback answers: marked degraded, and why.
Finish degraded_finish(const Finish& finish, std::string answered_by, std::string degraded) {
  return [finish, answered_by = std::move(answered_by), degraded = std::move(degraded)](HttpResponse response,
                                                                                        std::size_t rows) {
    if (!answered_by.empty()) response.headers.emplace_back("X-Slipway-Version", answered_by);
    response.headers.emplace_back("X-Slipway-Degraded", degraded);
    finish(std::move(response), rows);
  };
}

}  // namespace

void Service::State::fall_back(const std::shared_ptr<const registry::Endpoint>& endpoint,
                               const std::string& failed_route, FallbackReason reason,
                               const std::shared_ptr<const KeptRequest>& request, HttpResponse failure,
                               const Finish& finish) {
  const std::string& name = endpoint->name;
  const std::string& kind = endpoint->fallback;
  std::string why = reason == FallbackReason::kDeadline
                        ? failed_route + " did not answer within " + std::to_string(endpoint->deadline_ms) + " ms"
                        : failed_route + " failed";
  auto unanswered = [&] {
    metrics.record_fallback(name, failed_route, reason, FallbackAnswer::kNone);
    finish(std::move(failure), 0);
  };
  if (request == nullptr) return unanswered();
  if (kind == "main" || kind == "previous") {
    // "previous" tries the rollback target first; both answer only from a version that is not
    // the one that failed.
    std::vector<const registry::EndpointRoute*> candidates;
    if (kind == "previous" && !endpoint->previous.empty())
      candidates.push_back(&registry::main_route(endpoint->previous));
    candidates.push_back(&main_route(*endpoint));
    auto target = std::find_if(candidates.begin(), candidates.end(), [&](const registry::EndpointRoute* route) {
      return route->reference() != failed_route;
    });
    if (target == candidates.end()) return unanswered();
    auto servable = manager.acquire((*target)->model, (*target)->version);
    if (!servable.ok()) return unanswered();
    metrics.record_fallback(name, failed_route, reason, FallbackAnswer::kVersion);
    std::string reference = (*target)->reference();
    return infer(*servable, request->body, request->headers(),
                 degraded_finish(finish, reference, reference + " (" + why + ")"));
  }
  if (kind == "cached") {
    std::string answer;
    if (!request->header_length.empty() || !fallback_answers.lookup(name, 0, request->body, answer)) {
      return unanswered();
    }
    metrics.record_fallback(name, failed_route, reason, FallbackAnswer::kCached);
    return degraded_finish(finish, "", "cached answer (" + why + ")")(json_response(200, std::move(answer)), 0);
  }
  if (kind.starts_with("constant:")) {
    // The request is read with the main version's schema: a request it cannot read keeps its
    // failure (a malformed request is the client's, not the model's).
    const registry::EndpointRoute& main = main_route(*endpoint);
    auto servable = manager.acquire(main.model, main.version);
    if (!servable.ok()) return unanswered();
    const LoadedModel& loaded = *servable->model;
    auto prepared = prepare_infer(loaded, request->body, request->headers());
    auto scores = constant_fallback_scores(*loaded.bundle, std::string_view(kind).substr(9));
    if (!prepared.ok() || !scores.ok()) return unanswered();
    model::Predictions predictions;
    predictions.rows = prepared->rows;
    predictions.columns = scores->size();
    predictions.scores.reserve(predictions.rows * predictions.columns);
    for (std::size_t row = 0; row < predictions.rows; ++row) {
      predictions.scores.insert(predictions.scores.end(), scores->begin(), scores->end());
    }
    metrics.record_fallback(name, failed_route, reason, FallbackAnswer::kConstant);
    return degraded_finish(finish, "", "constant (" + why + ")")(infer_response(loaded, *prepared, predictions),
                                                                 prepared->rows);
  }
  unanswered();
}

void Service::State::mirror_to_shadow(const std::string& endpoint, const registry::EndpointRoute& shadow,
                                      const std::shared_ptr<const KeptRequest>& request,
                                      const std::shared_ptr<const std::vector<float>>& live_scores) {
  using Outcome = ServerMetrics::ShadowOutcome;
  std::string route = shadow.reference();
  std::size_t bytes = request->body.size() + live_scores->size() * sizeof(float);
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
        infer(servable, request->body, request->headers(), compare,
              [shadow_scores](const model::Predictions& predictions) { *shadow_scores = predictions.scores; });
      },
      bytes);
  if (!posted) metrics.record_shadow(endpoint, route, Outcome::kDropped);
}

void Service::State::infer_endpoint(const std::shared_ptr<const registry::Endpoint>& endpoint, const Servable& servable,
                                    std::string_view body, const RequestHeaders& headers, const Finish& finish) {
  const LoadedModel& loaded = *servable.model;
  std::string route = loaded.name + "@" + loaded.version_text;
  metrics.record_endpoint(endpoint->name, route);
  bool mirror = !endpoint->shadow.model.empty() && sampled(endpoint->shadow.percent);
  bool deadline = endpoint->deadline_ms > 0;
  // The request is kept (copied) only for what needs it after this call: a fallback, a shadow, a
  // deadline (the route then reads the copy, since the connection's buffer moves on to the next
  // request once the deadline has answered).
  auto request =
      endpoint->fallback != "none" || mirror || deadline ? std::make_shared<KeptRequest>(body, headers) : nullptr;
  bool keep_answers = endpoint->fallback == "cached" && headers.inference_header_length.empty();
  auto scores = std::make_shared<std::vector<float>>();
  auto observe = [scores, mirror](const model::Predictions& predictions) {
    // The analysis samples a few scores; a shadow compares all of them.
    std::size_t count = mirror ? predictions.scores.size() : std::min<std::size_t>(predictions.scores.size(), 16);
    scores->assign(predictions.scores.begin(), predictions.scores.begin() + static_cast<std::ptrdiff_t>(count));
  };
  // With a deadline the request is answered once: by the route, or by the fallback at the
  // deadline, whichever comes first.
  struct Race {
    std::atomic<bool> answered{false};
    std::atomic<DeadlineTimer::Id> timer{0};
  };
  auto race = deadline ? std::make_shared<Race>() : nullptr;
  std::int64_t started = monotonic_ns();
  auto answered = [this, endpoint, route, request, scores, started, mirror, keep_answers, race, finish](
                      HttpResponse response, std::size_t rows) {
    bool failed = response.status >= 400;
    // The canary analysis sees the route's own answer, late or not, before any fallback.
    rollouts->record(endpoint->name, route, failed, static_cast<double>(monotonic_ns() - started) * 1e-6, *scores);
    if (race) {
      if (race->answered.exchange(true)) return;  // the deadline's answer went first
      deadlines.cancel(race->timer.load());
    }
    if (!failed && keep_answers && response.headers.empty()) {
      fallback_answers.insert(endpoint->name, 0, request->body, response.body);
    }
    // Every answer says which version gave it.
    response.headers.emplace_back("X-Slipway-Version", route);
    if (!failed) {
      finish(std::move(response), rows);
      // After the live answer is on its way, never before it.
      if (mirror) mirror_to_shadow(endpoint->name, endpoint->shadow, request, scores);
      return;
    }
    fall_back(endpoint, route, FallbackReason::kError, request, std::move(response), finish);
  };
  if (race) {
    auto at = DeadlineTimer::Clock::now() + std::chrono::milliseconds(endpoint->deadline_ms);
    race->timer = deadlines.schedule(at, [this, endpoint, route, request, race, finish] {
      if (race->answered.exchange(true)) return;
      HttpResponse late =
          error_response(504, "endpoint '" + endpoint->name + "': " + route + " did not answer within " +
                                  std::to_string(endpoint->deadline_ms) + " ms");
      fall_back(endpoint, route, FallbackReason::kDeadline, request, std::move(late), finish);
    });
    return infer(servable, request->body, request->headers(), answered, observe);
  }
  infer(servable, body, headers, answered, observe);
}

}  // namespace slipway::serve
