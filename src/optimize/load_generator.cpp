// The load generator: HTTP/1.1 keep-alive connections (the http module's client) on one event
// loop per generator thread, an arrival schedule for the open loop, a fixed set of busy
// connections for the closed loop. Each thread runs its own share of the load and keeps its own
// latencies; they are merged at the end.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "slipway/http.h"
#include "slipway/optimize.h"

namespace slipway::optimize {
namespace {

using Clock = std::chrono::steady_clock;

// What one generator thread measured.
struct Tally {
  std::vector<double> latencies_ms;
  std::map<int, std::uint64_t> status_counts;
  std::uint64_t succeeded = 0;
  std::uint64_t late_sends = 0;
  Clock::time_point last_completion{};
  int connections = 0;
};

// The request line and headers every request of a load test carries.
http::ClientRequest request_for(const LoadTestOptions& options, const http::Url& url) {
  http::ClientRequest request;
  request.method = options.bodies.empty() ? "GET" : "POST";
  request.target = url.target;
  request.headers.emplace_back("User-Agent", "slipway-loadtest");
  bool has_content_type = false;
  for (const auto& [name, value] : options.headers) {
    request.headers.emplace_back(name, value);
    if (name.size() == 12 && std::equal(name.begin(), name.end(), "content-type", [](char left, char right) {
          return std::tolower(static_cast<unsigned char>(left)) == right;
        })) {
      has_content_type = true;
    }
  }
  if (!options.bodies.empty() && !has_content_type) request.headers.emplace_back("Content-Type", "application/json");
  return request;
}

class Generator {
 public:
  Generator(const LoadTestOptions& options, http::ClientEndpoint endpoint, http::ClientRequest request, double rate,
            int concurrency, std::uint64_t seed, std::atomic<std::uint64_t>& completed)
      : options_(options),
        endpoint_(std::move(endpoint)),
        request_(std::move(request)),
        rate_(rate),
        concurrency_(concurrency),
        seed_(seed),
        random_(seed),
        completed_(completed) {}

  // Runs the schedule from `start` and returns when every request has an answer or timed out.
  Tally run(Clock::time_point start) {
    start_ = start;
    window_start_ = start + options_.warmup;
    end_ = window_start_ + options_.duration;
    if (rate_ > 0) {
      next_intended_ = start_;
      schedule();
    } else {
      for (int index = 0; index < concurrency_; ++index) {
        loop_.post([this] { dispatch(Clock::now()); });
      }
    }
    loop_.run();
    return std::move(tally_);
  }

 private:
  struct Request {
    Clock::time_point intended;
    std::size_t body_index = 0;
  };

  struct Connection {
    std::unique_ptr<http::ClientConnection> client;
    Request current;
    std::string body;  // the body in flight under a repeat rate (the client views it)
  };

  bool recorded(const Request& request) const { return request.intended >= window_start_; }
  bool open_loop() const { return rate_ > 0; }

  void schedule() {
    Clock::time_point now = Clock::now();
    while (next_intended_ <= now && next_intended_ < end_) {
      dispatch(next_intended_);
      double gap = options_.poisson ? std::exponential_distribution<double>(rate_)(random_) : 1.0 / rate_;
      next_intended_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap));
    }
    if (next_intended_ >= end_) {
      schedule_done_ = true;
      finish_if_idle();
      return;
    }
    timer_.wait_until(next_intended_, [this] { schedule(); });
  }

  void dispatch(Clock::time_point intended) {
    Request request{intended, body_counter_++};
    ++outstanding_;
    if (!idle_.empty()) {
      Connection* connection = idle_.back();
      idle_.pop_back();
      send(*connection, request);
    } else if (open_connections_ < options_.max_connections) {
      ++open_connections_;
      tally_.connections = std::max(tally_.connections, open_connections_);
      send(open_connection(), request);
    } else {
      // Every connection is busy: the request waits, and its latency keeps counting from its
      // intended time.
      queue_.push_back(request);
    }
  }

  Connection& open_connection() {
    auto connection = std::make_unique<Connection>();
    Connection* raw = connection.get();
    // Two pointers: the callback fits std::function's inline storage, so it allocates nothing.
    raw->client =
        std::make_unique<http::ClientConnection>(loop_, endpoint_, [this, raw](int status) { complete(*raw, status); });
    raw->client->set_request(request_);
    connections_.push_back(std::move(connection));
    return *raw;
  }

  void send(Connection& connection, Request request) {
    connection.current = request;
    Clock::time_point now = Clock::now();
    if (now - request.intended > options_.timeout) {
      complete(connection, 0);
      return;
    }
    if (open_loop() && recorded(request) && now - request.intended > std::chrono::milliseconds(1)) {
      ++tally_.late_sends;
    }
    std::string_view body;
    if (!options_.bodies.empty()) body = options_.bodies[request.body_index % options_.bodies.size()];
    if (options_.repeat_rate) {
      connection.body = repeat_or_make_unique(body);
      body = connection.body;
    }
    // The client closes the connection after an error, a timeout or a response without
    // keep-alive, and reconnects on the next send.
    connection.client->send(body, request.intended + options_.timeout);
  }

