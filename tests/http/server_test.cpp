// The http module on its own: routes, connection limits, the body budget, running out of file
// descriptors, and draining, against a real server on loopback.
#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "slipway/http.h"
#include "support/test_support.h"

namespace slipway::http {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

Route text_route(std::string prefix, std::string text, Execution execution = Execution::kEventLoop) {
  return Route{std::move(prefix), [execution](const Request&) { return execution; },
               [text = std::move(text)](const Request& request, const Respond& respond) {
                 respond(Response{200, "text/plain", text + " " + std::string(request.path), {}});
               }};
}

// A server running on its own thread for the test's lifetime.
class RunningServer {
 public:
  RunningServer(std::vector<Route> routes, ServerOptions options) {
    options.port = 0;
    server_ = std::move(Server::start(std::move(routes), options)).value();
    runner_ = std::jthread([this] { server_->run(); });
  }
  ~RunningServer() {
    server_->stop();
    runner_.join();
  }
  Server& server() { return *server_; }
  int port() const { return server_->port(); }

 private:
  std::unique_ptr<Server> server_;
  std::jthread runner_;
};

asio::ip::tcp::endpoint local(int port) {
  return {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)};
}

// Reads until the peer closes or `limit` passes; returns what arrived.
std::string read_all(asio::ip::tcp::socket& socket, std::chrono::milliseconds limit = 5000ms) {
  std::string received;
  auto deadline = std::chrono::steady_clock::now() + limit;
  socket.non_blocking(true);
  char buffer[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    boost::system::error_code error;
    std::size_t count = socket.read_some(asio::buffer(buffer), error);
    if (error == asio::error::would_block) {
      std::this_thread::sleep_for(5ms);
      continue;
    }
    received.append(buffer, count);
    if (error) break;
  }
  return received;
}

TEST(HttpServer, LongestPrefixWinsAndUnknownPathsGet404) {
  std::vector<Refusal> refusals;
  std::mutex mutex;
  ServerOptions options;
  options.on_refusal = [&](const Request&, Refusal refusal) {
    std::lock_guard lock(mutex);
    refusals.push_back(refusal);
  };
  RunningServer running({text_route("/v2", "v2"), text_route("/v2/models", "models", Execution::kWorker),
                         text_route("/metrics", "metrics")},
                        options);
  int port = running.port();
  EXPECT_EQ(testing::http_request(port, "GET", "/v2/health").body, "v2 /v2/health");
  EXPECT_EQ(testing::http_request(port, "GET", "/v2/models/x?y=1").body, "models /v2/models/x");
  EXPECT_EQ(testing::http_request(port, "GET", "/metrics").body, "metrics /metrics");
  EXPECT_EQ(testing::http_request(port, "GET", "/v2models").status, 404);
  EXPECT_EQ(testing::http_request(port, "GET", "/metricsx").status, 404);
  std::lock_guard lock(mutex);
  EXPECT_EQ(refusals.size(), 2u);
}

