// The http module's client against an in-process http::Server on loopback: keep-alive reuse,
// deadlines, refused connections, URL parsing and the blocking fetch().
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "slipway/http.h"

namespace slipway::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// "/echo" answers with the request's body and its X-Tag header; "/slow" answers after 400 ms,
// from a worker.
std::atomic<int> slow_answers{0};  // how many times "/slow" has answered

std::vector<Route> test_routes() {
  Route echo{"/echo", [](const Request&) { return Execution::kEventLoop; },
             [](const Request& request, const Respond& respond) {
               Response response{200, "text/plain", std::string(request.body), {}};
               response.headers.emplace_back("X-Tag", std::string(request.header("x-tag")));
               respond(std::move(response));
             }};
  Route slow{"/slow", [](const Request&) { return Execution::kWorker; },
             [](const Request&, const Respond& respond) {
               std::this_thread::sleep_for(400ms);
               ++slow_answers;
               respond(Response{200, "text/plain", "late", {}});
             }};
  return {std::move(echo), std::move(slow)};
}

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.port = 0;
    options.worker_threads = 2;
    options.drain_timeout = 1000ms;
    server_ = std::move(Server::start(test_routes(), options)).value();
    runner_ = std::jthread([this] { server_->run(); });
    endpoint_ = std::make_unique<ClientEndpoint>(ClientEndpoint::resolve("127.0.0.1", server_->port()).value());
  }
  void TearDown() override {
    server_->stop();
    runner_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }

  std::unique_ptr<Server> server_;
  std::jthread runner_;
  std::unique_ptr<ClientEndpoint> endpoint_;
};

TEST_F(HttpClientTest, SendsSeveralRequestsOnOneKeepAliveConnection) {
  ClientLoop loop;
  std::vector<int> statuses;
  std::vector<std::string> bodies;
  const std::vector<std::string> to_send = {"first", "", "third request"};
  ClientConnection* connection_ptr = nullptr;
  ClientConnection connection(loop, *endpoint_, [&](int status) {
    statuses.push_back(status);
    bodies.emplace_back(connection_ptr->response_body());
    EXPECT_EQ(connection_ptr->response_header("x-tag"), "abc");
    EXPECT_TRUE(connection_ptr->connected());
    if (statuses.size() < to_send.size()) connection_ptr->send(to_send[statuses.size()], Clock::now() + 5s);
  });
  connection_ptr = &connection;
  connection.set_request(ClientRequest{"POST", "/echo", {{"X-Tag", "abc"}}});
  EXPECT_FALSE(connection.connected());
  connection.send(to_send[0], Clock::now() + 5s);
  loop.run();  // returns once the last callback sent nothing more
  EXPECT_EQ(statuses, (std::vector<int>{200, 200, 200}));
  EXPECT_EQ(bodies, to_send);
  EXPECT_EQ(server_->stats().connections_accepted, 1u);
  connection.close();
  EXPECT_FALSE(connection.connected());
}

TEST_F(HttpClientTest, PassedDeadlineGivesZeroClosesAndTheNextSendReconnects) {
  ClientLoop loop;
  std::vector<int> statuses;
  ClientConnection* connection_ptr = nullptr;
  bool timed_out = false, answered_first = true;
  std::string failure;
  const int slow_answers_before = slow_answers.load();
  ClientConnection connection(loop, *endpoint_, [&](int status) {
    statuses.push_back(status);
    if (statuses.size() == 1) {
      answered_first = slow_answers.load() > slow_answers_before;
      timed_out = connection_ptr->timed_out();
      failure = connection_ptr->failure();
      EXPECT_FALSE(connection_ptr->connected());  // closed after the timeout
      connection_ptr->set_request(ClientRequest{"GET", "/echo", {}});
      connection_ptr->send({}, Clock::now() + 5s);
    }
  });
  connection_ptr = &connection;
  connection.set_request(ClientRequest{"GET", "/slow", {}});
  connection.send({}, Clock::now() + 100ms);
  loop.run();
  EXPECT_EQ(statuses, (std::vector<int>{0, 200}));
  EXPECT_TRUE(timed_out);
  EXPECT_NE(failure.find("before the deadline"), std::string::npos) << failure;
  EXPECT_FALSE(answered_first);  // the timeout did not wait for the slow answer
  EXPECT_EQ(connection.failure(), "");
  EXPECT_EQ(server_->stats().connections_accepted, 2u);  // the second send reconnected
}

