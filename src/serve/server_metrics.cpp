#include "serve/server_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "slipway/core.h"

namespace slipway::serve {
namespace {

std::string number_text(double value) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return {buffer, result.ptr};
}

}  // namespace

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

namespace {

// The failure reason of a response that did not say one, from its HTTP status.
std::string reason_for_status(int status) {
  switch (status) {
    case 400:
      return "invalid_request";
    case 401:
      return "unauthenticated";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 409:
      return "conflict";
    case 413:
      return "body_too_large";
    case 429:
      return "queue_full";
    case 431:
      return "headers_too_large";
    case 503:
      return "unavailable";
    default:
      return status >= 500 ? "internal" : "client_error";
  }
}

std::string model_labels(const std::string& model, const std::string& version) {
  return "model=\"" + label_value(model) + "\",version=\"" + label_value(version) + "\"";
}

// The entry of (model, version) in `map`, created on first use; a lookup allocates nothing.
template <typename Map>
typename Map::mapped_type& entry(Map& map, std::string_view model, std::string_view version) {
  auto found = map.find(std::pair<std::string_view, std::string_view>{model, version});
  if (found == map.end()) {
    found = map.emplace(typename Map::key_type{std::string(model), std::string(version)}, typename Map::mapped_type{})
                .first;
  }
  return found->second;
}

template <typename Map, typename Third>
typename Map::mapped_type& entry(Map& map, std::string_view model, std::string_view version, const Third& third) {
  auto found = map.find(std::tuple<std::string_view, std::string_view, Third>{model, version, third});
  if (found == map.end()) {
    found = map.emplace(typename Map::key_type{std::string(model), std::string(version), third},
                        typename Map::mapped_type{})
                .first;
  }
  return found->second;
}

// The routes counted by record_route; anything else counts as "other".
constexpr std::array<std::string_view, 12> kRoutes = {
    "infer",       "health", "server_metadata", "model_metadata", "model_ready", "model_config",
    "model_stats", "stats",  "repository",      "management",     "metrics",     "other"};

std::size_t route_index(std::string_view route) {
  for (std::size_t index = 0; index < kRoutes.size(); ++index) {
    if (kRoutes[index] == route) return index;
  }
  return kRoutes.size() - 1;
}

// The process_* metrics Prometheus client libraries export, read from /proc at scrape time.
void append_process_metrics(std::string& out) {
  auto gauge = [&](std::string_view name, std::string_view type, std::string_view help, double value) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n";
    out += "# TYPE " + std::string(name) + " " + std::string(type) + "\n";
    out += std::string(name) + " " + number_text(value) + "\n";
  };
  long page_size = ::sysconf(_SC_PAGESIZE);
  long ticks = ::sysconf(_SC_CLK_TCK);
  std::ifstream stat("/proc/self/stat");
  std::string stat_line;
  if (std::getline(stat, stat_line)) {
    // Fields after the command name (which may hold spaces) start at the last ')'.
    std::istringstream fields(stat_line.substr(stat_line.rfind(')') + 2));
    std::vector<std::string> values{std::istream_iterator<std::string>(fields), {}};
    // values[0] is field 3 (state): utime is field 14, stime 15, starttime 22, rss 24.
    if (values.size() > 21 && ticks > 0) {
      double cpu = (std::stod(values[11]) + std::stod(values[12])) / static_cast<double>(ticks);
      gauge("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.", cpu);
      gauge("process_resident_memory_bytes", "gauge", "Resident memory size, in bytes.",
            std::stod(values[21]) * static_cast<double>(page_size));
      std::ifstream uptime_file("/proc/uptime");
      double uptime = 0;
      if (uptime_file >> uptime) {
        double started_ago = uptime - std::stod(values[19]) / static_cast<double>(ticks);
        gauge("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.",
              static_cast<double>(unix_time_ms()) / 1000.0 - started_ago);
      }
    }
  }
  std::error_code error;
  std::size_t open_fds = 0;
  for (std::filesystem::directory_iterator entry("/proc/self/fd", error), end; !error && entry != end;
       entry.increment(error)) {
    ++open_fds;
  }
  gauge("process_open_fds", "gauge", "Open file descriptors.", static_cast<double>(open_fds));
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    gauge("process_max_fds", "gauge", "The limit on open file descriptors.", static_cast<double>(limit.rlim_cur));
  }
  out += "# HELP slipway_build_info The build: version and git commit, as labels.\n";
  out += "# TYPE slipway_build_info gauge\n";
  out += "slipway_build_info{version=\"" + label_value(slipway_version()) + "\",commit=\"" +
         label_value(slipway_code_version()) + "\"} 1\n";
}

}  // namespace

