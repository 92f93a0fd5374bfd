// Request counters and latency histograms, exposed in Prometheus text format. Private to serve.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

namespace slipway::serve {

// A Prometheus label value: backslash, quote and newline escaped (the exposition format).
std::string label_value(std::string_view text);

class ServerMetrics {
 public:
  // Bucket upper bounds in seconds (Prometheus `le`), plus +Inf.
  static constexpr std::array<double, 14> kLatencyBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                             0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5};

  // One finished request for `model`/`version` ("" when the request named no servable model).
  // `inference`: an infer request (the statistics' success and fail count only those).
  // A failed request (status >= 400) is also counted under `failure_reason`.
  void record(std::string_view model, std::string_view version, int status, double seconds, std::size_t rows,
              bool inference, std::string_view failure_reason = {});
  // One finished request of any route (a fixed set of names: infer, health, model_metadata, ...),
  // counted by route and status with its latency, so probes stay apart from inference.
  void record_route(std::string_view route, int status, double seconds);
  // Requests accepted by a model and not yet answered (queued or computing).
  void change_pending(std::string_view model, std::string_view version, int delta);
  // Model lifecycle: a version loaded (with its memory) or unloaded, and load attempts.
  void set_loaded(std::string_view model, std::string_view version, std::size_t memory_bytes);
  void set_unloaded(std::string_view model, std::string_view version, std::string_view reason);
  void record_load(std::string_view model, bool succeeded);
  // One model call of `rows` rows (a lone request's, or a dynamic batch's).
  void record_execution(std::string_view model, std::string_view version, std::size_t rows, bool batched,
                        double compute_seconds = 0.0);
  // Where one request's time went, by stage.
  enum class Stage { kQueue, kInput, kInfer, kOutput };
  void record_stage(std::string_view model, std::string_view version, Stage stage, double seconds);
  // A response-cache lookup, and the cache's size after it changed.
  void record_cache(std::string_view model, std::string_view version, bool hit);
  void set_cache_bytes(std::size_t bytes);
  // An infer request to `endpoint`, routed to `route` ("model@version"). Endpoints and their
  // routes come from the registry, never from a client, so the series stay bounded.
  void record_endpoint(std::string_view endpoint, std::string_view route);
  // A request that `route` of `endpoint` failed or did not answer in time, and what the
  // endpoint's fallback answered it with: another version, the cached answer, the constant, or
  // nothing (the failure, or a 504, was returned).
  enum class FallbackReason { kError, kDeadline };
  enum class FallbackAnswer { kVersion, kCached, kConstant, kNone };
  void record_fallback(std::string_view endpoint, std::string_view route, FallbackReason reason, FallbackAnswer answer);
  // A copy of a request to `endpoint` sent to its shadow version `route`: dropped (the shadow
  // queue was full), failed, or answered in `seconds`, with its scores compared to the live ones
  // (`rows` rows whose label could be compared, `agreeing` of them the same; each score's
  // absolute difference).
  enum class ShadowOutcome { kAnswered, kFailed, kDropped };
  void record_shadow(std::string_view endpoint, std::string_view route, ShadowOutcome outcome, double seconds = 0,
                     std::size_t rows = 0, std::size_t agreeing = 0, std::span<const double> differences = {});
  // Triton's statistics extension: {"model_stats": [...]} for every model, or only `model`
  // (and `version`) when given.
  std::string stats_json(std::string_view model, std::string_view version) const;
  std::string prometheus_text() const;

 private:
  struct Latency {
    std::array<std::uint64_t, kLatencyBuckets.size() + 1> buckets{};
    double sum_seconds = 0.0;
    std::uint64_t count = 0;
    std::uint64_t rows = 0;
    void add(double seconds);
  };
  struct Outcome {
    std::uint64_t count = 0;
    double seconds = 0.0;
  };
  struct Executions {
    std::uint64_t count = 0;  // every model call
    std::uint64_t rows = 0;
    std::uint64_t batched_count = 0;  // calls made by dynamic batchers
    std::uint64_t batched_rows = 0;
    // Triton's batch_stats: calls by batch size, batched or not (at most kMaxBatchSizes sizes).
    std::map<std::size_t, Outcome> by_batch_size;
  };
  static constexpr std::size_t kMaxBatchSizes = 256;
  using ModelKey = std::pair<std::string, std::string>;
  // Maps keyed by (model, version[, more]) are searched with string views, so recording a
  // request allocates nothing once its series exist.
  struct KeyLess {
    using is_transparent = void;
    using View = std::pair<std::string_view, std::string_view>;
    static View view(const ModelKey& key) { return {key.first, key.second}; }
    static View view(const View& key) { return key; }
    template <typename Left, typename Right>
    bool operator()(const Left& left, const Right& right) const {
      return view(left) < view(right);
    }
  };
  template <typename Value>
  using ByModel = std::map<ModelKey, Value, KeyLess>;
  template <typename Third>
  struct TripleLess {
    using is_transparent = void;
    using View = std::tuple<std::string_view, std::string_view, Third>;
    template <typename Key>
    static View view(const Key& key) {
      return {std::get<0>(key), std::get<1>(key), std::get<2>(key)};
    }
    template <typename Left, typename Right>
    bool operator()(const Left& left, const Right& right) const {
      return view(left) < view(right);
    }
  };

  static void append_histogram_lines(std::string& out, std::string_view metric, std::string_view labels,
                                     const Latency& latency);
  static void append_histogram(std::string& out, std::string_view name, std::string_view help,
                               const ByModel<Latency>& series);

  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t, TripleLess<int>> requests_;
  ByModel<Latency> latency_;
  ByModel<Executions> executions_;
  ByModel<std::array<Latency, 4>> stages_;    // indexed by Stage
  ByModel<std::array<Outcome, 2>> outcomes_;  // [success, fail]
  ByModel<std::int64_t> last_inference_ms_;
  ByModel<std::array<std::uint64_t, 2>> cache_lookups_;       // [hits, misses]
  ByModel<std::uint64_t> endpoint_requests_;                  // (endpoint, model@version)
  ByModel<std::array<std::uint64_t, 8>> endpoint_fallbacks_;  // (endpoint, failed route): [reason * 4 + answer]
  struct ShadowSeries {
    std::array<std::uint64_t, 3> outcomes{};  // by ShadowOutcome
    std::uint64_t rows = 0;
    std::uint64_t agreeing = 0;
    Latency latency;
    Latency differences;  // |live - shadow| per score, in the same buckets
  };
  ByModel<ShadowSeries> shadows_;  // (endpoint, shadow route)
  // (model, version, reason)
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t, TripleLess<std::string_view>> failures_;
  ByModel<std::int64_t> pending_;
  ByModel<std::size_t> loaded_bytes_;
  ByModel<std::uint64_t> unloads_;  // (model, reason)
  ByModel<std::uint64_t> loads_;    // (model, success|failure)
  // By route, in the order of kRoutes (server_metrics.cpp): requests by status, and latency.
  struct RouteSeries {
    std::map<int, std::uint64_t> statuses;
    Latency latency;
  };
  std::array<RouteSeries, 12> routes_;
  std::size_t cache_bytes_ = 0;
  bool cache_enabled_ = false;
};

}  // namespace slipway::serve
