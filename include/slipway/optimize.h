// slipway/optimize.h — making models fast and cheap against explicit service-level objectives.
// For now: the load generator that measures a served model honestly.
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
#include <string>
#include <utility>
#include <vector>

#include "slipway/core.h"

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

}  // namespace slipway::optimize