void ServerMetrics::record_route(std::string_view route, int status, double seconds) {
  std::lock_guard lock(mutex_);
  RouteSeries& series = routes_[route_index(route)];
  ++series.statuses[status];
  series.latency.add(seconds);
}

void ServerMetrics::append_histogram(std::string& out, std::string_view name, std::string_view help,
                                     const ByModel<Latency>& series) {
  std::string metric(name);
  out += "# HELP " + metric + " " + std::string(help) + "\n";
  out += "# TYPE " + metric + " histogram\n";
  for (const auto& [key, latency] : series)
    append_histogram_lines(out, metric, model_labels(key.first, key.second), latency);
}

void ServerMetrics::append_histogram_lines(std::string& out, std::string_view metric, std::string_view labels,
                                           const Latency& latency) {
  auto line = [&out](std::initializer_list<std::string_view> parts) {
    for (std::string_view part : parts) out.append(part);
  };
  std::uint64_t cumulative = 0;
  for (std::size_t bucket = 0; bucket < kLatencyBuckets.size(); ++bucket) {
    cumulative += latency.buckets[bucket];
    line({metric, "_bucket{", labels, ",le=\"", number_text(kLatencyBuckets[bucket]), "\"} ",
          std::to_string(cumulative), "\n"});
  }
  cumulative += latency.buckets.back();
  line({metric, "_bucket{", labels, ",le=\"+Inf\"} ", std::to_string(cumulative), "\n"});
  line({metric, "_sum{", labels, "} ", number_text(latency.sum_seconds), "\n"});
  line({metric, "_count{", labels, "} ", std::to_string(latency.count), "\n"});
}

void ServerMetrics::Latency::add(double seconds) {
  std::size_t bucket = 0;
  while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
  ++buckets[bucket];
  sum_seconds += seconds;
  ++count;
}

void ServerMetrics::record(std::string_view model, std::string_view version, int status, double seconds,
                           std::size_t rows, bool inference, std::string_view failure_reason) {
  std::lock_guard lock(mutex_);
  ++entry(requests_, model, version, status);
  if (status >= 400) {
    std::string derived = failure_reason.empty() ? reason_for_status(status) : std::string();
    ++entry(failures_, model, version, failure_reason.empty() ? std::string_view(derived) : failure_reason);
  }
  Latency& latency = entry(latency_, model, version);
  latency.add(seconds);
  latency.rows += rows;
  if (inference && !version.empty()) {
    Outcome& outcome = entry(outcomes_, model, version)[status >= 200 && status < 300 ? 0 : 1];
    ++outcome.count;
    outcome.seconds += seconds;
    if (status >= 200 && status < 300) entry(last_inference_ms_, model, version) = unix_time_ms();
  }
}

void ServerMetrics::change_pending(std::string_view model, std::string_view version, int delta) {
  std::lock_guard lock(mutex_);
  entry(pending_, model, version) += delta;
}

void ServerMetrics::set_loaded(std::string_view model, std::string_view version, std::size_t memory_bytes) {
  std::lock_guard lock(mutex_);
  entry(loaded_bytes_, model, version) = memory_bytes;
}

void ServerMetrics::set_unloaded(std::string_view model, std::string_view version, std::string_view reason) {
  std::lock_guard lock(mutex_);
  auto loaded = loaded_bytes_.find(std::pair<std::string_view, std::string_view>{model, version});
  if (loaded != loaded_bytes_.end()) loaded_bytes_.erase(loaded);
  ++entry(unloads_, model, reason);
}

void ServerMetrics::record_load(std::string_view model, bool succeeded) {
  std::lock_guard lock(mutex_);
  ++entry(loads_, model, succeeded ? "success" : "failure");
}