// Regression: 21k idle connections exhausted the descriptors and health checks timed out. At
// max_connections the connection idle the longest makes room.
TEST(HttpServer, AtMaxConnectionsTheLongestIdleConnectionMakesRoom) {
  ServerOptions options;
  options.max_connections = 4;
  RunningServer running({text_route("/v2", "v2")}, options);
  int port = running.port();
  asio::io_context io;
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> idle;
  for (int index = 0; index < 4; ++index) {
    idle.push_back(std::make_unique<asio::ip::tcp::socket>(io));
    idle.back()->connect(local(port));
    std::this_thread::sleep_for(20ms);  // so their idle times differ
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(testing::http_request(port, "GET", "/v2/health/live").status, 200);
  // The first idle connection was closed by the server.
  EXPECT_EQ(read_all(*idle[0], 2000ms), "");
  EXPECT_GE(running.server().stats().connections_evicted, 1u);
}

// Regression: six 34 MB bodies at once peaked at 1.3 GB. Bodies are admitted against a shared
// budget once their headers say how large they are.
TEST(HttpServer, BodiesInFlightStayWithinTheBudget) {
  ServerOptions options;
  options.max_body_bytes = 1000;
  options.max_inflight_body_bytes = 1500;
  RunningServer running({text_route("/v2", "v2", Execution::kWorker)}, options);
  int port = running.port();
  asio::io_context io;
  asio::ip::tcp::socket slow(io);
  slow.connect(local(port));
  // 900 bytes announced, half sent: the reservation holds while the body trickles in.
  asio::write(slow, asio::buffer(std::string("POST /v2/x HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n") +
                                 std::string(450, 'a')));
  std::this_thread::sleep_for(100ms);
  auto refused = testing::http_request(port, "POST", "/v2/y", std::string(800, 'b'));
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("too many request bodies"), std::string::npos);
  EXPECT_EQ(testing::http_request(port, "POST", "/v2/y", std::string(500, 'b')).status, 200);
  asio::write(slow, asio::buffer(std::string(450, 'a')));
  std::string answer = read_all(slow, 300ms);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_EQ(testing::http_request(port, "POST", "/v2/y", std::string(800, 'b')).status, 200);
  // Released once each response is written (just after the client has it).
  for (int attempt = 0; attempt < 100 && running.server().stats().inflight_body_bytes != 0; ++attempt) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(running.server().stats().inflight_body_bytes, 0u);
}

// Bodies count at their bytes while they arrive and at body_memory_factor times their size once
// they are handled; a budget that could not hold one body at the limit is refused.
TEST(HttpServer, BodiesCountAtTheirMemoryFactor) {
  ServerOptions options;
  options.max_body_bytes = 1000;
  options.body_memory_factor = 8;
  std::mutex mutex;
  std::condition_variable released;
  bool go = false;
  Route held{"/held", [](const Request&) { return Execution::kWorker; },
             [&](const Request&, const Respond& respond) {
               std::unique_lock lock(mutex);
               released.wait(lock, [&] { return go; });
               respond(Response{200, "text/plain", "done", {}});
             }};
  RunningServer running({held, text_route("/quick", "quick")}, options);  // budget 16,000
  int port = running.port();
  asio::io_context io;
  asio::ip::tcp::socket first(io), second(io), slow(io);
  for (auto* socket : {&first, &second, &slow}) socket->connect(local(port));
  // Two 900-byte bodies being handled: 14,400 counted.
  for (auto* socket : {&first, &second}) {
    asio::write(*socket, asio::buffer(std::string("POST /held HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n") +
                                      std::string(900, 'a')));
  }
  for (int attempt = 0; attempt < 200 && running.server().stats().inflight_body_bytes < 14'400; ++attempt) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(running.server().stats().inflight_body_bytes, 14'400u);
  // One arriving slowly holds its bytes only: 450 of 900 sent, 900 counted.
  asio::write(slow, asio::buffer(std::string("POST /quick HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n") +
                                 std::string(450, 'c')));
  for (int attempt = 0; attempt < 200 && running.server().stats().inflight_body_bytes < 15'300; ++attempt) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(running.server().stats().inflight_body_bytes, 15'300u);
  EXPECT_EQ(testing::http_request(port, "POST", "/quick", std::string(300, 'b')).status, 503);  // 2,400 more
  EXPECT_EQ(testing::http_request(port, "POST", "/quick", std::string(80, 'b')).status, 200);   // 640 more
  {
    std::lock_guard lock(mutex);
    go = true;
  }
  released.notify_all();
  for (auto* socket : {&first, &second}) {
    std::string answer = read_all(*socket, 1000ms);
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  }
  ServerOptions too_small = options;
  too_small.max_inflight_body_bytes = 7999;
  EXPECT_FALSE(Server::start({text_route("/quick", "quick")}, too_small).ok());
}