  // With the repeat rate's probability one of the last kRecentBodies bodies sent, byte for byte;
  // otherwise `body` with {"id":"u<seed>-<n>" in front of its members: a KServe v2 request id no
  // earlier request had, so nothing cached can answer it.
  std::string repeat_or_make_unique(std::string_view body) {
    constexpr std::size_t kRecentBodies = 256;
    if (!recent_.empty() && std::uniform_real_distribution<double>(0.0, 1.0)(random_) < *options_.repeat_rate) {
      return recent_[std::uniform_int_distribution<std::size_t>(0, recent_.size() - 1)(random_)];
    }
    std::string_view members = body.substr(1);
    std::size_t first = members.find_first_not_of(" \t\r\n");
    const char* separator = first == std::string_view::npos || members[first] == '}' ? "" : ",";
    std::string unique = fmt::format(R"({{"id":"u{}-{}"{}{})", seed_, ++unique_bodies_, separator, members);
    if (recent_.size() < kRecentBodies) {
      recent_.push_back(unique);
    } else {
      recent_[unique_bodies_ % kRecentBodies] = unique;
    }
    return unique;
  }

  void complete(Connection& connection, int status) {
    Clock::time_point now = Clock::now();
    const Request& request = connection.current;
    if (recorded(request)) {
      tally_.latencies_ms.push_back(std::chrono::duration<double, std::milli>(now - request.intended).count());
      ++tally_.status_counts[status];
      if (status >= 200 && status < 300) ++tally_.succeeded;
      tally_.last_completion = std::max(tally_.last_completion, now);
      completed_.fetch_add(1, std::memory_order_relaxed);
    }
    --outstanding_;
    if (!open_loop()) {
      if (now < end_) {
        // Closed loop: the connection that finished sends the next request at once.
        ++outstanding_;
        send(connection, Request{now, body_counter_++});
      } else {
        connection.client->close();
        finish_if_idle();
      }
      return;
    }
    if (!queue_.empty()) {
      Request next = queue_.front();
      queue_.pop_front();
      send(connection, next);
      return;
    }
    idle_.push_back(&connection);
    finish_if_idle();
  }

  void finish_if_idle() {
    bool done = open_loop() ? schedule_done_ && outstanding_ == 0 : outstanding_ == 0;
    if (!done) return;
    for (Connection* connection : idle_) connection->client->close();
    idle_.clear();
  }

  const LoadTestOptions& options_;
  http::ClientEndpoint endpoint_;
  http::ClientRequest request_;
  double rate_;
  int concurrency_;
  std::uint64_t seed_;
  std::mt19937_64 random_;
  std::atomic<std::uint64_t>& completed_;
  // Declared before the timer and the connections, so it outlives them.
  http::ClientLoop loop_;
  http::ClientTimer timer_{loop_};
  Clock::time_point start_, window_start_, end_, next_intended_;
  bool schedule_done_ = false;
  std::size_t body_counter_ = 0;
  std::uint64_t unique_bodies_ = 0;
  std::vector<std::string> recent_;  // under a repeat rate: the last unique bodies sent
  int outstanding_ = 0;
  int open_connections_ = 0;
  std::vector<std::unique_ptr<Connection>> connections_;  // every connection opened
  std::vector<Connection*> idle_;
  std::deque<Request> queue_;
  Tally tally_;
};

double percentile(const std::vector<double>& sorted, double share) {
  if (sorted.empty()) return 0.0;
  auto index = static_cast<std::size_t>(std::ceil(share * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, index == 0 ? 0 : index - 1)];
}

}  // namespace

