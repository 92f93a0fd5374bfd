// Request counters and latency histograms, exposed in Prometheus text format. Private to serve.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace slipway::serve {

class ServerMetrics {
 public:
  // Bucket upper bounds in seconds (Prometheus `le`), plus +Inf.
  static constexpr std::array<double, 14> kLatencyBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                             0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5};

  // One finished request for `model`/`version` ("" when the request named no servable model).
  void record(std::string_view model, std::string_view version, int status, double seconds, std::size_t rows);
  // One model call of a dynamic batch of `rows` rows (inference count vs execution count).
  void record_execution(std::string_view model, std::string_view version, std::size_t rows);
  // Time one request waited in a batch queue.
  void record_queue(std::string_view model, std::string_view version, double seconds);
  std::string prometheus_text() const;

 private:
  struct Latency {
    std::array<std::uint64_t, kLatencyBuckets.size() + 1> buckets{};
    double sum_seconds = 0.0;
    std::uint64_t count = 0;
    std::uint64_t rows = 0;
    void add(double seconds);
  };
  struct Executions {
    std::uint64_t count = 0;
    std::uint64_t rows = 0;
  };
  using ModelKey = std::pair<std::string, std::string>;

  static void append_histogram(std::string& out, std::string_view name, std::string_view help,
                               const std::map<ModelKey, Latency>& series);

  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> requests_;
  std::map<ModelKey, Latency> latency_;
  std::map<ModelKey, Executions> executions_;
  std::map<ModelKey, Latency> queue_;
};

}  // namespace slipway::serve