void ServerMetrics::record_execution(std::string_view model, std::string_view version, std::size_t rows, bool batched,
                                     double compute_seconds) {
  std::lock_guard lock(mutex_);
  Executions& executions = entry(executions_, model, version);
  ++executions.count;
  executions.rows += rows;
  if (batched) {
    ++executions.batched_count;
    executions.batched_rows += rows;
  }
  // As Triton counts them: every execution by its size, a lone request's rows or a batch's. The
  // sizes are capped so that clients cannot grow the map, and a lone request's new size takes
  // only the first half of the room, so request sizes cannot crowd out the batcher's.
  auto found = executions.by_batch_size.find(rows);
  std::size_t room = batched ? kMaxBatchSizes : kMaxBatchSizes / 2;
  if (found == executions.by_batch_size.end() && executions.by_batch_size.size() < room) {
    found = executions.by_batch_size.emplace(rows, Outcome{}).first;
  }
  if (found != executions.by_batch_size.end()) {
    ++found->second.count;
    found->second.seconds += compute_seconds;
  }
}

void ServerMetrics::record_stage(std::string_view model, std::string_view version, Stage stage, double seconds) {
  std::lock_guard lock(mutex_);
  entry(stages_, model, version)[static_cast<std::size_t>(stage)].add(seconds);
}

void ServerMetrics::record_cache(std::string_view model, std::string_view version, bool hit) {
  std::lock_guard lock(mutex_);
  ++entry(cache_lookups_, model, version)[hit ? 0 : 1];
}

void ServerMetrics::record_endpoint(std::string_view endpoint, std::string_view route) {
  std::lock_guard lock(mutex_);
  ++entry(endpoint_requests_, endpoint, route);
}

void ServerMetrics::record_fallback(std::string_view endpoint, std::string_view route, FallbackReason reason,
                                    FallbackAnswer answer) {
  std::lock_guard lock(mutex_);
  ++entry(endpoint_fallbacks_, endpoint,
          route)[static_cast<std::size_t>(reason) * 4 + static_cast<std::size_t>(answer)];
}

void ServerMetrics::record_shadow(std::string_view endpoint, std::string_view route, ShadowOutcome outcome,
                                  double seconds, std::size_t rows, std::size_t agreeing,
                                  std::span<const double> differences) {
  std::lock_guard lock(mutex_);
  ShadowSeries& series = entry(shadows_, endpoint, route);
  ++series.outcomes[static_cast<std::size_t>(outcome)];
  if (outcome != ShadowOutcome::kAnswered) return;
  series.latency.add(seconds);
  series.rows += rows;
  series.agreeing += agreeing;
  for (double difference : differences) series.differences.add(difference);
}

void ServerMetrics::set_cache_bytes(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  cache_enabled_ = true;
  cache_bytes_ = bytes;
}

std::string ServerMetrics::stats_json(std::string_view model, std::string_view version) const {
  std::lock_guard lock(mutex_);
  JsonWriter json;
  json.begin_object().key("model_stats").begin_array();
  for (const auto& [key, outcome] : outcomes_) {
    if (!model.empty() && key.first != model) continue;
    if (!version.empty() && key.second != version) continue;
    auto executions = executions_.find(key);
    auto stages = stages_.find(key);
    auto last = last_inference_ms_.find(key);
    json.begin_object().key("name").value(key.first).key("version").value(key.second);
    json.key("last_inference").value(last == last_inference_ms_.end() ? std::int64_t{0} : last->second);
    json.key("inference_count").value(executions == executions_.end() ? std::uint64_t{0} : executions->second.rows);
    json.key("execution_count").value(executions == executions_.end() ? std::uint64_t{0} : executions->second.count);
    json.key("inference_stats").begin_object();
    auto duration = [&](std::string_view name, std::uint64_t count, double seconds) {
      json.key(name).begin_object().key("count").value(count);
      json.key("ns").value(static_cast<std::uint64_t>(seconds * 1e9)).end_object();
    };
    duration("success", outcome[0].count, outcome[0].seconds);
    duration("fail", outcome[1].count, outcome[1].seconds);
    static constexpr std::array<std::string_view, 4> kStageNames = {"queue", "compute_input", "compute_infer",
                                                                    "compute_output"};
    for (std::size_t stage = 0; stage < kStageNames.size(); ++stage) {
      const Latency* latency = stages == stages_.end() ? nullptr : &stages->second[stage];
      duration(kStageNames[stage], latency == nullptr ? 0 : latency->count,
               latency == nullptr ? 0.0 : latency->sum_seconds);
    }
    // Triton counts cache hits and misses with their time; Slipway times neither (a hit is one
    // lookup), so ns is 0.
    auto cache = cache_lookups_.find(key);
    duration("cache_hit", cache == cache_lookups_.end() ? 0 : cache->second[0], 0.0);
    duration("cache_miss", cache == cache_lookups_.end() ? 0 : cache->second[1], 0.0);
    json.end_object();
    json.key("batch_stats").begin_array();
    if (executions != executions_.end()) {
      for (const auto& [batch_size, outcome] : executions->second.by_batch_size) {
        json.begin_object().key("batch_size").value(static_cast<std::uint64_t>(batch_size));
        duration("compute_infer", outcome.count, outcome.seconds);
        json.end_object();
      }
    }
    json.end_array();
    json.end_object();
  }
  json.end_array().end_object();
  return json.take();
}