Result<LoadTestReport> run_load_test(const LoadTestOptions& options) {
  if (options.repeat_rate) {
    if (!(*options.repeat_rate >= 0.0 && *options.repeat_rate <= 1.0)) {
      return invalid_argument("the repeat rate must be from 0 to 1");
    }
    if (options.bodies.empty()) return invalid_argument("a repeat rate needs request bodies");
    for (const auto& body : options.bodies) {
      if (body.empty() || body.front() != '{') {
        return invalid_argument("a repeat rate needs JSON object bodies (each starting with '{')");
      }
    }
  }
  if ((options.rate > 0) == (options.concurrency > 0)) {
    return invalid_argument("give either a rate (open loop) or a concurrency (closed loop), not both or neither");
  }
  if (options.duration.count() <= 0) return invalid_argument("the duration must be positive");
  SLIPWAY_ASSIGN_OR_RETURN(http::Url url, http::parse_url(options.url));
  SLIPWAY_ASSIGN_OR_RETURN(http::ClientEndpoint endpoint, http::ClientEndpoint::resolve(url.host, url.port));
  http::ClientRequest request = request_for(options, url);
  int threads = std::max(1, options.threads);
  if (options.concurrency > 0) threads = std::min(threads, options.concurrency);
  std::atomic<std::uint64_t> completed{0};
  // Each thread takes an equal share: rate / threads, or its part of the concurrency and of the
  // connection limit.
  std::vector<LoadTestOptions> shares(static_cast<std::size_t>(threads), options);
  std::vector<std::unique_ptr<Generator>> generators;
  for (int index = 0; index < threads; ++index) {
    int concurrency =
        options.concurrency > 0 ? options.concurrency / threads + (index < options.concurrency % threads ? 1 : 0) : 0;
    LoadTestOptions& share = shares[static_cast<std::size_t>(index)];
    share.max_connections = std::max(1, options.max_connections / threads);
    generators.push_back(std::make_unique<Generator>(share, endpoint, request, options.rate / threads, concurrency,
                                                     options.seed + static_cast<std::uint64_t>(index), completed));
  }
  Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);
  std::vector<Tally> tallies(generators.size());
  {
    std::vector<std::jthread> workers;
    for (std::size_t index = 0; index < generators.size(); ++index) {
      workers.emplace_back([&, index] { tallies[index] = generators[index]->run(start); });
    }
    if (options.on_progress) {
      // About once a second until the schedule ends; the workers then finish their stragglers.
      std::uint64_t previous = 0;
      Clock::time_point previous_time = start;
      Clock::time_point schedule_end = start + options.warmup + options.duration;
      while (Clock::now() < schedule_end) {
        std::this_thread::sleep_until(std::min(schedule_end, Clock::now() + std::chrono::seconds(1)));
        std::uint64_t now_completed = completed.load();
        Clock::time_point now = Clock::now();
        double seconds = std::chrono::duration<double>(now - previous_time).count();
        options.on_progress(std::chrono::duration<double>(now - start).count(), now_completed,
                            seconds > 0 ? static_cast<double>(now_completed - previous) / seconds : 0.0);
        previous = now_completed;
        previous_time = now;
      }
    }
  }
  LoadTestReport report;
  report.target_rate = options.rate;
  std::vector<double> latencies;
  Clock::time_point last_completion = start;
  for (auto& tally : tallies) {
    latencies.insert(latencies.end(), tally.latencies_ms.begin(), tally.latencies_ms.end());
    for (const auto& [status, count] : tally.status_counts) report.status_counts[status] += count;
    report.succeeded += tally.succeeded;
    report.late_sends += tally.late_sends;
    report.connections_used += tally.connections;
    last_completion = std::max(last_completion, tally.last_completion);
  }
  std::sort(latencies.begin(), latencies.end());
  report.sent = latencies.size();
  // The measured window ends with the duration, or with the last answer to a request sent in it.
  Clock::time_point window_start = start + options.warmup;
  report.measured_seconds = std::max(std::chrono::duration<double>(options.duration).count(),
                                     std::chrono::duration<double>(last_completion - window_start).count());
  report.achieved_rate = static_cast<double>(report.sent) / report.measured_seconds;
  if (!latencies.empty()) {
    double total = 0;
    for (double value : latencies) total += value;
    report.mean_ms = total / static_cast<double>(latencies.size());
    report.p50_ms = percentile(latencies, 0.50);
    report.p90_ms = percentile(latencies, 0.90);
    report.p95_ms = percentile(latencies, 0.95);
    report.p99_ms = percentile(latencies, 0.99);
    report.p999_ms = percentile(latencies, 0.999);
    report.max_ms = latencies.back();
  }
  return report;
}

Result<LatencySlo> parse_latency_slo(const std::string& text) {
  auto fail = [&] {
    return invalid_argument("--slo '" + text +
                            "' must look like p95<=50ms (statistics: p50, p90, p95, p99, p99.9, max, mean; "
                            "units: us, ms, s)");
  };
  auto at = text.find("<=");
  if (at == std::string::npos) return fail();
  LatencySlo slo;
  slo.text = text;
  slo.statistic = text.substr(0, at);
  static const std::vector<std::string> kStatistics = {"p50", "p90", "p95", "p99", "p99.9", "max", "mean"};
  if (std::find(kStatistics.begin(), kStatistics.end(), slo.statistic) == kStatistics.end()) return fail();
  std::string limit = text.substr(at + 2);
  double scale = 0;
  if (limit.ends_with("us")) {
    scale = 1e-3;
    limit.resize(limit.size() - 2);
  } else if (limit.ends_with("ms")) {
    scale = 1.0;
    limit.resize(limit.size() - 2);
  } else if (limit.ends_with("s")) {
    scale = 1e3;
    limit.resize(limit.size() - 1);
  } else {
    return fail();
  }
  char* end = nullptr;
  double value = std::strtod(limit.c_str(), &end);
  if (limit.empty() || end != limit.c_str() + limit.size() || !(value > 0) || !std::isfinite(value)) return fail();
  slo.limit_ms = value * scale;
  return slo;
}

double latency_statistic(const LoadTestReport& report, const std::string& statistic) {
  if (statistic == "p50") return report.p50_ms;
  if (statistic == "p90") return report.p90_ms;
  if (statistic == "p95") return report.p95_ms;
  if (statistic == "p99") return report.p99_ms;
  if (statistic == "p99.9") return report.p999_ms;
  if (statistic == "max") return report.max_ms;
  return report.mean_ms;
}

}  // namespace slipway::optimize
