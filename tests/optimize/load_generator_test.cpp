// The load generator against an in-process server: the open-loop schedule is exact, the
// closed loop keeps its requests outstanding, failures are counted, SLOs parse.
#include "slipway/optimize.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "slipway/http.h"
#include "slipway/registry.h"
#include "slipway/serve.h"
#include "support/test_support.h"

namespace slipway::optimize {
namespace {

using namespace std::chrono_literals;

class LoadGeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::move(registry::Registry::open(home_.path(), true)).value();
    serve::ServerOptions options;
    options.http.port = 0;
    server_ = std::move(serve::Server::start(*registry_, options)).value();
    runner_ = std::jthread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop();
    runner_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }

  testing::TempDir home_;
  std::unique_ptr<registry::Registry> registry_;
  std::unique_ptr<serve::Server> server_;
  std::jthread runner_;
};

TEST_F(LoadGeneratorTest, OpenLoopSendsExactlyTheSchedule) {
  LoadTestOptions options;
  options.url = url("/v2/health/live");
  options.rate = 300;
  options.duration = 500ms;
  options.warmup = 100ms;
  auto report = run_load_test(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->sent, 150u);  // 300/s for 0.5 s; the warm-up's 30 are not counted
  EXPECT_EQ(report->succeeded, 150u);
  EXPECT_EQ(report->status_counts.at(200), 150u);
  EXPECT_GT(report->p50_ms, 0.0);
  EXPECT_LE(report->p50_ms, report->p99_ms);
  EXPECT_LE(report->p99_ms, report->max_ms);
  EXPECT_GT(report->achieved_rate, 200);  // 300 scheduled; a slow machine answers the last ones late
}

TEST_F(LoadGeneratorTest, ClosedLoopKeepsItsRequestsOutstandingAndCountsStatuses) {
  LoadTestOptions options;
  options.url = url("/v2/models/none/infer");
  options.bodies = {R"({"inputs":[]})"};
  options.concurrency = 3;
  options.threads = 2;
  options.duration = 300ms;
  auto report = run_load_test(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_GT(report->sent, 10u);
  EXPECT_EQ(report->status_counts.at(404), report->sent);  // no such model: every answer a 404
  EXPECT_EQ(report->succeeded, 0u);
  EXPECT_LE(report->connections_used, 3);
}

TEST(LoadGenerator, RefusedConnectionsAreCountedAndOptionsChecked) {
  LoadTestOptions options;
  options.url = "http://127.0.0.1:1/";
  options.rate = 40;
  options.duration = 250ms;
  auto report = run_load_test(options);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->status_counts.at(0), 10u);
  options.concurrency = 2;  // both modes at once
  EXPECT_EQ(run_load_test(options).status().code(), StatusCode::kInvalidArgument);
  options.concurrency = 0;
  options.url = "ftp://host/";
  EXPECT_EQ(run_load_test(options).status().code(), StatusCode::kInvalidArgument);
}

// A response cache is measured at a chosen repeat rate: that share of requests repeats an earlier
// one byte for byte, and every other one is new (a unique v2 request id), however few the bodies.
TEST(LoadGenerator, RepeatRateRepeatsEarlierRequestsAndMakesTheRestUnique) {
  std::mutex mutex;
  std::vector<std::string> received;
  http::Route record{"/", [](const http::Request&) { return http::Execution::kEventLoop; },
                     [&](const http::Request& request, const http::Respond& respond) {
                       {
                         std::lock_guard lock(mutex);
                         received.emplace_back(request.body);
                       }
                       respond(http::Response{200, "application/json", "{}", {}});
                     }};
  http::ServerOptions server_options;
  server_options.port = 0;
  auto server = std::move(http::Server::start({record}, server_options)).value();
  std::jthread runner([&] { server->run(); });

  LoadTestOptions options;
  options.url = "http://127.0.0.1:" + std::to_string(server->port()) + "/";
  const std::vector<std::string> members = {R"("inputs":[1]})", " }"};
  options.bodies = {"{" + members[0], "{" + members[1]};
  options.rate = 2000;
  options.duration = 500ms;
  options.repeat_rate = 0.5;
  auto report = run_load_test(options);
  server->stop();
  runner.join();
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(received.size(), 1000u);
  std::set<std::string> distinct(received.begin(), received.end());
  std::size_t repeats = received.size() - distinct.size();
  EXPECT_GT(repeats, 400u);  // 500 expected; the binomial's deviation is 16
  EXPECT_LT(repeats, 600u);
  for (const std::string& body : distinct) {
    // {"id":"u1-N", then the given body's members ("," between, unless there are none).
    ASSERT_TRUE(body.starts_with(R"({"id":"u1-)")) << body;
    std::size_t end = body.find('"', 8);
    std::string rest = body.substr(end + 1);
    EXPECT_TRUE(rest == "," + members[0] || rest == members[1]) << body;
  }

  options.repeat_rate = 1.5;
  EXPECT_EQ(run_load_test(options).status().code(), StatusCode::kInvalidArgument);
  options.repeat_rate = 0.5;
  options.bodies = {"[1]"};
  EXPECT_EQ(run_load_test(options).status().code(), StatusCode::kInvalidArgument);
  options.bodies.clear();
  EXPECT_EQ(run_load_test(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(LatencySlo, ParsesStatisticsAndUnits) {
  EXPECT_EQ(parse_latency_slo("p95<=50ms")->limit_ms, 50.0);
  EXPECT_EQ(parse_latency_slo("p99.9<=2s")->limit_ms, 2000.0);
  EXPECT_EQ(parse_latency_slo("mean<=250us")->limit_ms, 0.25);
  EXPECT_EQ(parse_latency_slo("p95<=50ms")->statistic, "p95");
  for (const char* bad : {"p95<50ms", "p97<=1ms", "p95<=fast", "p95<=-1ms", "p95<=10"}) {
    EXPECT_FALSE(parse_latency_slo(bad).ok()) << bad;
  }
  LoadTestReport report;
  report.p95_ms = 3;
  report.p999_ms = 9;
  EXPECT_EQ(latency_statistic(report, "p95"), 3);
  EXPECT_EQ(latency_statistic(report, "p99.9"), 9);
}

}  // namespace
}  // namespace slipway::optimize
