// The load generator: HTTP/1.1 keep-alive connections on asio event loops (one per generator
// thread), an arrival schedule for the open loop, a fixed set of busy connections for the closed
// loop. Each thread runs its own share of the load and keeps its own latencies; they are merged
// at the end.
#include <utility>  // Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <thread>

#include "slipway/optimize.h"

namespace slipway::optimize {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Target {
  std::string host;
  std::string port;
  std::string path;
};

Result<Target> parse_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) return invalid_argument("the URL must start with http:// (got '" + url + "')");
  std::string rest = url.substr(kScheme.size());
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  Target target;
  target.path = slash == std::string::npos ? "/" : rest.substr(slash);
  auto colon = authority.rfind(':');
  target.host = authority.substr(0, colon);
  target.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  if (target.host.empty()) return invalid_argument("the URL '" + url + "' has no host");
  return target;
}

// What one generator thread measured.
struct Tally {
  std::vector<double> latencies_ms;
  std::map<int, std::uint64_t> status_counts;
  std::uint64_t succeeded = 0;
  std::uint64_t late_sends = 0;
  Clock::time_point last_completion{};
  int connections = 0;
};

class Generator {
 public:
  Generator(const LoadTestOptions& options, const Target& target, tcp::resolver::results_type endpoints,
            double rate, int concurrency, std::uint64_t seed, std::atomic<std::uint64_t>& completed)
      : options_(options),
        target_(target),
        endpoints_(std::move(endpoints)),
        rate_(rate),
        concurrency_(concurrency),
        random_(seed),
        completed_(completed),
        timer_(io_) {}

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
        asio::post(io_, [this] { dispatch(Clock::now()); });
      }
    }
    io_.run();
    return std::move(tally_);
  }

 private:
  struct Request {
    Clock::time_point intended;
    std::size_t body_index = 0;
  };

  struct Connection {
    explicit Connection(asio::io_context& io) : stream(io) {}
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    // The body views the stored request body: sending copies nothing.
    http::request<http::span_body<const char>> request;
    http::response<http::string_body> response;
    Request current;
    bool connected = false;
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
    timer_.expires_at(next_intended_);
    timer_.async_wait([this](beast::error_code error) {
      if (!error) schedule();
    });
  }

  void dispatch(Clock::time_point intended) {
    Request request{intended, body_counter_++};
    ++outstanding_;
    if (!idle_.empty()) {
      auto connection = idle_.back();
      idle_.pop_back();
      send(connection, request);
    } else if (open_connections_ < options_.max_connections) {
      ++open_connections_;
      tally_.connections = std::max(tally_.connections, open_connections_);
      send(std::make_shared<Connection>(io_), request);
    } else {
      // Every connection is busy: the request waits, and its latency keeps counting from its
      // intended time.
      queue_.push_back(request);
    }
  }

  void send(const std::shared_ptr<Connection>& connection, Request request) {
    connection->current = request;
    Clock::time_point now = Clock::now();
    if (now - request.intended > options_.timeout) {
      complete(connection, 0, false);
      return;
    }
    if (open_loop() && recorded(request) && now - request.intended > std::chrono::milliseconds(1)) {
      ++tally_.late_sends;
    }
    auto& message = connection->request;
    message = {};
    message.version(11);
    message.target(target_.path);
    message.set(http::field::host, target_.host);
    message.set(http::field::user_agent, "slipway-loadtest");
    for (const auto& [name, value] : options_.headers) message.set(name, value);
    if (options_.bodies.empty()) {
      message.method(http::verb::get);
    } else {
      message.method(http::verb::post);
      if (message.find(http::field::content_type) == message.end()) {
        message.set(http::field::content_type, "application/json");
      }
      const std::string& body = options_.bodies[request.body_index % options_.bodies.size()];
      message.body() = http::span_body<const char>::value_type(body.data(), body.size());
    }
    message.keep_alive(true);
    message.prepare_payload();
    connection->stream.expires_at(request.intended + options_.timeout);
    if (!connection->connected) {
      connection->stream.async_connect(endpoints_, [this, connection](beast::error_code error, const tcp::endpoint&) {
        if (error) {
          complete(connection, 0, false);
          return;
        }
        connection->connected = true;
        connection->stream.socket().set_option(tcp::no_delay(true));
        write(connection);
      });
    } else {
      write(connection);
    }
  }

  void write(const std::shared_ptr<Connection>& connection) {
    http::async_write(connection->stream, connection->request,
                      [this, connection](beast::error_code error, std::size_t) {
                        if (error) {
                          complete(connection, 0, false);
                          return;
                        }
                        connection->response = {};
                        http::async_read(connection->stream, connection->buffer, connection->response,
                                         [this, connection](beast::error_code read_error, std::size_t) {
                                           if (read_error) {
                                             complete(connection, 0, false);
                                             return;
                                           }
                                           complete(connection, connection->response.result_int(),
                                                    connection->response.keep_alive());
                                         });
                      });
  }

  void complete(const std::shared_ptr<Connection>& connection, int status, bool reusable) {
    Clock::time_point now = Clock::now();
    const Request& request = connection->current;
    if (recorded(request)) {
      tally_.latencies_ms.push_back(std::chrono::duration<double, std::milli>(now - request.intended).count());
      ++tally_.status_counts[status];
      if (status >= 200 && status < 300) ++tally_.succeeded;
      tally_.last_completion = std::max(tally_.last_completion, now);
      completed_.fetch_add(1, std::memory_order_relaxed);
    }
    --outstanding_;
    if (!reusable) {
      beast::error_code ignored;
      connection->stream.socket().close(ignored);
      connection->connected = false;
    }
    if (!open_loop()) {
      if (now < end_) {
        dispatch_on(connection, now);
      } else {
        close(connection);
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
    idle_.push_back(connection);
    finish_if_idle();
  }

  // Closed loop: the connection that finished sends the next request at once.
  void dispatch_on(const std::shared_ptr<Connection>& connection, Clock::time_point now) {
    ++outstanding_;
    send(connection, Request{now, body_counter_++});
  }

  void close(const std::shared_ptr<Connection>& connection) {
    beast::error_code ignored;
    connection->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection->stream.socket().close(ignored);
  }

  void finish_if_idle() {
    bool done = open_loop() ? schedule_done_ && outstanding_ == 0 : outstanding_ == 0;
    if (!done) return;
    for (auto& connection : idle_) close(connection);
    idle_.clear();
  }

  const LoadTestOptions& options_;
  Target target_;
  tcp::resolver::results_type endpoints_;
  double rate_;
  int concurrency_;
  std::mt19937_64 random_;
  std::atomic<std::uint64_t>& completed_;
  asio::io_context io_;
  asio::steady_timer timer_;
  Clock::time_point start_, window_start_, end_, next_intended_;
  bool schedule_done_ = false;
  std::size_t body_counter_ = 0;
  int outstanding_ = 0;
  int open_connections_ = 0;
  std::vector<std::shared_ptr<Connection>> idle_;
  std::deque<Request> queue_;
  Tally tally_;
};

double percentile(const std::vector<double>& sorted, double share) {
  if (sorted.empty()) return 0.0;
  auto index = static_cast<std::size_t>(std::ceil(share * static_cast<double>(sorted.size()))) ;
  return sorted[std::min(sorted.size() - 1, index == 0 ? 0 : index - 1)];
}

}  // namespace

