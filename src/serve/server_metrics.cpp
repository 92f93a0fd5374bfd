#include "serve/server_metrics.h"

#include <charconv>

namespace slipway::serve {
namespace {

std::string number_text(double value) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return {buffer, result.ptr};
}

// Label values escape backslash, quote and newline (Prometheus exposition format).
std::string label_value(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string model_labels(const std::string& model, const std::string& version) {
  return "model=\"" + label_value(model) + "\",version=\"" + label_value(version) + "\"";
}

}  // namespace

void ServerMetrics::append_histogram(std::string& out, std::string_view name, std::string_view help,
                                     const std::map<ModelKey, Latency>& series) {
  std::string metric(name);
  out += "# HELP " + metric + " " + std::string(help) + "\n";
  out += "# TYPE " + metric + " histogram\n";
  for (const auto& [key, latency] : series) {
    std::string labels = model_labels(key.first, key.second);
    std::uint64_t cumulative = 0;
    for (std::size_t bucket = 0; bucket < kLatencyBuckets.size(); ++bucket) {
      cumulative += latency.buckets[bucket];
      out += metric + "_bucket{" + labels + ",le=\"" + number_text(kLatencyBuckets[bucket]) + "\"} " +
             std::to_string(cumulative) + "\n";
    }
    cumulative += latency.buckets.back();
    out += metric + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
    out += metric + "_sum{" + labels + "} " + number_text(latency.sum_seconds) + "\n";
    out += metric + "_count{" + labels + "} " + std::to_string(latency.count) + "\n";
  }
}

void ServerMetrics::Latency::add(double seconds) {
  std::size_t bucket = 0;
  while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
  ++buckets[bucket];
  sum_seconds += seconds;
  ++count;
}

void ServerMetrics::record(std::string_view model, std::string_view version, int status, double seconds,
                           std::size_t rows) {
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(model), std::string(version), status}];
  Latency& latency = latency_[{std::string(model), std::string(version)}];
  latency.add(seconds);
  latency.rows += rows;
}

void ServerMetrics::record_execution(std::string_view model, std::string_view version, std::size_t rows) {
  std::lock_guard lock(mutex_);
  Executions& executions = executions_[{std::string(model), std::string(version)}];
  ++executions.count;
  executions.rows += rows;
}

void ServerMetrics::record_queue(std::string_view model, std::string_view version, double seconds) {
  std::lock_guard lock(mutex_);
  queue_[{std::string(model), std::string(version)}].add(seconds);
}

std::string ServerMetrics::prometheus_text() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out += "# HELP slipway_requests_total Model requests by model, version and HTTP status code.\n";
  out += "# TYPE slipway_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    const auto& [model, version, status] = key;
    out += "slipway_requests_total{" + model_labels(model, version) + ",code=\"" + std::to_string(status) + "\"} " +
           std::to_string(count) + "\n";
  }
  out += "# HELP slipway_inference_rows_total Rows scored (a request of N rows counts N).\n";
  out += "# TYPE slipway_inference_rows_total counter\n";
  for (const auto& [key, latency] : latency_) {
    out += "slipway_inference_rows_total{" + model_labels(key.first, key.second) + "} " + std::to_string(latency.rows) +
           "\n";
  }
  append_histogram(out, "slipway_request_duration_seconds", "Time from a request's arrival to its response, in the server.",
                   latency_);
  out += "# HELP slipway_batch_executions_total Model calls made by dynamic batchers (rows / executions is the "
         "achieved batch size).\n";
  out += "# TYPE slipway_batch_executions_total counter\n";
  for (const auto& [key, executions] : executions_) {
    out += "slipway_batch_executions_total{" + model_labels(key.first, key.second) + "} " +
           std::to_string(executions.count) + "\n";
  }
  out += "# HELP slipway_batch_rows_total Rows scored by dynamic batchers' model calls.\n";
  out += "# TYPE slipway_batch_rows_total counter\n";
  for (const auto& [key, executions] : executions_) {
    out += "slipway_batch_rows_total{" + model_labels(key.first, key.second) + "} " + std::to_string(executions.rows) +
           "\n";
  }
  append_histogram(out, "slipway_queue_duration_seconds", "Time a request waited in its model's batch queue.", queue_);
  return out;
}

}  // namespace slipway::serve
