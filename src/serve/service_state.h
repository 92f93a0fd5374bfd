// The Service's state and the helpers its files share: routing (service.cpp), authorization
// (auth.cpp), v2 inference (v2_infer.cpp), model metadata and readiness (v2_models.cpp), and
// the repository, statistics and configuration extensions (v2_extensions.cpp). Private to serve.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/deadline_timer.h"
#include "serve/model_manager.h"
#include "serve/request_log.h"
#include "serve/response_cache.h"
#include "serve/rollouts.h"
#include "serve/server_metrics.h"
#include "serve/shadow_queue.h"
#include "slipway/serve.h"

namespace slipway::serve {

// The message with absolute file paths replaced by "<server path>": error bodies and the
// repository index never show where the server keeps its files.
std::string without_server_paths(std::string_view message);

// The path split into segments: "/v2/models/x/ready" -> {"v2", "models", "x", "ready"}.
std::vector<std::string_view> path_segments(std::string_view target);

// The least role a route takes; the management API's routes then check their own.
Role role_required(const std::vector<std::string_view>& segments);

// An output a model can answer, and whether it travels as binary data.
struct OutputSpec {
  std::string name;
  std::string datatype;
  bool binary = false;  // sent as raw bytes after the JSON (Triton's binary tensor extension)
};
std::vector<OutputSpec> outputs_of(const model::Bundle& bundle);
// "inputs" and "outputs" of the model metadata (also in /config): names, datatypes, shapes, and
// for classifiers the class labels in probability-column order.
void write_tensors_metadata(JsonWriter& json, const model::Bundle& bundle);

// A parsed infer request: its rows preprocessed, ready for the model alone or in a batch.
struct PreparedInfer {
  std::string request_id;
  std::vector<OutputSpec> wanted;
  std::vector<float> features;  // rows x the schema's output width
  std::size_t rows = 0;
  int priority = 0;
  std::chrono::microseconds timeout{0};
};

// The route of an endpoint a request takes. With a route key, the route whose slice of the key
// space holds the key's hash: the same key reaches the same route while the shares stay, and
// raising the first route's share (a canary's) only moves keys onto it. Without one, a random
// route by share.
const registry::EndpointRoute& pick_route(const registry::Endpoint& endpoint, std::string_view route_key);
// The route with the largest share: the one metadata, readiness and config describe.
const registry::EndpointRoute& main_route(const registry::Endpoint& endpoint);
// True for about `percent` of the calls (at random).
bool sampled(double percent);

// A request kept past its handler (for a fallback, a shadow, a deadline): the body and the header
// that says where its JSON ends, copied.
struct KeptRequest {
  KeptRequest(std::string_view request_body, const RequestHeaders& headers);
  std::string body;  // padded for in-place parsing
  std::string header_length;
  bool header_length_repeated = false;
  RequestHeaders headers() const;  // views into this
};

struct Service::State {
  State(registry::Registry& registry, const ServiceOptions& options)
      : registry(registry),
        options(options),
        cache(options.response_cache_bytes),
        fallback_answers(options.fallback_cache_bytes),
        manager(registry,
                ModelManager::Options{options.registry_refresh, options.defaults, options.model_overrides,
                                      options.memory_budget_bytes},
                metrics) {}

  registry::Registry& registry;
  ServiceOptions options;
  ServerMetrics metrics;  // declared before the manager, whose batchers report to it
  ResponseCache cache;
  // The last answer each endpoint with fallback "cached" gave to each request's bytes.
  ResponseCache fallback_answers;
  ModelManager manager;
  // Sampled requests with their answers (models whose request_log_rate is above 0).
  RequestLog request_log{RequestLogOptions{options.request_log_directory, std::size_t{16} << 20, std::size_t{64} << 20,
                                           options.request_log_retention, options.request_log_max_bytes}};
  // Shadow copies of endpoint requests, run after the live answer: 64 and 16 MiB waiting at most.
  ShadowQueue shadows{64, std::size_t{16} << 20};
  // Drives rollouts in steps; created by Service and destroyed first (its thread calls back).
  std::unique_ptr<RolloutController> rollouts;

  // Endpoints, re-read from the registry every registry_refresh; requests use the last snapshot.
  using EndpointMap = std::map<std::string, registry::Endpoint, std::less<>>;
  std::mutex endpoints_mutex;
  std::shared_ptr<const EndpointMap> endpoints;
  std::chrono::steady_clock::time_point endpoints_fetched;

  // endpoints.cpp: the endpoint named `name`, if there is one (null otherwise).
  std::shared_ptr<const registry::Endpoint> endpoint_named(std::string_view name);

