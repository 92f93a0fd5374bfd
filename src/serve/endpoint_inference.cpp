// Inference through an endpoint: the route's answer, recorded for the rollout analysis and the
// shadow comparison; the fallback when the route fails or misses the endpoint's deadline.
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>

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
  // Without a fallback a failure is simply the answer; only a deadline's 504 is counted.
  if (kind == "none" && reason == FallbackReason::kError) return finish(std::move(failure), 0);
  if (request == nullptr) return unanswered();
  // The first of `routes` whose version can serve now (other than the one that failed, unless
  // `any`).
  auto first_serving = [&](const std::vector<const registry::EndpointRoute*>& routes,
                           bool any = false) -> std::optional<std::pair<std::string, Servable>> {
    for (const registry::EndpointRoute* route : routes) {
      if (!any && route->reference() == failed_route) continue;
      if (auto servable = manager.acquire(route->model, route->version); servable.ok()) {
        return std::make_pair(route->reference(), std::move(servable).value());
      }
    }
    return std::nullopt;
  };
  if (kind == "main" || kind == "previous") {
    // "previous" tries the rollback target first, unless the last change was a rollback: then the
    // target is what was rolled back from.
    std::vector<const registry::EndpointRoute*> candidates;
    bool rolled_back = endpoint->last_change == "endpoint.rollback" || endpoint->last_change == "rollout.rollback";
    if (kind == "previous" && !endpoint->previous.empty() && !rolled_back) {
      candidates.push_back(&registry::main_route(endpoint->previous));
    }
    candidates.push_back(&main_route(*endpoint));
    auto target = first_serving(candidates);
    if (!target) return unanswered();
    metrics.record_fallback(name, failed_route, reason, FallbackAnswer::kVersion);
    const std::string& reference = target->first;
    return infer(target->second, request->body, request->headers(),
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
    // The request is read with the schema of the main version (else of another that serves): a
    // request it cannot read keeps its failure (a malformed request is the client's fault).
    std::vector<const registry::EndpointRoute*> readers = {&main_route(*endpoint)};
    for (const auto& route : endpoint->routes) readers.push_back(&route);
    auto reader = first_serving(readers, true);
    if (!reader) return unanswered();
    const LoadedModel& loaded = *reader->second.model;
    auto prepared = prepare_infer(loaded, request->body, request->headers());
    auto scores = model::constant_fallback_scores(*loaded.bundle, std::string_view(kind).substr(9));
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
                                      const std::shared_ptr<const std::vector<float>>& live_scores,
                                      double live_threshold) {
  using Outcome = ServerMetrics::ShadowOutcome;
  std::string route = shadow.reference();
  std::size_t bytes = request->body.size() + live_scores->size() * sizeof(float);
  // Acquired here, at normal priority: a first load of the shadow version takes the model's load
  // lock, which the low-priority shadow thread must never hold.
  std::int64_t started = monotonic_ns();
  auto acquired = manager.acquire(shadow.model, shadow.version);
  if (!acquired.ok()) return metrics.record_shadow(endpoint, route, Outcome::kFailed);
  bool posted = shadows.try_post(
      [this, endpoint, route, request, live_scores, live_threshold, servable = std::move(acquired).value(), started] {
        const model::Bundle& bundle = *servable.model->bundle;
        const double shadow_threshold = bundle.manifest().decision_threshold;
        bool binary = bundle.task() == model::Task::kBinaryClassification;
        std::size_t columns =
            bundle.task() == model::Task::kMulticlassClassification ? bundle.model().output_count() : 0;
        auto shadow_scores = std::make_shared<std::vector<float>>();
        auto compare = [this, endpoint, route, started, live_scores, shadow_scores, binary, columns, live_threshold,
                        shadow_threshold](const HttpResponse& response, std::size_t) mutable {
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
          // Labels compare for classifiers: each on the same side of its version's threshold, or
          // the same most probable class.
          std::size_t rows = 0, agreeing = 0;
          if (binary) {
            rows = live.size();
            for (std::size_t row = 0; row < rows; ++row) {
              agreeing += (live[row] >= live_threshold) == (mirrored[row] >= shadow_threshold);
            }
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

namespace {

// The answer to a request whose route missed the endpoint's deadline, when no fallback answers.
HttpResponse deadline_missed(const registry::Endpoint& endpoint, const std::string& route) {
  HttpResponse late = error_response(504, "endpoint '" + endpoint.name + "': " + route + " did not answer within " +
                                              std::to_string(endpoint.deadline_ms) + " ms");
  late.headers.emplace_back("X-Slipway-Version", route);
  return late;
}

// With a deadline a request is answered once: by the route, or by the fallback at the deadline,
// whichever comes first. The first takes the completion, so the other holds nothing of the
// connection (a route still running after its deadline keeps only its own work).
struct DeadlineRace {
  std::mutex mutex;
  Finish finish;  // empty once taken
  DeadlineTimer::Id timer = 0;

  Finish take() {
    std::lock_guard lock(mutex);
    return std::exchange(finish, nullptr);
  }
};

}  // namespace

void Service::State::infer_endpoint(const std::shared_ptr<const registry::Endpoint>& endpoint, const Servable& servable,
                                    std::string_view body, const RequestHeaders& headers, const Finish& finish) {
  const LoadedModel& loaded = *servable.model;
  std::string route = loaded.name + "@" + loaded.version_text;
  metrics.record_endpoint(endpoint->name, route);
  const std::string& fallback = endpoint->fallback;
  bool mirror = !endpoint->shadow.model.empty() && sampled(endpoint->shadow.percent);
  bool deadline = endpoint->deadline_ms > 0;
  bool may_fall_back = fallback != "none" && !(fallback == "main" && main_route(*endpoint).reference() == route);
  // The request is kept (copied) only for what needs it after this call: a fallback, a shadow, a
  // deadline (the route then reads the copy, since the connection's buffer moves on to the next
  // request once the deadline has answered).
  auto request = may_fall_back || mirror || deadline ? std::make_shared<KeptRequest>(body, headers) : nullptr;
  bool keep_answers = fallback == "cached" && headers.inference_header_length.empty();
  auto scores = std::make_shared<std::vector<float>>();
  auto observe = [scores, mirror](const model::Predictions& predictions) {
    // The analysis samples a few scores; a shadow compares all of them.
    std::size_t count = mirror ? predictions.scores.size() : std::min<std::size_t>(predictions.scores.size(), 16);
    scores->assign(predictions.scores.begin(), predictions.scores.begin() + static_cast<std::ptrdiff_t>(count));
  };
  auto race = deadline ? std::make_shared<DeadlineRace>() : nullptr;
  if (race) race->finish = finish;
  std::int64_t started = monotonic_ns();
  auto answered = [this, endpoint, route, request, scores, started, mirror, keep_answers, race,
                   live_threshold = loaded.bundle->manifest().decision_threshold,
                   direct = race ? Finish() : finish](HttpResponse response, std::size_t rows) {
    bool failed = response.status >= 400;
    double elapsed_ms = static_cast<double>(monotonic_ns() - started) * 1e-6;
    Finish finish = race ? race->take() : direct;
    bool late = !finish;  // the deadline's answer went first
    // A request the route refused (4xx) may be the client's fault rather than the version's: where
    // another version is asked, the refusal counts against the route only if that version
    // answers it, so no client can fail a canary with requests no version would take.
    bool judged_by_fallback =
        !late && failed && response.status < 500 && (endpoint->fallback == "main" || endpoint->fallback == "previous");
    // Otherwise the canary analysis sees the route's own answer as it is, late or not.
    if (!judged_by_fallback) rollouts->record(endpoint->name, route, failed, elapsed_ms, *scores);
    if (late) return;
    if (race) deadlines.cancel(race->timer);
    // Every answer says which version gave it.
    std::string kept_answer = !failed && keep_answers && response.headers.empty() ? response.body : std::string();
    response.headers.emplace_back("X-Slipway-Version", route);
    if (!failed) {
      finish(std::move(response), rows);
      // After the live answer is on its way, never before it.
      if (!kept_answer.empty()) fallback_answers.insert(endpoint->name, 0, request->body, std::move(kept_answer), true);
      if (mirror) mirror_to_shadow(endpoint->name, endpoint->shadow, request, scores, live_threshold);
      return;
    }
    if (!judged_by_fallback) {
      // Left in a batch queue past the deadline (the queue limit below): late, not broken.
      if (race && response.failure_reason == "timeout") {
        return fall_back(endpoint, route, FallbackReason::kDeadline, request, deadline_missed(*endpoint, route),
                         finish);
      }
      return fall_back(endpoint, route, FallbackReason::kError, request, std::move(response), finish);
    }
    auto judged = [this, name = endpoint->name, route, elapsed_ms, scores, finish](HttpResponse answer,
                                                                                   std::size_t answer_rows) {
      bool clients_fault = answer.status >= 400 && answer.status < 500;
      rollouts->record(name, route, !clients_fault, elapsed_ms, *scores);
      finish(std::move(answer), answer_rows);
    };
    fall_back(endpoint, route, FallbackReason::kError, request, std::move(response), judged);
  };
  if (!race) return infer(servable, body, headers, answered, observe);
  std::chrono::milliseconds limit(endpoint->deadline_ms);
  // Scheduled before the route runs (it may answer on this thread), which reads the id after.
  race->timer = deadlines.schedule(DeadlineTimer::Clock::now() + limit, [this, endpoint, route, request, race] {
    Finish finish = race->take();
    if (!finish) return;  // the route answered first
    fall_back(endpoint, route, FallbackReason::kDeadline, request, deadline_missed(*endpoint, route), finish);
  });
  try {
    // A request still queued at the deadline leaves the queue then: its answer would be dropped.
    infer(servable, request->body, request->headers(), answered, observe, limit);
  } catch (const std::exception& error) {
    // Answered through the race, so the deadline cannot answer it a second time.
    answered(error_response(500, std::string("internal error: ") + error.what()), 0);
  }
}

}  // namespace slipway::serve
