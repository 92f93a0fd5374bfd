// slipway/optimize.h — making models fast and cheap against explicit service-level objectives:
// the load generator that measures a served model honestly, and the profile that says where a
// model's serving time goes.
//
// Open loop (a fixed arrival rate, constant or Poisson): each request has an intended send time,
// and its latency is measured from that time, not from when a free connection finally sent it,
// so a server that falls behind is charged for the queue it causes (no coordinated omission).
// Closed loop (a fixed number of requests outstanding) measures from the actual send, as closed
// loops must.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/model.h"

namespace slipway::optimize {

struct LoadTestOptions {
  std::string url;  // http://HOST:PORT/PATH
  // Request bodies, cycled in order; empty sends GETs.
  std::vector<std::string> bodies;
  std::vector<std::pair<std::string, std::string>> headers;
  double rate = 0.0;     // open loop: requests per second (> 0), or
  int concurrency = 0;   // closed loop: requests outstanding (> 0)
  bool poisson = false;  // open loop: exponential gaps instead of constant ones
  std::chrono::milliseconds duration{10'000};
  std::chrono::milliseconds warmup{0};        // sent, not recorded
  std::chrono::milliseconds timeout{10'000};  // per request, from its intended send time
  int max_connections = 512;                  // open loop: connections opened as needed, up to this
  int threads = 1;                            // event-loop threads of the generator
  std::uint64_t seed = 1;
  // Called about once a second with the report so far.
  std::function<void(double elapsed_seconds, std::uint64_t completed, double current_rate)> on_progress;
};

struct LoadTestReport {
  double target_rate = 0.0;    // open loop; 0 for closed loop
  double achieved_rate = 0.0;  // completed (recorded) requests per second of the measured window
  double measured_seconds = 0.0;
  std::uint64_t sent = 0;       // recorded requests
  std::uint64_t succeeded = 0;  // 2xx
  // By HTTP status; 0 counts requests with no response (connection error or timeout).
  std::map<int, std::uint64_t> status_counts;
  std::uint64_t late_sends = 0;  // open loop: sent more than 1 ms after their intended time
  // Latency of recorded requests (every status), in milliseconds.
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
  int connections_used = 0;
};

Result<LoadTestReport> run_load_test(const LoadTestOptions& options);

// A latency objective such as "p95<=50ms", "p99<=2.5ms" or "mean<=1s".
struct LatencySlo {
  std::string statistic;  // p50, p90, p95, p99, p99.9, max, mean
  double limit_ms = 0.0;
  std::string text;
};
Result<LatencySlo> parse_latency_slo(const std::string& text);
// The report's value for the statistic, in milliseconds.
double latency_statistic(const LoadTestReport& report, const std::string& statistic);

// ---------------------------------------------------------------------------------------------
// Profile: where one model's serving time goes, per request size, in-process stage by stage and
// through the real server on loopback. Find the bottleneck before changing anything.

struct ProfileOptions {
  std::shared_ptr<const model::Bundle> bundle;
  std::string model;                  // how the user named it (NAME@VERSION or a file), for the report
  const data::Table* rows = nullptr;  // request rows; the model's target column is skipped if present
  std::vector<std::size_t> rows_per_request = {1, 8, 64};
  int threads = 1;  // the server's worker threads
  std::chrono::milliseconds in_process_time{500};  // per request size
  std::chrono::milliseconds server_time{2000};     // per request size, for latency and again for throughput
  // Called as each step starts: `step` of `total` (a progress bar).
  std::function<void(int step, int total, const std::string& what)> on_progress;
};

struct StageTime {
  std::string name;     // parse, preprocess, compute, postprocess, encode, transport
  double median_us = 0;  // per request
  double share = 0;      // of the server latency (p50)
};

struct RequestSizeProfile {
  std::size_t rows_per_request = 0;
  std::size_t request_bytes = 0;  // the median v2 JSON request body
  std::size_t response_bytes = 0;
  // In-process, one request at a time on one thread: the five stages inside the server, then
  // "transport": what the server adds around them (HTTP parsing, routing, the worker hand-off,
  // queueing and the loopback), the server's p50 less the in-process total.
  std::vector<StageTime> stages;
  std::uint64_t requests_timed = 0;
  double in_process_us = 0;  // the sum of the in-process stages' medians
  double server_p50_us = 0;  // through the server, one request outstanding
  double server_p99_us = 0;
  double in_process_rows_per_second = 0;  // one thread, the in-process total per request
  double server_rows_per_second = 0;      // closed loop, `connections` requests outstanding
  int connections = 0;
  std::string bottleneck;  // the stage with the largest share
};

struct ProfileReport {
  std::string model;
  std::string family;  // linear, tree_ensemble
  std::size_t bundle_bytes = 0;
  std::size_t loaded_bytes = 0;  // Bundle::memory_bytes()
  int threads = 0;
  std::vector<RequestSizeProfile> sizes;
};

// Starts a server on loopback (a temporary workspace holding the bundle) for the server half.
// InvalidArgument when a request size is 0 or larger than the rows given, or the rows do not fit
// the model.
Result<ProfileReport> profile_model(const ProfileOptions& options);

}  // namespace slipway::optimize