  // Monitoring alerts (slipway monitor --alert), re-read every registry_refresh for /metrics.
  std::mutex alerts_mutex;
  std::vector<registry::AlertState> alerts;
  std::chrono::steady_clock::time_point alerts_fetched;
  // service.cpp: the alerts as Prometheus gauges ("" when there are none).
  std::string alert_metrics();
  // The LLMs served beside (set once before serving): their metrics, and their names, which
  // warm_up leaves to them.
  std::function<std::string()> extra_metrics;
  std::function<std::set<std::string>()> llm_names;

  // API tokens, re-read from the registry every registry_refresh so revocations take effect.
  std::mutex tokens_mutex;
  std::vector<registry::TokenRecord> tokens;
  std::chrono::steady_clock::time_point tokens_fetched;
  bool tokens_loaded = false;

  // auth.cpp: null when the request may proceed; otherwise the 401 or 403 to send.
  // `token_name`, when given, receives the name of the token that was granted (empty without auth).
  // `granted`, when given, receives the token's role (kAdmin without auth: anyone may do anything).
  std::optional<HttpResponse> authorize(Role required, std::string_view authorization,
                                        std::string* token_name = nullptr, Role* granted = nullptr);

  // The completion of a model route: the response and what the metrics need.
  using Finish = std::function<void(HttpResponse response, std::size_t rows)>;

  // v2_models.cpp: `finish`, or for a request the model's request_log_rate samples, `finish` that
  // also logs it (`endpoint`: the endpoint it came through, empty for a model called by name).
  Finish logging(const LoadedModel& loaded, const std::string& endpoint, std::string_view body,
                 const RequestHeaders& headers, const Finish& finish);

  // v2_infer.cpp.
  // `decoded_ns`, when given, receives the monotonic time at which the request was decoded into
  // columns and preprocessing began (for profiling).
  static Result<PreparedInfer> prepare_infer(const LoadedModel& loaded, std::string_view body,
                                             const RequestHeaders& headers, std::int64_t* decoded_ns = nullptr);
  static HttpResponse infer_response(const LoadedModel& loaded, const PreparedInfer& prepared,
                                     const model::Predictions& predictions);
  // `observe`, when given, sees the predictions before the response is written. `queue_limit`,
  // when shorter than the request's own timeout, is the longest it may wait in a batch queue.
  void infer(const Servable& servable, std::string_view body, const RequestHeaders& headers, const Finish& finish,
             std::function<void(const model::Predictions&)> observe = nullptr,
             std::chrono::microseconds queue_limit = {});

  // endpoint_inference.cpp: inference through an endpoint by `servable` (the request's route):
  // its answer (recorded for any rollout's analysis), or the fallback's when it fails or misses
  // the endpoint's deadline.
  void infer_endpoint(const std::shared_ptr<const registry::Endpoint>& endpoint, const Servable& servable,
                      std::string_view body, const RequestHeaders& headers, const Finish& finish);
  // Answers `request`, which `failed_route` failed (with `failure`) or did not answer in time,
  // as the endpoint's fallback says (marked degraded), or with `failure` when it has no answer.
  void fall_back(const std::shared_ptr<const registry::Endpoint>& endpoint, const std::string& failed_route,
                 ServerMetrics::FallbackReason reason, const std::shared_ptr<const KeptRequest>& request,
                 HttpResponse failure, const Finish& finish);
  // Queues a copy of `request` for the endpoint's shadow version, whose answer is compared with
  // `live_scores` in the metrics and dropped; binary labels agree when each score is on the same
  // side of its own version's decision threshold (`live_threshold` the live version's).
  void mirror_to_shadow(const std::string& endpoint, const registry::EndpointRoute& shadow,
                        const std::shared_ptr<const KeptRequest>& request,
                        const std::shared_ptr<const std::vector<float>>& live_scores, double live_threshold);

  // v2_models.cpp: metadata, ready, infer, stats and config of one model. The metric labels are
  // set only for models that exist, so unknown names cannot grow the metrics.
  void handle_model_route(std::string_view method, const std::vector<std::string_view>& segments, std::string_view body,
                          const RequestHeaders& headers, std::string& metric_model, std::string& metric_version,
                          const Finish& finish);

  // v2_extensions.cpp.
  static std::string config_json(const LoadedModel& loaded);
  HttpResponse handle_repository_route(std::string_view method, const std::vector<std::string_view>& segments,
                                       std::string_view body);

  // The label a request for `name` is counted under: the name when the model exists, else
  // "(unknown)", so no client can grow the metrics with names.
  std::string_view metric_label(std::string_view name) const;

  // Endpoint deadlines; declared last, so it stops (and drops what waits) before the rest goes.
  DeadlineTimer deadlines;
};

}  // namespace slipway::serve