TEST(HttpClient, RefusedConnectionGivesZero) {
  ClientLoop loop;
  ClientEndpoint endpoint = ClientEndpoint::resolve("127.0.0.1", 1).value();
  int calls = 0;
  int last_status = -1;
  ClientConnection connection(loop, endpoint, [&](int status) {
    ++calls;
    last_status = status;
  });
  connection.send({}, Clock::now() + 5s);
  loop.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(last_status, 0);
  EXPECT_FALSE(connection.timed_out());
  EXPECT_FALSE(connection.connected());
  EXPECT_NE(connection.failure().find("cannot connect to 127.0.0.1:1"), std::string::npos) << connection.failure();
  auto fetched = fetch("GET", "http://127.0.0.1:1/");
  EXPECT_EQ(fetched.status().code(), StatusCode::kUnavailable);
}

TEST(HttpClient, DestroyingAConnectionInFlightCallsNothing) {
  ClientLoop loop;
  ClientEndpoint endpoint = ClientEndpoint::resolve("127.0.0.1", 1).value();
  int calls = 0;
  {
    ClientConnection connection(loop, endpoint, [&](int) { ++calls; });
    connection.send({}, Clock::now() + 5s);
  }
  loop.run();
  EXPECT_EQ(calls, 0);
}

TEST(HttpClient, TimerFiresOnceAndALaterWaitReplacesAnEarlierOne) {
  ClientLoop loop;
  ClientTimer timer(loop);
  std::vector<int> fired;
  timer.wait_until(Clock::now() + 1h, [&] { fired.push_back(1); });
  timer.wait_until(Clock::now() + 10ms, [&] {
    fired.push_back(2);
    timer.wait_until(Clock::now(), [&] { fired.push_back(3); });
  });
  std::atomic<bool> posted{false};
  loop.post([&] { posted = true; });
  loop.run();
  EXPECT_TRUE(posted);
  EXPECT_EQ(fired, (std::vector<int>{2, 3}));
}

TEST_F(HttpClientTest, FetchReturnsStatusBodyAndHeaders) {
  auto response = fetch("POST", url("/echo"), "hello", {{"X-Tag", "t1"}});
  ASSERT_TRUE(response.ok()) << response.status().message();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "hello");
  EXPECT_EQ(response->header("x-tag"), "t1");
  EXPECT_EQ(response->header("Content-Type"), "text/plain");
  auto missing = fetch("GET", url("/nothing"));
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  auto late = fetch("GET", url("/slow"), {}, {}, 50ms);
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded) << late.status().message();
}

TEST(HttpClient, ParseUrl) {
  auto full = parse_url("http://example.org:8080/v2/models/x/infer?debug=1");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->host, "example.org");
  EXPECT_EQ(full->port, 8080);
  EXPECT_EQ(full->target, "/v2/models/x/infer?debug=1");
  auto bare = parse_url("http://localhost");  // no port: 80; no path: "/"
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->host, "localhost");
  EXPECT_EQ(bare->port, 80);
  EXPECT_EQ(bare->target, "/");
  EXPECT_EQ(parse_url("http://10.0.0.1/health")->port, 80);
  auto ipv6 = parse_url("http://[::1]:9000/x");
  ASSERT_TRUE(ipv6.ok());
  EXPECT_EQ(ipv6->host, "::1");
  EXPECT_EQ(ipv6->port, 9000);
  EXPECT_EQ(parse_url("http://[::1]")->port, 80);
  auto no_scheme = parse_url("localhost:8080/");
  ASSERT_FALSE(no_scheme.ok());
  EXPECT_EQ(no_scheme.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_scheme.status().message().find("must start with http://"), std::string::npos);
  for (const char* bad : {"https://example.org/", "http://", "http://:80/", "http://host:/", "http://host:http/",
                          "http://host:0/", "http://host:65536/", "http://[::1/"}) {
    EXPECT_EQ(parse_url(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace slipway::http