// What arrives in one write is parsed at once, request after request: pipelined GETs, a body
// with its headers, a chunked body, then Connection: close. Each is answered in order, and the
// handler sees each body whole.
TEST(HttpServer, PipelinedAndChunkedRequestsInOneWriteAreAnsweredInOrder) {
  Route echo{"/v2", [](const Request&) { return Execution::kEventLoop; },
             [](const Request& request, const Respond& respond) {
               respond(Response{200, "text/plain", std::string(request.path) + "=" + std::string(request.body), {}});
             }};
  RunningServer running({echo}, ServerOptions{});
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect(local(running.port()));
  asio::write(socket, asio::buffer(std::string("GET /v2/a HTTP/1.1\r\nHost: x\r\n\r\n"
                                               "GET /v2/b HTTP/1.1\r\nHost: x\r\n\r\n"
                                               "POST /v2/c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                                               "POST /v2/d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                               "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                                               "GET /v2/e HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
  std::string answers = read_all(socket);
  std::size_t at = 0;
  for (const char* expected : {"/v2/a=", "/v2/b=", "/v2/c=hello", "/v2/d=abcde", "/v2/e="}) {
    std::size_t found = answers.find(expected, at);
    ASSERT_NE(found, std::string::npos) << expected << " missing or out of order in:\n" << answers;
    at = found + 1;
  }
  EXPECT_EQ(running.server().stats().inflight_body_bytes, 0u);
}

// A request whose client has gone before a worker takes it is not handled (nginx's 499): the one
// worker is held busy while a second client sends a request and closes; once released, the
// worker drops that request and the server reports the refusal.
TEST(HttpServer, ARequestWhoseClientLeftIsNotHandled) {
  std::mutex gate;
  std::unique_lock hold(gate);
  std::atomic<int> handled{0};
  std::atomic<int> client_closed{0};
  Route slow{"/v2", [](const Request&) { return Execution::kWorker; },
             [&](const Request&, const Respond& respond) {
               std::lock_guard wait(gate);  // the first request waits here until released
               ++handled;
               respond(Response{200, "text/plain", "done", {}});
             }};
  ServerOptions options;
  options.worker_threads = 1;
  options.on_refusal = [&](const Request&, Refusal refusal) {
    if (refusal == Refusal::kClientClosed) ++client_closed;
  };
  RunningServer running({slow}, options);
  asio::io_context io;
  asio::ip::tcp::socket busy(io), gone(io);
  busy.connect(local(running.port()));
  asio::write(busy, asio::buffer(std::string("GET /v2/first HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
  std::this_thread::sleep_for(100ms);  // the worker is now inside the first request
  gone.connect(local(running.port()));
  asio::write(gone, asio::buffer(std::string("GET /v2/second HTTP/1.1\r\nHost: x\r\n\r\n")));
  gone.close();
  std::this_thread::sleep_for(100ms);  // the server has read the second request and seen the close
  hold.unlock();
  EXPECT_NE(read_all(busy, 1000ms).find("HTTP/1.1 200"), std::string::npos);
  for (int attempt = 0; attempt < 100 && client_closed.load() == 0; ++attempt) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(client_closed.load(), 1);
  EXPECT_EQ(handled.load(), 1);
}

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// Regression: out of file descriptors, the accept loop spun at 100% CPU. It backs off now, and
// serves again once descriptors free up.
TEST(HttpServer, OutOfDescriptorsTheAcceptLoopBacksOff) {
  // One I/O thread and one worker, both seen running before descriptors run out: a thread still
  // starting then trips UBSan's vptr check, which needs a pipe to read the vtable.
  ServerOptions options;
  options.io_threads = 1;
  options.worker_threads = 1;
  RunningServer running({text_route("/v2", "v2", Execution::kWorker)}, options);
  int port = running.port();
  ASSERT_EQ(testing::http_request(port, "GET", "/v2/health/live").status, 200);
  // The logger is created on first use; create it before descriptors run out, as a server does at
  // start (its first log lines).
  log_info("lowering the open-file limit");
  rlimit original{};
  getrlimit(RLIMIT_NOFILE, &original);
  rlimit lowered = original;
  lowered.rlim_cur = open_descriptors() + 2;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  // Connections from another process, whose descriptors do not count against ours.
  pid_t child = fork();
  if (child == 0) {
    setrlimit(RLIMIT_NOFILE, &original);  // the child inherited the lowered limit
    std::vector<int> sockets;
    for (int index = 0; index < 8; ++index) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      auto endpoint = local(port);
      // A failed connect leaves the parent fewer connections; its accept_errors check sees that.
      (void)::connect(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size()));
      sockets.push_back(fd);
    }
    ::sleep(3);
    _exit(0);
  }
  std::this_thread::sleep_for(300ms);
  double cpu_before = process_cpu_seconds();
  std::this_thread::sleep_for(1000ms);
  double cpu_used = process_cpu_seconds() - cpu_before;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
  EXPECT_LT(cpu_used, 0.3) << "the accept loop spun";
  EXPECT_GT(running.server().stats().accept_errors, 0u);
  EXPECT_EQ(testing::http_request(port, "GET", "/v2/health/live").status, 200);
  int status = 0;
  waitpid(child, &status, 0);
}

// Regression: draining reset keep-alive connections, and queued requests still waiting at the
// drain deadline were closed without a response.
TEST(HttpServer, DrainAnswersInFlightRequestsWithConnectionClose) {
  std::mutex mutex;
  std::vector<Respond> parked;  // answered only at the drain deadline
  ServerOptions options;
  options.drain_timeout = 300ms;
  options.on_drain_deadline = [&] {
    std::lock_guard lock(mutex);
    for (auto& respond : parked) respond(error_response(503, "the server is shutting down"));
    parked.clear();
  };
  Route slow{"/slow", [](const Request&) { return Execution::kWorker; },
             [](const Request&, const Respond& respond) {
               std::this_thread::sleep_for(150ms);
               respond(Response{200, "text/plain", "done", {}});
             }};
  Route never{"/queued", [](const Request&) { return Execution::kWorker; },
              [&](const Request&, const Respond& respond) {
                std::lock_guard lock(mutex);
                parked.push_back(respond);
              }};
  options.port = 0;
  auto server = std::move(Server::start({slow, never, text_route("/v2", "v2")}, options)).value();
  std::jthread runner([&] { server->run(); });
  int port = server->port();
  asio::io_context io;
  asio::ip::tcp::socket in_flight(io), queued(io), idle(io), arriving(io);
  in_flight.connect(local(port));
  queued.connect(local(port));
  idle.connect(local(port));
  arriving.connect(local(port));
  asio::write(in_flight, asio::buffer(std::string("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")));
  asio::write(queued, asio::buffer(std::string("GET /queued HTTP/1.1\r\nHost: x\r\n\r\n")));
  // A keep-alive client whose next request is half sent when the drain starts.
  asio::write(arriving, asio::buffer(std::string("GET /v2 HTTP/1.1\r\nHost: x\r\n")));
  std::this_thread::sleep_for(50ms);
  server->stop();
  std::this_thread::sleep_for(30ms);
  asio::write(arriving, asio::buffer(std::string("\r\n")));
  std::string arriving_answer = read_all(arriving);
  EXPECT_EQ(arriving_answer.rfind("HTTP/1.1 200", 0), 0u) << arriving_answer;
  EXPECT_NE(arriving_answer.find("Connection: close"), std::string::npos) << arriving_answer;
  std::string slow_answer = read_all(in_flight);
  EXPECT_EQ(slow_answer.rfind("HTTP/1.1 200", 0), 0u) << slow_answer;
  EXPECT_NE(slow_answer.find("Connection: close"), std::string::npos) << slow_answer;
  std::string queued_answer = read_all(queued);
  EXPECT_EQ(queued_answer.rfind("HTTP/1.1 503", 0), 0u) << queued_answer;
  EXPECT_EQ(read_all(idle), "");  // closed cleanly, with nothing sent
  runner.join();
}

}  // namespace
}  // namespace slipway::http

namespace slipway::http {
namespace {

// A route that streams `count` chunks from its own thread, `pause` apart, and records whether
// the producer saw its client leave.
struct StreamingRoute {
  std::atomic<bool> saw_gone{false};
  std::atomic<int> written{0};
  std::vector<std::jthread> producers;
  std::mutex mutex;

  Route route(int count, std::chrono::milliseconds pause) {
    return Route{"/stream", nullptr, [this, count, pause](const Request&, const Respond& respond) {
                   Response response{200, "text/event-stream", {}, {}};
                   response.start_stream = [this, count, pause](const std::shared_ptr<ResponseStream>& stream) {
                     std::lock_guard lock(mutex);
                     producers.emplace_back([this, stream, count, pause] {
                       for (int i = 0; i < count; ++i) {
                         if (stream->client_gone() || !stream->write("data: " + std::to_string(i) + "\n\n")) {
                           saw_gone = true;
                           return;
                         }
                         ++written;
                         std::this_thread::sleep_for(pause);
                       }
                       stream->finish();
                     });
                   };
                   respond(std::move(response));
                 }};
  }
  ~StreamingRoute() {
    std::lock_guard lock(mutex);
    producers.clear();
  }
};

TEST(HttpServer, AStreamedResponseArrivesChunkedAndTheConnectionServesTheNextRequest) {
  StreamingRoute streaming;
  RunningServer running({streaming.route(3, 10ms), text_route("/after", "after")}, ServerOptions{});
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect(local(running.port()));
  std::string request =
      "GET /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  asio::write(socket, asio::buffer(request));
  std::string received = read_all(socket);
  EXPECT_NE(received.find("Transfer-Encoding: chunked"), std::string::npos) << received;
  EXPECT_NE(received.find("text/event-stream"), std::string::npos);
  auto first = received.find("data: 0"), second = received.find("data: 1"), third = received.find("data: 2");
  EXPECT_TRUE(first != std::string::npos && first < second && second < third) << received;
  auto last_chunk = received.find("\r\n0\r\n\r\n");
  ASSERT_NE(last_chunk, std::string::npos) << received;
  EXPECT_NE(received.find("after /after", last_chunk), std::string::npos) << received;
}

TEST(HttpServer, AStreamsProducerLearnsThatItsClientLeft) {
  StreamingRoute streaming;
  RunningServer running({streaming.route(100000, 1ms)}, ServerOptions{});
  {
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    socket.connect(local(running.port()));
    asio::write(socket, asio::buffer(std::string("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")));
    std::this_thread::sleep_for(100ms);
  }  // closed mid-stream
  for (int i = 0; i < 200 && !streaming.saw_gone; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(streaming.saw_gone.load());
  EXPECT_LT(streaming.written.load(), 100000);
  // The producer can learn of the close before the server's own thread has closed the connection.
  for (int i = 0; i < 200 && running.server().stats().connections_open != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(running.server().stats().connections_open, 0u);
}

TEST(HttpServer, AHandlerCanAskWhetherItsClientLeft) {
  std::promise<bool> gone;
  std::atomic<bool> answered{false};
  Route slow{"/slow", [](const Request&) { return Execution::kWorker; },
             [&](const Request& request, const Respond& respond) {
               auto client_gone = request.client_gone;
               bool left = false;
               for (int i = 0; i < 300 && !left; ++i) {
                 std::this_thread::sleep_for(10ms);
                 left = client_gone();
               }
               gone.set_value(left);
               answered = true;
               respond(Response{200, "text/plain", "late", {}});
             }};
  RunningServer running({slow}, ServerOptions{});
  {
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    socket.connect(local(running.port()));
    asio::write(socket, asio::buffer(std::string("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")));
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(gone.get_future().get());
}

}  // namespace
}  // namespace slipway::http