std::string ServerMetrics::prometheus_text() const {
  std::string out;
  append_process_metrics(out);
  std::lock_guard lock(mutex_);
  out += "# HELP slipway_http_requests_total HTTP requests by route (infer, health, model_metadata, ...) and status.\n";
  out += "# TYPE slipway_http_requests_total counter\n";
  for (std::size_t index = 0; index < kRoutes.size(); ++index) {
    for (const auto& [status, count] : routes_[index].statuses) {
      out += "slipway_http_requests_total{route=\"" + std::string(kRoutes[index]) + "\",code=\"" +
             std::to_string(status) + "\"} " + std::to_string(count) + "\n";
    }
  }
  out += "# HELP slipway_http_request_duration_seconds Time from a request's arrival to its response, by route.\n";
  out += "# TYPE slipway_http_request_duration_seconds histogram\n";
  for (std::size_t index = 0; index < kRoutes.size(); ++index) {
    const Latency& latency = routes_[index].latency;
    if (latency.count == 0) continue;
    append_histogram_lines(out, "slipway_http_request_duration_seconds",
                           "route=\"" + std::string(kRoutes[index]) + "\"", latency);
  }
  out += "# HELP slipway_requests_total Inference requests by model, version and HTTP status code.\n";
  out += "# TYPE slipway_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    const auto& [model, version, status] = key;
    out += "slipway_requests_total{" + model_labels(model, version) + ",code=\"" + std::to_string(status) + "\"} " +
           std::to_string(count) + "\n";
  }
  out += "# HELP slipway_request_failures_total Failed inference requests by model, version and reason.\n";
  out += "# TYPE slipway_request_failures_total counter\n";
  for (const auto& [key, count] : failures_) {
    const auto& [model, version, reason] = key;
    out += "slipway_request_failures_total{" + model_labels(model, version) + ",reason=\"" + label_value(reason) +
           "\"} " + std::to_string(count) + "\n";
  }
  out += "# HELP slipway_pending_requests Requests a model accepted and has not answered yet (queued or computing).\n";
  out += "# TYPE slipway_pending_requests gauge\n";
  for (const auto& [key, count] : pending_) {
    out += "slipway_pending_requests{" + model_labels(key.first, key.second) + "} " + std::to_string(count) + "\n";
  }
  out += "# HELP slipway_models_loaded Model versions loaded in the server.\n";
  out += "# TYPE slipway_models_loaded gauge\n";
  out += "slipway_models_loaded " + std::to_string(loaded_bytes_.size()) + "\n";
  out += "# HELP slipway_model_memory_bytes Memory held by a loaded model version (its arrays and vocabularies).\n";
  out += "# TYPE slipway_model_memory_bytes gauge\n";
  std::size_t total_bytes = 0;
  for (const auto& [key, bytes] : loaded_bytes_) {
    out += "slipway_model_memory_bytes{" + model_labels(key.first, key.second) + "} " + std::to_string(bytes) + "\n";
    total_bytes += bytes;
  }
  out += "# HELP slipway_models_memory_bytes Memory held by all loaded model versions.\n";
  out += "# TYPE slipway_models_memory_bytes gauge\n";
  out += "slipway_models_memory_bytes " + std::to_string(total_bytes) + "\n";
  out += "# HELP slipway_model_loads_total Model load attempts by model and result.\n";
  out += "# TYPE slipway_model_loads_total counter\n";
  for (const auto& [key, count] : loads_) {
    out += "slipway_model_loads_total{model=\"" + label_value(key.first) + "\",result=\"" + key.second + "\"} " +
           std::to_string(count) + "\n";
  }
  out +=
      "# HELP slipway_model_unloads_total Model versions unloaded, by reason (idle, operator, swap, memory_budget).\n";
  out += "# TYPE slipway_model_unloads_total counter\n";
  for (const auto& [key, count] : unloads_) {
    out += "slipway_model_unloads_total{model=\"" + label_value(key.first) + "\",reason=\"" + key.second + "\"} " +
           std::to_string(count) + "\n";
  }
  out += "# HELP slipway_inference_rows_total Rows scored (a request of N rows counts N).\n";
  out += "# TYPE slipway_inference_rows_total counter\n";
  for (const auto& [key, latency] : latency_) {
    out += "slipway_inference_rows_total{" + model_labels(key.first, key.second) + "} " + std::to_string(latency.rows) +
           "\n";
  }
  append_histogram(out, "slipway_request_duration_seconds",
                   "Time from an inference request's arrival to its response, in the server.", latency_);
  out +=
      "# HELP slipway_executions_total Model calls, batched or not (inference rows / executions is the "
      "achieved batch size).\n";
  out += "# TYPE slipway_executions_total counter\n";
  for (const auto& [key, executions] : executions_) {
    out += "slipway_executions_total{" + model_labels(key.first, key.second) + "} " + std::to_string(executions.count) +
           "\n";
  }
  out += "# HELP slipway_batch_executions_total Model calls made by dynamic batchers.\n";
  out += "# TYPE slipway_batch_executions_total counter\n";
  for (const auto& [key, executions] : executions_) {
    out += "slipway_batch_executions_total{" + model_labels(key.first, key.second) + "} " +
           std::to_string(executions.batched_count) + "\n";
  }
  out += "# HELP slipway_batch_rows_total Rows scored by dynamic batchers' model calls.\n";
  out += "# TYPE slipway_batch_rows_total counter\n";
  for (const auto& [key, executions] : executions_) {
    out += "slipway_batch_rows_total{" + model_labels(key.first, key.second) + "} " +
           std::to_string(executions.batched_rows) + "\n";
  }
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kStages = {{
      {"slipway_queue_duration_seconds", "Time a request waited in its model's batch queue."},
      {"slipway_preprocess_duration_seconds", "Time parsing a request and preprocessing its rows."},
      {"slipway_compute_duration_seconds", "Time in the model call that scored a request (its batch's, when batched)."},
      {"slipway_postprocess_duration_seconds", "Time writing a request's response."},
  }};
  for (std::size_t stage = 0; stage < kStages.size(); ++stage) {
    ByModel<Latency> series;
    for (const auto& [key, latencies] : stages_) {
      if (latencies[stage].count > 0) series[key] = latencies[stage];
    }
    append_histogram(out, kStages[stage].first, kStages[stage].second, series);
  }
  if (!endpoint_requests_.empty()) {
    out +=
        "# HELP slipway_endpoint_requests_total Infer requests to an endpoint, by the version they were routed to.\n";
    out += "# TYPE slipway_endpoint_requests_total counter\n";
    for (const auto& [key, count] : endpoint_requests_) {
      out += "slipway_endpoint_requests_total{endpoint=\"" + label_value(key.first) + "\",route=\"" +
             label_value(key.second) + "\"} " + std::to_string(count) + "\n";
    }
  }
  if (!shadows_.empty()) {
    auto labels = [](const ModelKey& key) {
      return "endpoint=\"" + label_value(key.first) + "\",route=\"" + label_value(key.second) + "\"";
    };
    out += "# HELP slipway_shadow_requests_total Copies of endpoint requests sent to its shadow version, by outcome.\n";
    out += "# TYPE slipway_shadow_requests_total counter\n";
    static constexpr std::array<std::string_view, 3> kOutcomes = {"answered", "failed", "dropped"};
    for (const auto& [key, series] : shadows_) {
      for (std::size_t outcome = 0; outcome < kOutcomes.size(); ++outcome) {
        out += "slipway_shadow_requests_total{" + labels(key) + ",outcome=\"" + std::string(kOutcomes[outcome]) +
               "\"} " + std::to_string(series.outcomes[outcome]) + "\n";
      }
    }
    out += "# HELP slipway_shadow_rows_compared_total Rows whose live and shadow labels were compared.\n";
    out += "# TYPE slipway_shadow_rows_compared_total counter\n";
    for (const auto& [key, series] : shadows_) {
      out += "slipway_shadow_rows_compared_total{" + labels(key) + "} " + std::to_string(series.rows) + "\n";
    }
    out += "# HELP slipway_shadow_rows_agreeing_total Compared rows where the shadow gave the live label.\n";
    out += "# TYPE slipway_shadow_rows_agreeing_total counter\n";
    for (const auto& [key, series] : shadows_) {
      out += "slipway_shadow_rows_agreeing_total{" + labels(key) + "} " + std::to_string(series.agreeing) + "\n";
    }
    out += "# HELP slipway_shadow_score_difference Absolute difference between each live and shadow score.\n";
    out += "# TYPE slipway_shadow_score_difference histogram\n";
    for (const auto& [key, series] : shadows_) {
      append_histogram_lines(out, "slipway_shadow_score_difference", labels(key), series.differences);
    }
    out += "# HELP slipway_shadow_latency_seconds Time the shadow version took to answer a copy.\n";
    out += "# TYPE slipway_shadow_latency_seconds histogram\n";
    for (const auto& [key, series] : shadows_) {
      append_histogram_lines(out, "slipway_shadow_latency_seconds", labels(key), series.latency);
    }
  }
  if (!endpoint_fallbacks_.empty()) {
    out +=
        "# HELP slipway_endpoint_fallbacks_total Requests a route failed (reason error) or did not answer in time "
        "(reason deadline), by what the endpoint's fallback answered (degraded): another version, the cached "
        "answer, the constant, or none (the failure was returned).\n";
    out += "# TYPE slipway_endpoint_fallbacks_total counter\n";
    constexpr std::array<const char*, 2> kReasons = {"error", "deadline"};
    constexpr std::array<const char*, 4> kAnswers = {"version", "cached", "constant", "none"};
    for (const auto& [key, counts] : endpoint_fallbacks_) {
      for (std::size_t index = 0; index < counts.size(); ++index) {
        if (counts[index] == 0) continue;
        out += "slipway_endpoint_fallbacks_total{endpoint=\"" + label_value(key.first) + "\",route=\"" +
               label_value(key.second) + "\",reason=\"" + kReasons[index / 4] + "\",answer=\"" + kAnswers[index % 4] +
               "\"} " + std::to_string(counts[index]) + "\n";
      }
    }
  }
  if (cache_enabled_) {
    out += "# HELP slipway_cache_hits_total Infer requests answered from the response cache.\n";
    out += "# TYPE slipway_cache_hits_total counter\n";
    for (const auto& [key, lookups] : cache_lookups_) {
      out +=
          "slipway_cache_hits_total{" + model_labels(key.first, key.second) + "} " + std::to_string(lookups[0]) + "\n";
    }
    out += "# HELP slipway_cache_misses_total Infer requests of cached models that were computed.\n";
    out += "# TYPE slipway_cache_misses_total counter\n";
    for (const auto& [key, lookups] : cache_lookups_) {
      out += "slipway_cache_misses_total{" + model_labels(key.first, key.second) + "} " + std::to_string(lookups[1]) +
             "\n";
    }
    out += "# HELP slipway_cache_bytes Bytes held by the response cache.\n";
    out += "# TYPE slipway_cache_bytes gauge\n";
    out += "slipway_cache_bytes " + std::to_string(cache_bytes_) + "\n";
  }
  return out;
}

}  // namespace slipway::serve