Result<LoadTestReport> run_load_test(const LoadTestOptions& options) {
  if ((options.rate > 0) == (options.concurrency > 0)) {
    return invalid_argument("give either a rate (open loop) or a concurrency (closed loop), not both or neither");
  }
  if (options.duration.count() <= 0) return invalid_argument("the duration must be positive");
  SLIPWAY_ASSIGN_OR_RETURN(Target target, parse_url(options.url));
  tcp::resolver::results_type endpoints;
  {
    asio::io_context io;
    tcp::resolver resolver(io);
    beast::error_code error;
    endpoints = resolver.resolve(target.host, target.port, error);
    if (error) return invalid_argument("cannot resolve '" + target.host + "': " + error.message());
  }
  int threads = std::max(1, options.threads);
  if (options.concurrency > 0) threads = std::min(threads, options.concurrency);
  std::atomic<std::uint64_t> completed{0};
  // Each thread takes an equal share: rate / threads, or its part of the concurrency and of the
  // connection limit.
  std::vector<LoadTestOptions> shares(static_cast<std::size_t>(threads), options);
  std::vector<std::unique_ptr<Generator>> generators;
  for (int index = 0; index < threads; ++index) {
    int concurrency = options.concurrency > 0
                          ? options.concurrency / threads + (index < options.concurrency % threads ? 1 : 0)
                          : 0;
    LoadTestOptions& share = shares[static_cast<std::size_t>(index)];
    share.max_connections = std::max(1, options.max_connections / threads);
    generators.push_back(std::make_unique<Generator>(share, target, endpoints, options.rate / threads, concurrency,
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
  if (limit.empty() || end != limit.c_str() + limit.size() || !(value > 0)) return fail();
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
