// Operating `slipway serve` as a user does: serving configs and tokens from the CLI, the real
// binary over real HTTP, and the reliability cases (overload, broken framing, idle connections).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "slipway/data.h"
#include "slipway/serve.h"
#include "support/test_support.h"

namespace slipway::testing {
namespace {

constexpr const char* kOneRow = R"({"inputs":[
    {"name":"funded_amnt","datatype":"FP32","shape":[1],"data":[16100]},
    {"name":"term","datatype":"BYTES","shape":[1],"data":["term_36"]},
    {"name":"int_rate","datatype":"FP32","shape":[1],"data":[13.99]},
    {"name":"sub_grade","datatype":"BYTES","shape":[1],"data":["C4"]},
    {"name":"addr_state","datatype":"BYTES","shape":[1],"data":["CT"]},
    {"name":"verification_status","datatype":"BYTES","shape":[1],"data":["Not_Verified"]},
    {"name":"annual_inc","datatype":"FP32","shape":[1],"data":[35000]},
    {"name":"emp_length","datatype":"BYTES","shape":[1],"data":["emp_5"]},
    {"name":"delinq_2yrs","datatype":"FP32","shape":[1],"data":[0]},
    {"name":"inq_last_6mths","datatype":"FP32","shape":[1],"data":[0]},
    {"name":"revol_util","datatype":"FP32","shape":[1],"data":[67.4]},
    {"name":"acc_now_delinq","datatype":"FP32","shape":[1],"data":[0]},
    {"name":"open_il_6m","datatype":"FP32","shape":[1],"data":[1]},
    {"name":"open_il_12m","datatype":"FP32","shape":[1],"data":[0]},
    {"name":"open_il_24m","datatype":"FP32","shape":[1],"data":[0]},
    {"name":"total_bal_il","datatype":"FP32","shape":[1],"data":[1099]},
    {"name":"all_util","datatype":"FP32","shape":[1],"data":[48]},
    {"name":"inq_fi","datatype":"FP32","shape":[1],"data":[0]},
    {"name":"inq_last_12m","datatype":"FP32","shape":[1],"data":[3]},
    {"name":"delinq_amnt","datatype":"FP32","shape":[1],"data":[0]},
    {"name":"num_il_tl","datatype":"FP32","shape":[1],"data":[3]},
    {"name":"total_il_high_credit_limit","datatype":"FP32","shape":[1],"data":[13193]}]})";

class ServingOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto trained = run_command({slipway_binary(), "--home", home_.path(), "train", "--data",
                                data_path("lending_club.csv"), "--target", "Class", "--register", "lending"});
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
  }
  CommandResult slipway(std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), {slipway_binary(), "--home", home_.path()});
    return run_command(arguments);
  }
  // Logs every request to lending@1, deployed as endpoint "web", and returns every `step`th row
  // of the lending data to send it.
  data::Table log_endpoint_and_sample(std::uint32_t step) {
    EXPECT_EQ(slipway({"serving-config", "lending", "--request-log-rate", "1"}).exit_code, 0);
    EXPECT_EQ(slipway({"deploy", "web", "lending@1"}).exit_code, 0);
    auto table = data::read_csv(data_path("lending_club.csv"));
    EXPECT_TRUE(table.ok());
    std::vector<std::uint32_t> rows;
    for (std::uint32_t row = 0; table.ok() && row < table->row_count(); row += step) rows.push_back(row);
    return table.ok() ? table->take_rows(rows) : data::Table{};
  }
  // Starts `slipway serve --port 0 EXTRA...` and returns its port.
  int start_server(std::vector<std::string> extra) {
    std::vector<std::string> argv = {slipway_binary(), "--home", home_.path(), "--json", "serve", "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    server_ = std::make_unique<ChildProcess>(argv);
    const StartedServer started = read_started_server(*server_);
    EXPECT_GT(started.port, 0) << "serve printed: " << started.first_line;
    return started.port;
  }
  void stop_server() {
    server_->signal(SIGTERM);
    EXPECT_EQ(server_->wait(), 0);
  }

  TempDir home_;
  std::unique_ptr<ChildProcess> server_;
};

TEST_F(ServingOps, ServingConfigAndTokensFromTheCommandLine) {
  auto set = slipway({"serving-config", "lending", "--max-batch-size", "32", "--max-queue-delay-us", "500",
                      "--preferred-batch-size", "8", "--preferred-batch-size", "16"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_NE(set.out.find("max_batch_size         32"), std::string::npos) << set.out;
  EXPECT_NE(set.out.find("instances              1            (default)"), std::string::npos) << set.out;
  auto shown = slipway({"--json", "serving-config", "lending"});
  EXPECT_NE(shown.out.find("\"stored\":{\"max_batch_size\":\"32\",\"max_queue_delay_us\":\"500\","
                           "\"preferred_batch_sizes\":\"8,16\"}"),
            std::string::npos)
      << shown.out;
  auto bad = slipway({"serving-config", "lending", "--preferred-batch-size", "64"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("larger than max_batch_size 32"), std::string::npos) << bad.err;
  EXPECT_NE(slipway({"serving-config", "ghost", "--max-batch-size", "4"}).exit_code, 0);

  auto predict = slipway({"token", "create", "app"});
  ASSERT_EQ(predict.exit_code, 0) << predict.err;
  std::string predict_token = predict.out.substr(0, predict.out.find('\n'));
  ASSERT_EQ(predict_token.rfind("slw_", 0), 0u) << predict.out;
  auto admin = slipway({"--json", "token", "create", "ops", "--role", "admin"});
  auto at = admin.out.find("\"token\":\"") + 9;
  std::string admin_token = admin.out.substr(at, admin.out.find('"', at) - at);
  EXPECT_NE(slipway({"token", "list"}).out.find("app"), std::string::npos);

  int port = start_server({"--auth", "--lazy"});
  ASSERT_GT(port, 0);
  EXPECT_EQ(http_request(port, "GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(http_request(port, "POST", "/v2/models/lending/infer", kOneRow).status, 401);
  auto with_token = [](const std::string& token) {
    return std::vector<std::pair<std::string, std::string>>{{"Authorization", "Bearer " + token}};
  };
  auto inferred = http_request(port, "POST", "/v2/models/lending/infer", kOneRow, with_token(predict_token));
  EXPECT_EQ(inferred.status, 200) << inferred.body;
  auto config = http_request(port, "GET", "/v2/models/lending/config", "", with_token(predict_token));
  EXPECT_NE(config.body.find("\"max_batch_size\":32,\"dynamic_batching\":{\"preferred_batch_size\":[8,16],"
                             "\"max_queue_delay_microseconds\":500"),
            std::string::npos)
      << config.body;
  EXPECT_EQ(http_request(port, "GET", "/metrics", "", with_token(predict_token)).status, 403);
  // The management API needs the deploy role.
  EXPECT_EQ(http_request(port, "GET", "/api/endpoints").status, 401);
  EXPECT_EQ(
      http_request(port, "POST", "/api/endpoints/web/deploy", R"({"model":"lending@1"})", with_token(predict_token))
          .status,
      403);
  auto api_deploy =
      http_request(port, "POST", "/api/endpoints/web/deploy", R"({"model":"lending@1"})", with_token(admin_token));
  EXPECT_EQ(api_deploy.status, 200) << api_deploy.body;
  auto routed = http_request(port, "POST", "/v2/models/web/infer", kOneRow, with_token(predict_token));
  EXPECT_EQ(routed.status, 200) << routed.body;  // this server follows its own API change at once
  // The audit log names the token the change came through.
  auto audited = slipway({"audit", "--limit", "1"});
  EXPECT_NE(audited.out.find("token:ops  endpoint.deploy"), std::string::npos) << audited.out;
  auto metrics = http_request(port, "GET", "/metrics", "", with_token(admin_token));
  EXPECT_NE(metrics.body.find(
                "slipway_request_failures_total{model=\"(unknown)\",version=\"\",reason=\"unauthenticated\"} 1"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("slipway_model_memory_bytes{model=\"lending\",version=\"1\"}"), std::string::npos);

  // Revoked in the workspace: the running server refuses it within a second.
  auto listed = slipway({"--json", "token", "list"});
  auto id_at = listed.out.find("\"id\":\"") + 6;
  ASSERT_EQ(slipway({"token", "revoke", listed.out.substr(id_at, listed.out.find('"', id_at) - id_at)}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_EQ(http_request(port, "POST", "/v2/models/lending/infer", kOneRow, with_token(predict_token)).status, 401);
  stop_server();
}

TEST_F(ServingOps, ConfigFileAndBinaryTensorsOverHttp) {
  std::string config_path = home_.path() + "/serving.yaml";
  std::ofstream(config_path) << "models:\n  lending:\n    max_batch_size: 16\n    max_queue_delay_us: 200\n";
  int port = start_server({"--config", config_path});
  ASSERT_GT(port, 0);
  EXPECT_NE(http_request(port, "GET", "/v2/models/lending/config").body.find("\"max_batch_size\":16"),
            std::string::npos);
  // One FP32 input in binary: the JSON header names its size; the raw floats follow.
  std::string json_reference = http_request(port, "POST", "/v2/models/lending/infer", kOneRow).body;
  std::string header = kOneRow;
  std::string from = R"({"name":"funded_amnt","datatype":"FP32","shape":[1],"data":[16100]})";
  header.replace(header.find(from), from.size(),
                 R"({"name":"funded_amnt","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}})");
  float funded = 16100;
  std::string body = header + std::string(reinterpret_cast<const char*>(&funded), 4);
  auto binary = http_request(port, "POST", "/v2/models/lending/infer", body,
                             {{"Inference-Header-Content-Length", std::to_string(header.size())},
                              {"Content-Type", "application/octet-stream"}});
  EXPECT_EQ(binary.status, 200) << binary.body;
  EXPECT_EQ(binary.body, json_reference);
  auto truncated = http_request(port, "POST", "/v2/models/lending/infer", header + "ab",
                                {{"Inference-Header-Content-Length", std::to_string(header.size())}});
  EXPECT_EQ(truncated.status, 400);
  EXPECT_NE(truncated.body.find("truncated"), std::string::npos) << truncated.body;
  stop_server();
}

// Sends raw bytes on a fresh connection and returns what comes back before the server closes
// it (or the timeout passes).
std::string raw_exchange(int port, const std::string& bytes, int timeout_ms, bool half_close) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval timeout{timeout_ms / 1000, static_cast<suseconds_t>(timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  (void)!::write(fd, bytes.data(), bytes.size());
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string received;
  char buffer[4096];
  while (true) {
    ssize_t count = ::read(fd, buffer, sizeof buffer);
    if (count <= 0) break;
    received.append(buffer, static_cast<std::size_t>(count));
  }
  ::close(fd);
  return received;
}

TEST_F(ServingOps, WrongContentLengthAndIdleConnectionsDoNotHurtTheServer) {
  int port = start_server({});
  ASSERT_GT(port, 0);
  // A body shorter than its Content-Length, then the client gives up: no response, no crash.
  std::string short_body = "POST /v2/models/lending/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"in";
  EXPECT_EQ(raw_exchange(port, short_body, 2000, true).find("HTTP/1.1 200"), std::string::npos);
  // A body longer than its Content-Length: the rest is read as the next request, which is garbage.
  std::string long_body =
      "POST /v2/models/lending/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}garbage\r\n\r\n";
  std::string answer = raw_exchange(port, long_body, 2000, false);
  EXPECT_NE(answer.find("HTTP/1.1 400"), std::string::npos) << answer;
  EXPECT_NE(answer.find("non-empty 'inputs'"), std::string::npos) << answer;
  // A Content-Length that is not a number.
  std::string not_number = "POST /v2/models/lending/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n";
  EXPECT_NE(raw_exchange(port, not_number, 2000, true).find("HTTP/1.1 400"), std::string::npos);
  EXPECT_EQ(http_request(port, "POST", "/v2/models/lending/infer", kOneRow).status, 200);
  // A client that closes its sending side right after its request: whether the server sees the
  // close before a worker takes the request (then it is dropped, nginx's 499, as
  // HttpServer.ARequestWhoseClientLeftIsNotHandled checks deterministically) or after, the server
  // carries on.
  std::string one_row(kOneRow);
  std::string half_closed =
      "POST /v2/models/lending/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(one_row.size()) +
      "\r\n\r\n" + one_row;
  raw_exchange(port, half_closed, 2000, true);
  EXPECT_EQ(http_request(port, "POST", "/v2/models/lending/infer", kOneRow).status, 200);

  // 10,000 idle connections: the server keeps answering others, and memory stays bounded.
  constexpr int kIdle = 10'000;
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_max < kIdle + 200) GTEST_SKIP() << "the open-file limit (" << limit.rlim_max << ") is below 10,200";
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  long resident_before = resident_kib(server_->pid());
  std::vector<int> idle;
  for (int index = 0; index < kIdle; ++index) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << "connection " << index;
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(http_request(port, "GET", "/v2/health/live").status, 200);
  EXPECT_EQ(http_request(port, "POST", "/v2/models/lending/infer", kOneRow).status, 200);
  long growth_kib = resident_kib(server_->pid()) - resident_before;
  EXPECT_LT(growth_kib, 200 * 1024) << "10k idle connections took " << growth_kib << " KiB";
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(http_request(port, "GET", "/v2/health/live").status, 200);
  stop_server();
}

// Open-loop load at about three times what the server sustains, for 30 s: it sheds the excess
// with 429 (its queue is bounded), stays up with bounded memory, and serves normally afterwards.
TEST_F(ServingOps, OverloadIsShedAndTheServerRecovers) {
  std::string request_path = home_.path() + "/one_row.json";
  std::ofstream(request_path) << kOneRow;
  int port = start_server(
      {"--threads", "1", "--max-batch-size", "8", "--max-queue-delay-us", "2000", "--max-queue-size", "32"});
  ASSERT_GT(port, 0);
  std::string url = "http://127.0.0.1:" + std::to_string(port) + "/v2/models/lending/infer";
  auto capacity_run = slipway(
      {"--json", "loadtest", url, "--concurrency", "16", "--duration", "2s", "--body", request_path, "--no-progress"});
  ASSERT_EQ(capacity_run.exit_code, 0) << capacity_run.err;
  auto rate_at = capacity_run.out.find("\"achieved_rate\":") + 16;
  double capacity = std::stod(capacity_run.out.substr(rate_at));
  ASSERT_GT(capacity, 0);
  long resident_before = resident_kib(server_->pid());
  auto overload =
      slipway({"--json", "loadtest", url, "--rate", std::to_string(static_cast<int>(capacity * 3)), "--duration", "30s",
               "--timeout", "2s", "--body", request_path, "--connections", "256", "--no-progress"});
  ASSERT_EQ(overload.exit_code, 0) << overload.err;
  std::cout << "capacity " << capacity << " req/s; at 3x: " << overload.out << "\n";
  EXPECT_NE(overload.out.find("\"200\":"), std::string::npos) << overload.out;
  bool shed = overload.out.find("\"429\":") != std::string::npos || overload.out.find("\"503\":") != std::string::npos;
  EXPECT_TRUE(shed) << "no request was refused at 3x capacity: " << overload.out;
  long growth_kib = resident_kib(server_->pid()) - resident_before;
#if !defined(__SANITIZE_ADDRESS__)  // ASan keeps freed memory in quarantine, so RSS says nothing there
  EXPECT_LT(growth_kib, 256 * 1024) << "overload grew the server by " << growth_kib << " KiB";
#else
  (void)growth_kib;
#endif
  // Normal service afterwards.
#if defined(__SANITIZE_ADDRESS__)
  // Under ASan (about 10x slower) the server still works for most of a second through the
  // connections the overload left in its accept queue; since the http module and the new load
  // generator client this shows as p99 ~0.7 s in the first 2 s (investigation open). The release
  // build asserts the immediate recovery.
  std::this_thread::sleep_for(std::chrono::seconds(3));
#endif
  int normal_rate = static_cast<int>(std::min(200.0, capacity / 4));
#if defined(__SANITIZE_ADDRESS__)
  // Ten times the release bound: under ASan, with another test on the second core, one request in
  // a hundred took 90 ms in CI; recovery is what is checked (the overload's requests waited 2 s).
  const char* recovered = "p99<=500ms";
#else
  const char* recovered = "p99<=50ms";
#endif
  auto after = slipway({"--json", "loadtest", url, "--rate", std::to_string(normal_rate), "--duration", "2s", "--body",
                        request_path, "--slo", recovered, "--no-progress"});
  EXPECT_EQ(after.exit_code, 0) << after.out << after.err;
  auto number_after = [&](const std::string& key) {
    auto at = after.out.find("\"" + key + "\":");
    return at == std::string::npos ? -1.0 : std::stod(after.out.substr(at + key.size() + 3));
  };
  EXPECT_GT(number_after("requests"), 0);
  EXPECT_EQ(number_after("succeeded"), number_after("requests")) << after.out;
  auto metrics = http_request(port, "GET", "/metrics");
  bool counted = metrics.body.find("reason=\"queue_full\"") != std::string::npos ||
                 metrics.body.find("reason=\"server_overloaded\"") != std::string::npos;
  EXPECT_TRUE(counted) << metrics.body;
  stop_server();
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);  // port 0: any free port
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// A real Prometheus (Debian's package) scrapes /metrics with an admin bearer token, and its
// query API returns Slipway's series.
TEST_F(ServingOps, PrometheusScrapesTheMetrics) {
  if (::access("/usr/bin/prometheus", X_OK) != 0) {
    GTEST_SKIP() << "prometheus is not installed (scripts/install-deps.sh installs it)";
  }
  auto admin = slipway({"--json", "token", "create", "prometheus", "--role", "admin"});
  auto at = admin.out.find("\"token\":\"") + 9;
  std::string admin_token = admin.out.substr(at, admin.out.find('"', at) - at);
  int port = start_server({"--auth"});
  ASSERT_GT(port, 0);
  auto predict = slipway({"token", "create", "app"});
  std::string predict_token = predict.out.substr(0, predict.out.find('\n'));
  for (int request = 0; request < 5; ++request) {
    EXPECT_EQ(
        http_request(port, "POST", "/v2/models/lending/infer", kOneRow, {{"Authorization", "Bearer " + predict_token}})
            .status,
        200);
  }
  int prometheus_port = free_port();
  std::string config_path = home_.path() + "/prometheus.yml";
  std::ofstream(config_path) << "global:\n  scrape_interval: 1s\n"
                             << "scrape_configs:\n  - job_name: slipway\n    metrics_path: /metrics\n"
                             << "    authorization:\n      credentials: " << admin_token << "\n"
                             << "    static_configs:\n      - targets: ['127.0.0.1:" << port << "']\n";
  ChildProcess prometheus({"/usr/bin/prometheus", "--config.file=" + config_path,
                           "--storage.tsdb.path=" + home_.path() + "/tsdb",
                           "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port)});
  std::string found;
  for (int attempt = 0; attempt < 60 && found.empty(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    try {
      auto answer =
          http_request(prometheus_port, "GET", "/api/v1/query?query=slipway_requests_total%7Bmodel%3D%22lending%22%7D");
      if (answer.status == 200 && answer.body.find("\"code\":\"200\"") != std::string::npos) found = answer.body;
    } catch (const std::exception&) {
      // Prometheus is still starting.
    }
  }
  ASSERT_FALSE(found.empty()) << "Prometheus never returned slipway_requests_total";
  EXPECT_NE(found.find("\"model\":\"lending\""), std::string::npos) << found;
  EXPECT_NE(found.find("\"5\"]"), std::string::npos) << found;  // the 5 requests, as the sample value
  auto up = http_request(prometheus_port, "GET", "/api/v1/query?query=up%7Bjob%3D%22slipway%22%7D");
  EXPECT_NE(up.body.find("\"1\"]"), std::string::npos) << up.body;
  prometheus.signal(SIGTERM);
  prometheus.wait();
  stop_server();
}

// The count of infer requests /metrics shows routed from `endpoint` to each route.
std::map<std::string, long> endpoint_counts(int port, const std::string& endpoint) {
  std::map<std::string, long> counts;
  std::string metrics = http_request(port, "GET", "/metrics").body;
  std::string prefix = "slipway_endpoint_requests_total{endpoint=\"" + endpoint + "\",route=\"";
  for (std::size_t at = metrics.find(prefix); at != std::string::npos; at = metrics.find(prefix, at + 1)) {
    std::size_t route_begin = at + prefix.size();
    std::size_t route_end = metrics.find('"', route_begin);
    counts[metrics.substr(route_begin, route_end - route_begin)] =
        std::stol(metrics.substr(metrics.find("} ", route_end) + 2));
  }
  return counts;
}

// Rollouts lose no request: steady load on an endpoint while a canary takes 10% (measured over at
// least 5,000 requests), is promoted, rolled back, and the endpoint is switched outright. A
// sanitizer build serves several times slower: a lower rate, and fewer requests for the share.
TEST_F(ServingOps, CanaryPromoteRollbackAndSwitchUnderSteadyLoadLoseNoRequest) {
#if defined(__SANITIZE_ADDRESS__)
  const std::string rate = "250";
  const long share_requests = 2000;
  const double share_tolerance = 0.03;  // 4.5 binomial deviations at 2,000 requests
#else
  const std::string rate = "700";
  const long share_requests = 5000;
  const double share_tolerance = 0.02;
#endif
  auto second = slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--model", "gbdt",
                         "--param", "rounds=20", "--register", "lending"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto deployed = slipway({"deploy", "web", "lending@1"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.err;
  int port = start_server({});
  ASSERT_GT(port, 0);
  std::string url = "http://127.0.0.1:" + std::to_string(port) + "/v2/models/web/infer";
  ChildProcess load({slipway_binary(), "--json", "loadtest", url, "--rate", rate, "--duration", "16s", "--csv",
                     data_path("lending_club.csv"), "--skip", "Class", "--no-progress"});
  std::this_thread::sleep_for(std::chrono::seconds(1));

  auto canary = slipway({"deploy", "web", "lending@2", "--canary", "10"});
  ASSERT_EQ(canary.exit_code, 0) << canary.err;
  auto poll = [&](const std::function<bool(const std::map<std::string, long>&)>& done, int seconds) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    std::map<std::string, long> counts = endpoint_counts(port, "web");
    while (!done(counts) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      counts = endpoint_counts(port, "web");
    }
    return counts;
  };
  // Running servers pick the change up within a second.
  auto start = poll([](const auto& counts) { return counts.count("lending@2") > 0; }, 3);
  ASSERT_GT(start.count("lending@2"), 0u) << "the canary got no request";
  auto total = [](const std::map<std::string, long>& counts) {
    long sum = 0;
    for (const auto& [route, count] : counts) sum += count;
    return sum;
  };
  auto end = poll([&](const auto& counts) { return total(counts) - total(start) >= share_requests; }, 15);
  long measured = total(end) - total(start);
  ASSERT_GE(measured, share_requests);
  double share = static_cast<double>(end["lending@2"] - start["lending@2"]) / static_cast<double>(measured);
  EXPECT_NEAR(share, 0.10, share_tolerance) << measured << " requests";
  std::cout << "canary share " << share << " over " << measured << " requests\n";
  // A route key always reaches the same version.
  std::string one_row = kOneRow;
  for (int key = 0; key < 20; ++key) {
    std::vector<std::pair<std::string, std::string>> headers = {{"X-Slipway-Route-Key", "user-" + std::to_string(key)}};
    std::string first = http_request(port, "POST", "/v2/models/web/infer", one_row, headers).body;
    std::string version = first.substr(first.find("\"model_version\""), 20);
    for (int repeat = 0; repeat < 3; ++repeat) {
      std::string again = http_request(port, "POST", "/v2/models/web/infer", one_row, headers).body;
      EXPECT_EQ(again.substr(again.find("\"model_version\""), 20), version) << "key " << key;
    }
  }

  // The management API does what the CLI does.
  auto promoted = http_request(port, "POST", "/api/endpoints/web/promote");
  EXPECT_EQ(promoted.status, 200) << promoted.body;
  EXPECT_NE(promoted.body.find("\"routes\":[{\"model\":\"lending\",\"version\":2,\"percent\":100}]"), std::string::npos)
      << promoted.body;
  EXPECT_EQ(http_request(port, "POST", "/api/endpoints/web/promote").status, 409);  // nothing left to promote
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(slipway({"rollback", "web"}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(slipway({"deploy", "web", "lending@1"}).exit_code, 0);  // the switch back, outright

  std::string report = load.read_line(30000);
  EXPECT_EQ(load.wait(), 0);
  // Every answer a 200: the status counts hold that one status alone.
  auto statuses = report.find("\"status\":{");
  ASSERT_NE(statuses, std::string::npos) << report;
  std::string counts = report.substr(statuses, report.find('}', statuses) - statuses);
  EXPECT_TRUE(counts.starts_with("\"status\":{\"200\":") && counts.find(',') == std::string::npos) << report;
  auto succeeded = report.find("\"succeeded\":");
  auto requests = report.find("\"requests\":");
  ASSERT_NE(succeeded, std::string::npos) << report;
  EXPECT_EQ(std::stol(report.substr(succeeded + 12)), std::stol(report.substr(requests + 11))) << report;
  auto listed = slipway({"--json", "endpoints"});
  EXPECT_NE(listed.out.find("\"routes\":[{\"model\":\"lending\",\"version\":1,\"percent\":100}]"), std::string::npos)
      << listed.out;
  stop_server();
}

// A canary that fails the traffic it gets (it needs an input the clients do not send) is rolled
// back by the analysis on its own, with the reason recorded, while the fallback answers every
// client from the stable version.
TEST_F(ServingOps, ABadCanaryIsRolledBackOnItsOwnWhileFallbackAnswersEveryone) {
  auto stable = slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--ignore",
                         "annual_inc", "--register", "lending"});
  ASSERT_EQ(stable.exit_code, 0) << stable.err;  // lending@2: works without annual_inc; lending@1 needs it
  ASSERT_EQ(slipway({"deploy", "web", "lending@2", "--fallback", "main"}).exit_code, 0);
  int port = start_server({});
  ASSERT_GT(port, 0);
  std::string url = "http://127.0.0.1:" + std::to_string(port) + "/v2/models/web/infer";
  ChildProcess load({slipway_binary(), "--json", "loadtest", url, "--rate", "300", "--duration", "8s", "--csv",
                     data_path("lending_club.csv"), "--skip", "Class", "--skip", "annual_inc", "--no-progress"});
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto started =
      slipway({"deploy", "web", "lending@1", "--steps", "20,100", "--interval", "30s", "--min-requests", "30"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  EXPECT_NE(started.out.find("running: step 1 of 2, canary at 20%"), std::string::npos) << started.out;

  std::string status;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  while (std::chrono::steady_clock::now() < deadline) {
    status = slipway({"rollout", "status", "web"}).out;
    if (status.find("rolled_back") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_NE(
      status.find("state      rolled_back: step 20% failed: error rate 1.0000 against the stable version's 0.0000"),
      std::string::npos)
      << status;
  auto listed = slipway({"--json", "endpoints"});
  EXPECT_NE(listed.out.find("\"routes\":[{\"model\":\"lending\",\"version\":2,\"percent\":100}]"), std::string::npos)
      << listed.out;

  std::string report = load.read_line(30000);
  EXPECT_EQ(load.wait(), 0);
  auto succeeded = report.find("\"succeeded\":");
  auto requests = report.find("\"requests\":");
  ASSERT_NE(succeeded, std::string::npos) << report;
  EXPECT_EQ(std::stol(report.substr(succeeded + 12)), std::stol(report.substr(requests + 11))) << report;
  std::string metrics = http_request(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("slipway_endpoint_fallbacks_total{endpoint=\"web\",route=\"lending@1\",reason=\"error\","
                         "answer=\"version\"}"),
            std::string::npos)
      << metrics;
  auto shown = slipway({"--json", "rollout", "status", "web"});
  EXPECT_NE(shown.out.find("\"state\":\"rolled_back\""), std::string::npos) << shown.out;
  // The on-call page says what serves, what happened and how to go back.
  std::string page = home_.path() + "/web.md";
  auto described = slipway({"describe", "web", "--markdown", page});
  ASSERT_EQ(described.exit_code, 0) << described.err;
  for (const char* expected :
       {"| lending@2 | 100% | binary_classification | Class |", "answered by the main version", "rolled_back",
        "`slipway rollback web` returns, in one step, to: lending@1 20%, lending@2 80%"}) {
    EXPECT_NE(described.out.find(expected), std::string::npos) << expected << "\n" << described.out;
  }
  std::ifstream written(page);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(written), {}), described.out);
  stop_server();
}

// The management API does what deploy, rollout status, approve and audit do, with the same
// checks; approving takes the admin role, so a deployer cannot approve their own version.
TEST_F(ServingOps, TheManagementApiChangesSettingsApprovesAndReadsTheAuditLog) {
  ASSERT_EQ(slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--ignore", "annual_inc",
                     "--register", "lending"})
                .exit_code,
            0);
  auto token_of = [&](const std::string& name, const std::string& role) {
    auto created = slipway({"--json", "token", "create", name, "--role", role});
    auto at = created.out.find("\"token\":\"") + 9;
    return std::vector<std::pair<std::string, std::string>>{
        {"Authorization", "Bearer " + created.out.substr(at, created.out.find('"', at) - at)}};
  };
  auto deployer = token_of("deployer", "deploy");
  auto ops = token_of("ops", "admin");
  int port = start_server({"--auth"});
  ASSERT_GT(port, 0);
  auto call = [&](const std::string& method, const std::string& path, const std::string& body,
                  const std::vector<std::pair<std::string, std::string>>& token) {
    return http_request(port, method, path, body, token);
  };
  ASSERT_EQ(call("POST", "/api/endpoints/web/deploy", R"({"model":"lending@1"})", deployer).status, 200);
  auto set = call("POST", "/api/endpoints/web/settings",
                  R"({"fallback":"constant:0.1","deadline_ms":250,"owner":"risk","require_approval":true,)"
                  R"("shadow":{"model":"lending@2","percent":5}})",
                  deployer);
  EXPECT_EQ(set.status, 200) << set.body;
  for (const char* expected :
       {"\"owner\":\"risk\",\"require_approval\":true", "\"fallback\":\"constant:0.1\"", "\"deadline_ms\":250",
        "\"shadow\":{\"model\":\"lending\",\"version\":2,\"percent\":5}"}) {
    EXPECT_NE(set.body.find(expected), std::string::npos) << expected << "\n" << set.body;
  }
  for (const char* refused : {R"({"fallback":"constant:maybe"})", R"({"colour":"blue"})", R"({"deadline_ms":-5})",
                              R"({"shadow":{"model":"lending@9"}})", R"([1,2])", "{"}) {
    EXPECT_GE(call("POST", "/api/endpoints/web/settings", refused, deployer).status, 400) << refused;
  }
  auto unshadowed = call("POST", "/api/endpoints/web/settings", R"({"shadow":null})", deployer);
  EXPECT_NE(unshadowed.body.find("\"shadow\":null"), std::string::npos) << unshadowed.body;
  // A deploy token cannot lift the approval requirement (to ship an unapproved version and set it
  // back): that is an admin act, as approving is. Unknown or repeated fields, a fraction of a
  // millisecond and a share that rounds to 100% are refused.
  auto lifted = call("POST", "/api/endpoints/web/settings", R"({"require_approval":false})", deployer);
  EXPECT_EQ(lifted.status, 403) << lifted.body;
  EXPECT_NE(call("GET", "/api/endpoints/web", "", deployer).body.find("\"require_approval\":true"), std::string::npos);
  for (const char* refused : {R"({"deadline_ms":0.4})", R"({"shadow":{"model":"lending@1","colour":1}})",
                              R"({"owner":"a","owner":"b"})", R"({"owner":"esc\u001b[31m"})"}) {
    auto answer = call("POST", "/api/endpoints/web/settings", refused, deployer);
    EXPECT_EQ(answer.status, 400) << refused << " " << answer.body;
  }
  auto rounds_to_all = call("POST", "/api/endpoints/web/deploy", R"({"model":"lending@2","canary":99.999})", deployer);
  EXPECT_EQ(rounds_to_all.status, 400) << rounds_to_all.body;
  EXPECT_EQ(call("GET", "/api/endpoints", "", deployer).status, 200);

  const std::string rollout = R"({"model":"lending@2","steps":[50,100],"interval_ms":60000})";
  auto unapproved = call("POST", "/api/endpoints/web/deploy", rollout, deployer);
  EXPECT_GE(unapproved.status, 400);
  EXPECT_NE(unapproved.body.find("lending@2 is not approved"), std::string::npos) << unapproved.body;
  const std::string approval = "/api/models/lending/versions/2/approval";
  EXPECT_EQ(call("POST", approval, R"({"note":"holdout AUC ok"})", deployer).status, 403);
  auto approved = call("POST", approval, R"({"note":"holdout AUC ok"})", ops);
  EXPECT_EQ(approved.status, 200) << approved.body;
  EXPECT_NE(approved.body.find("\"approver\":\"token:ops\",\"note\":\"holdout AUC ok\""), std::string::npos)
      << approved.body;
  auto started = call("POST", "/api/endpoints/web/deploy", rollout, deployer);
  EXPECT_EQ(started.status, 200) << started.body;
  EXPECT_NE(started.body.find("\"state\":\"running\""), std::string::npos) << started.body;
  auto status = call("GET", "/api/endpoints/web/rollout", "", deployer);
  EXPECT_NE(status.body.find("\"canary\":\"lending@2\",\"stable\":\"lending@1\""), std::string::npos) << status.body;

  auto audit = call("GET", "/api/audit?model=lending&limit=2", "", deployer);
  EXPECT_EQ(audit.status, 200) << audit.body;
  EXPECT_NE(audit.body.find("\"actor\":\"token:ops\",\"action\":\"model.approve\""), std::string::npos) << audit.body;
  EXPECT_NE(audit.body.find("\"action\":\"endpoint.rollout\""), std::string::npos) << audit.body;
  EXPECT_EQ(call("GET", "/api/audit?limit=-1", "", deployer).status, 400);
  EXPECT_EQ(call("GET", "/api/audit?limit=0", "", deployer).status, 400);
  auto decoded = call("GET", "/api/audit?model=lend%69ng&limit=1", "", deployer);
  EXPECT_NE(decoded.body.find("\"action\""), std::string::npos) << decoded.body;
  EXPECT_EQ(call("GET", "/api/audit?colour=blue", "", deployer).status, 400);
  auto revoked = call("DELETE", approval, "", ops);
  EXPECT_NE(revoked.body.find("\"approval\":null"), std::string::npos) << revoked.body;
  EXPECT_EQ(call("GET", "/api/nothing", "", deployer).status, 404);
  EXPECT_EQ(call("POST", "/api/endpoints/web/explode", "{}", deployer).status, 404);
  stop_server();
}

// One operation behind both doors: the same deploy through the CLI and through /api is refused for
// the same reason, with the same sentence, for the gate, a constant fallback that does not fit and
// an approval requirement; and the same settings then let both through.
TEST_F(ServingOps, TheCliAndTheApiDeployWithTheSameChecks) {
  ASSERT_EQ(slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--ignore", "annual_inc",
                     "--register", "lending"})
                .exit_code,
            0);
  ASSERT_EQ(slipway({"deploy", "web", "lending@1"}).exit_code, 0);
  int port = start_server({});
  ASSERT_GT(port, 0);
  auto api = [&](const std::string& path, const std::string& body) {
    return http_request(port, "POST", "/api/endpoints/web/" + path, body);
  };
  // Each refusal's sentence, from the CLI's stderr and from the API's {"error": ...}.
  auto same_refusal = [](const CommandResult& cli, const HttpResult& http, const std::string& expected) {
    EXPECT_NE(cli.exit_code, 0);
    EXPECT_GE(http.status, 400);
    EXPECT_NE(cli.err.find(expected), std::string::npos) << cli.err;
    EXPECT_NE(http.body.find(expected), std::string::npos) << http.body;
  };

  // The API reads a gate's rows from the workspace's data/ folder only (a token that may deploy
  // must not make the server read any file it can); the CLI from anywhere its user can read.
  const std::string data = data_path("lending_club.csv");
  std::filesystem::create_directories(home_.path() + "/data");
  std::filesystem::copy_file(data, home_.path() + "/data/holdout.csv");
  same_refusal(
      slipway({"deploy", "web", "lending@2", "--gate-data", data, "--gate-metric", "auc", "--gate-min", "0.9999"}),
      api("deploy", R"({"model":"lending@2","gate":{"data":"holdout.csv","metric":"auc",)"
                    R"("thresholds":"min=0.9999"}})"),
      "the gate failed, so lending@2 was not deployed");
  for (const char* outside : {"../slipway.db", "/etc/passwd", "a/../../x"}) {
    auto refused = api("deploy", std::string(R"({"model":"lending@2","gate":{"data":")") + outside +
                                     R"(","metric":"auc","thresholds":"min=0.5"}})");
    EXPECT_EQ(refused.status, 400) << outside << " " << refused.body;
  }
  same_refusal(slipway({"deploy", "web", "--fallback", "constant:maybe"}),
               api("settings", R"({"fallback":"constant:maybe"})"),
               "the constant fallback of a binary classifier is P(positive)");
  ASSERT_EQ(slipway({"deploy", "web", "--require-approval", "yes"}).exit_code, 0);
  same_refusal(slipway({"deploy", "web", "lending@2", "--canary", "10"}),
               api("deploy", R"({"model":"lending@2","canary":10})"), "lending@2 is not approved");
  same_refusal(slipway({"deploy", "web", "lending@2", "--canary", "99.999"}),
               api("deploy", R"({"model":"lending@2","canary":99.999})"), "rounds to 100");
  EXPECT_NE(slipway({"endpoints"}).out.find("lending@1 100%"), std::string::npos);

  ASSERT_EQ(slipway({"approve", "lending@2", "--note", "holdout ok"}).exit_code, 0);
  auto passed = api("deploy", R"({"model":"lending@2","canary":10,"gate":{"data":"holdout.csv","metric":"auc",)"
                              R"("thresholds":"max_drop=0.05"}})");
  EXPECT_EQ(passed.status, 200) << passed.body;
  EXPECT_NE(passed.body.find(R"("routes":[{"model":"lending","version":2,"percent":10})"), std::string::npos)
      << passed.body;
  // Both gates are on record with the candidate: the CLI's failed one and the API's passed one.
  auto described = slipway({"describe", "web"});
  EXPECT_NE(described.out.find("Gate passed against lending@1"), std::string::npos) << described.out;
  EXPECT_NE(described.out.find("Gate FAILED against lending@1"), std::string::npos) << described.out;
  stop_server();
}

// A version that answers too slowly (its batcher waits 400 ms for company) misses the endpoint's
// 150 ms deadline, and each kind of fallback answers in time, marked degraded and counted.
TEST_F(ServingOps, DeadlinesAndFallbacksAnswerForASlowVersion) {
  auto slow = slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--register", "slow"});
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  ASSERT_EQ(slipway({"serving-config", "slow", "--max-batch-size", "64", "--max-queue-delay-us", "400000"}).exit_code,
            0);
  ASSERT_EQ(slipway({"deploy", "web", "lending@1"}).exit_code, 0);
  ASSERT_EQ(slipway({"deploy", "web", "slow@1"}).exit_code, 0);  // the rollback target: lending@1
  auto configured =
      slipway({"deploy", "web", "--fallback", "previous", "--deadline", "150ms", "--slo", "p99<=200ms@100rps"});
  ASSERT_EQ(configured.exit_code, 0) << configured.err;
  EXPECT_NE(configured.out.find("fallback previous; deadline 150 ms"), std::string::npos) << configured.out;
  // What cannot work is refused before anything changes.
  auto refused = slipway({"deploy", "web", "--fallback", "constant:maybe"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("P(positive), between 0 and 1, or a class label"), std::string::npos) << refused.err;
  EXPECT_NE(slipway({"deploy", "web", "--fallback", "sometimes"}).exit_code, 0);
  EXPECT_NE(slipway({"deploy", "web", "--deadline", "soon"}).exit_code, 0);
  EXPECT_NE(slipway({"deploy", "web", "--slo", "fast please"}).exit_code, 0);

  int port = start_server({});
  ASSERT_GT(port, 0);
  auto change = [&](std::vector<std::string> settings) {
    settings.insert(settings.begin(), {"deploy", "web"});
    auto changed = slipway(settings);
    ASSERT_EQ(changed.exit_code, 0) << changed.err;
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // servers follow within a second
  };
  std::string other_row = std::string(R"({"id":"other",)") + (kOneRow + 1);
  auto infer = [&](const std::string& body) { return http_request(port, "POST", "/v2/models/web/infer", body); };

  auto answered = infer(kOneRow);  // previous: the rollback target answers
  EXPECT_EQ(answered.status, 200) << answered.body;
  EXPECT_EQ(answered.header("x-slipway-version"), "lending@1");
  EXPECT_EQ(answered.header("x-slipway-degraded"), "lending@1 (slow@1 did not answer within 150 ms)");
  EXPECT_NE(answered.body.find("\"model_name\":\"lending\""), std::string::npos) << answered.body;

  change({"--fallback", "cached", "--deadline", "0"});
  auto slow_answer = infer(kOneRow);  // no deadline: the slow version answers, and it is kept
  EXPECT_EQ(slow_answer.status, 200) << slow_answer.body;
  EXPECT_EQ(slow_answer.header("x-slipway-version"), "slow@1");
  EXPECT_EQ(slow_answer.header("x-slipway-degraded"), "");
  change({"--deadline", "150ms"});
  auto cached = infer(kOneRow);
  EXPECT_EQ(cached.status, 200);
  EXPECT_EQ(cached.body, slow_answer.body);
  EXPECT_EQ(cached.header("x-slipway-degraded"), "cached answer (slow@1 did not answer within 150 ms)");
  auto uncached = infer(other_row);  // never answered before: nothing cached, so the deadline's 504
  EXPECT_EQ(uncached.status, 504) << uncached.body;
  EXPECT_NE(uncached.body.find("slow@1 did not answer within 150 ms"), std::string::npos) << uncached.body;

  change({"--fallback", "constant:0.25"});
  auto constant = infer(other_row);
  EXPECT_EQ(constant.status, 200) << constant.body;
  EXPECT_EQ(constant.header("x-slipway-degraded"), "constant (slow@1 did not answer within 150 ms)");
  EXPECT_NE(constant.body.find("\"id\":\"other\""), std::string::npos) << constant.body;
  EXPECT_NE(constant.body.find("[0.25]"), std::string::npos) << constant.body;
  EXPECT_EQ(infer(R"({"inputs":[]})").status, 400);  // unreadable: no constant for it, the failure stands

  change({"--fallback", "none"});
  EXPECT_EQ(infer(kOneRow).status, 504);

  std::string metrics = http_request(port, "GET", "/metrics").body;
  const std::string series = "slipway_endpoint_fallbacks_total{endpoint=\"web\",route=\"slow@1\",reason=\"deadline\",";
  for (const char* expected :
       {"answer=\"version\"} 1", "answer=\"cached\"} 1", "answer=\"constant\"} 1", "answer=\"none\"} 2"}) {
    EXPECT_NE(metrics.find(series + expected), std::string::npos) << expected << "\n" << metrics;
  }
  EXPECT_NE(metrics.find("slipway_endpoint_fallbacks_total{endpoint=\"web\",route=\"slow@1\",reason=\"error\","
                         "answer=\"none\"} 1"),
            std::string::npos);
  auto described = slipway({"describe", "web"});
  EXPECT_NE(described.out.find("SLO: p99<=200ms@100rps"), std::string::npos) << described.out;
  EXPECT_NE(described.out.find("within 150 ms is answered with 504"), std::string::npos) << described.out;
  stop_server();
}

// A client that sends requests no version can read, with route keys that reach the canary, does
// not fail the canary: its refusals count against the canary only when the stable version can
// answer them.
TEST_F(ServingOps, RequestsNoVersionCanReadDoNotFailACanary) {
  ASSERT_EQ(slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--register", "lending"})
                .exit_code,
            0);
  ASSERT_EQ(slipway({"deploy", "web", "lending@1", "--fallback", "main"}).exit_code, 0);
  int port = start_server({});
  ASSERT_GT(port, 0);
  ASSERT_EQ(slipway({"deploy", "web", "lending@2", "--steps", "50,100", "--interval", "3s", "--min-requests", "20",
                     "--max-divergence", "1", "--max-p99-ratio", "100"})
                .exit_code,
            0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  std::vector<std::string> canary_keys;
  for (int key = 0; canary_keys.size() < 8 && key < 200; ++key) {
    std::vector<std::pair<std::string, std::string>> headers = {{"X-Slipway-Route-Key", "k" + std::to_string(key)}};
    auto answer = http_request(port, "POST", "/v2/models/web/infer", kOneRow, headers);
    if (answer.header("x-slipway-version") == "lending@2") canary_keys.push_back("k" + std::to_string(key));
  }
  ASSERT_EQ(canary_keys.size(), 8u);
  for (int request = 0; request < 80; ++request) {
    std::vector<std::pair<std::string, std::string>> headers = {
        {"X-Slipway-Route-Key", canary_keys[static_cast<std::size_t>(request) % canary_keys.size()]}};
    EXPECT_EQ(http_request(port, "POST", "/v2/models/web/infer", R"({"inputs":[]})", headers).status, 400);
    EXPECT_EQ(http_request(port, "POST", "/v2/models/web/infer", kOneRow).status, 200);
  }
  std::string status;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (std::chrono::steady_clock::now() < deadline) {
    status = slipway({"rollout", "status", "web"}).out;
    if (status.find("running") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_NE(status.find("promoted"), std::string::npos) << status;
  stop_server();
}

// SIGKILL in the middle of a rollout: the registry holds one configuration or the next, never a
// mix, and a restarted server carries the rollout on from its stored step.
TEST_F(ServingOps, ARolloutSurvivesTheServerBeingKilled) {
  auto second = slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--model", "gbdt",
                         "--param", "rounds=10", "--register", "lending"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  ASSERT_EQ(slipway({"deploy", "web", "lending@1"}).exit_code, 0);
  int port = start_server({});
  std::string url = "http://127.0.0.1:" + std::to_string(port) + "/v2/models/web/infer";
  auto start_load = [&](int server_port) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        slipway_binary(), "loadtest", "http://127.0.0.1:" + std::to_string(server_port) + "/v2/models/web/infer",
        "--rate", "200", "--duration", "6s", "--csv", data_path("lending_club.csv"), "--skip", "Class",
        "--no-progress"});
  };
  auto load = start_load(port);
  // Loose criteria: the two models differ in scores and speed, and this test is about the steps.
  ASSERT_EQ(slipway({"deploy", "web", "lending@2", "--steps", "50,100", "--interval", "2s", "--min-requests", "20",
                     "--max-divergence", "1", "--max-p99-ratio", "100"})
                .exit_code,
            0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  server_->signal(SIGKILL);
  server_->wait();
  load->signal(SIGKILL);
  load->wait();
  auto listed = slipway({"--json", "endpoints"});
  EXPECT_NE(listed.out.find("\"routes\":[{\"model\":\"lending\",\"version\":2,\"percent\":50},{\"model\":\"lending\","
                            "\"version\":1,\"percent\":50}]"),
            std::string::npos)
      << listed.out;
  EXPECT_NE(slipway({"rollout", "status", "web"}).out.find("running: step 1 of 2"), std::string::npos);

  port = start_server({});
  ASSERT_GT(port, 0);
  load = start_load(port);
  std::string status;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (std::chrono::steady_clock::now() < deadline) {
    status = slipway({"rollout", "status", "web"}).out;
    if (status.find("promoted") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_NE(status.find("state      promoted: every step passed its analysis"), std::string::npos) << status;
  EXPECT_NE(
      slipway({"--json", "endpoints"}).out.find("\"routes\":[{\"model\":\"lending\",\"version\":2,\"percent\":100}]"),
      std::string::npos);
  load->signal(SIGKILL);
  load->wait();
  stop_server();
}

// The batch output and the server's v2 answers for the same rows and version are the same
// floats, bit for bit: one bundle, one preprocessing, one kernel, in both.
TEST_F(ServingOps, BatchScoresEqualTheOnlineAnswersBitForBit) {
  std::string out = home_.path() + "/scored";
  auto scored = slipway(
      {"batch", "lending@1", "--data", data_path("lending_club.csv"), "--out", out, "--shards", "3", "--no-progress"});
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  std::vector<float> batch;
  for (const char* part : {"/part-00000.csv", "/part-00001.csv", "/part-00002.csv"}) {
    std::ifstream file(out + part);
    std::string line;
    std::getline(file, line);
    EXPECT_EQ(line, "row,model,probability,label");
    while (std::getline(file, line)) {
      auto model_end = line.find("lending@1,") + 10;
      batch.push_back(std::strtof(line.c_str() + model_end, nullptr));
    }
  }
  auto table = data::read_csv(data_path("lending_club.csv"));
  ASSERT_TRUE(table.ok());
  ASSERT_EQ(batch.size(), table->row_count());
  int port = start_server({});
  ASSERT_GT(port, 0);
  std::size_t row = 0;
  for (const auto& body : serve::v2_requests_from_table(*table, 500, {"Class"})) {
    auto answer = http_request(port, "POST", "/v2/models/lending/versions/1/infer", body);
    ASSERT_EQ(answer.status, 200) << answer.body.substr(0, 300);
    auto data = answer.body.find('[', answer.body.find("\"data\"", answer.body.find("\"name\":\"probability\"")));
    const char* cursor = answer.body.c_str() + data + 1;
    while (*cursor != ']') {
      char* end = nullptr;
      float online = std::strtof(cursor, &end);
      ASSERT_LT(row, batch.size());
      ASSERT_EQ(std::bit_cast<std::uint32_t>(online), std::bit_cast<std::uint32_t>(batch[row])) << "row " << row + 1;
      ++row;
      cursor = end + (*end == ',' ? 1 : 0);
    }
  }
  EXPECT_EQ(row, batch.size() / 500 * 500);  // every whole request of 500 rows
  stop_server();
}

// The request log: a model's sampled requests, with their answers, in JSON Lines segments under
// the workspace, never on the answer's path; counted in /metrics.
TEST_F(ServingOps, SampledRequestsAreLoggedWithTheirAnswers) {
  ASSERT_EQ(slipway({"serving-config", "lending", "--request-log-rate", "1"}).exit_code, 0);
  EXPECT_NE(slipway({"serving-config", "lending", "--request-log-rate", "1.5"}).exit_code, 0);
  ASSERT_EQ(slipway({"deploy", "web", "lending@1"}).exit_code, 0);
  int port = start_server({});
  ASSERT_GT(port, 0);
  std::string pretty = std::string(kOneRow);  // newlines inside: a log line must still be one line
  for (int request = 0; request < 10; ++request) {
    ASSERT_EQ(http_request(port, "POST", "/v2/models/lending/infer", pretty).status, 200);
    ASSERT_EQ(http_request(port, "POST", "/v2/models/web/infer", kOneRow).status, 200);
  }
  EXPECT_EQ(http_request(port, "POST", "/v2/models/lending/infer", "{\"inputs\": [oops").status, 400);
  std::string metrics;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline &&
         metrics.find("slipway_request_log_records_total{outcome=\"written\"} 21") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    metrics = http_request(port, "GET", "/metrics").body;
  }
  EXPECT_NE(metrics.find("slipway_request_log_records_total{outcome=\"written\"} 21"), std::string::npos) << metrics;
  stop_server();
  std::vector<std::string> lines;
  for (const auto& entry : std::filesystem::directory_iterator(home_.path() + "/request_log/lending")) {
    std::ifstream segment(entry.path());
    for (std::string line; std::getline(segment, line);) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 21u);
  int through_endpoint = 0, refused = 0;
  for (const auto& line : lines) {
    EXPECT_EQ(line.rfind("{\"time_ms\":", 0), 0u) << line;
    EXPECT_NE(line.find("\"model\":\"lending\",\"version\":\"1\""), std::string::npos) << line;
    through_endpoint += line.find("\"endpoint\":\"web\"") != std::string::npos;
    if (line.find("\"status\":400") != std::string::npos) {
      ++refused;
      EXPECT_NE(line.find("\"request\":\"{\\\"inputs\\\": [oops\""), std::string::npos) << line;  // kept as text
    } else {
      EXPECT_NE(line.find("\"request\":{\"inputs\":[ "), std::string::npos) << line.substr(0, 120);
      EXPECT_NE(line.find("\"response\":{\"model_name\":\"lending\""), std::string::npos);
    }
  }
  EXPECT_EQ(through_endpoint, 10);
  EXPECT_EQ(refused, 1);
}

// Monitoring from the request log: the rows an endpoint served, read back and compared with the
// training distribution; a sample like the training data is not flagged, a shifted one is.
TEST_F(ServingOps, MonitorReadsTheRequestLogOfAnEndpoint) {
  data::Table sample = log_endpoint_and_sample(25);
  int port = start_server({});
  ASSERT_GT(port, 0);
  for (const auto& body : serve::v2_requests_from_table(sample, 20, {"Class"})) {
    ASSERT_EQ(http_request(port, "POST", "/v2/models/web/infer", body).status, 200);
  }
  stop_server();  // the log is written out by then
  auto watched = slipway({"--json", "monitor", "web", "--window", "10m", "--p-value", "0.001"});
  ASSERT_EQ(watched.exit_code, 0) << watched.err;
  EXPECT_NE(watched.out.find("\"model\":\"lending@1 (main version of endpoint web)\""), std::string::npos)
      << watched.out;
  EXPECT_NE(watched.out.find("\"current_rows\":380"), std::string::npos) << watched.out;  // 19 requests of 20 rows
  EXPECT_NE(watched.out.find("\"drifted_inputs\":0,"), std::string::npos) << watched.out;
  auto text = slipway({"monitor", "web", "--window", "10m", "--html", home_.path() + "/drift.html"});
  EXPECT_NE(text.out.find("current   the request log of the last 10m"), std::string::npos) << text.out;
  std::ifstream page_file(home_.path() + "/drift.html");
  std::string page((std::istreambuf_iterator<char>(page_file)), {});
  EXPECT_NE(page.find("<h2 id=\"prediction\">prediction"), std::string::npos);
  EXPECT_NE(slipway({"monitor", "web", "--window", "10m", "--baseline", "previous-window"}).err.find("no rows"),
            std::string::npos);
  // Recorded alert states are gauges in /metrics.
  ASSERT_EQ(slipway({"monitor", "web", "--window", "10m", "--p-value", "0.001", "--alert"}).exit_code, 0);
  port = start_server({});
  ASSERT_GT(port, 0);
  std::string metrics = http_request(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("slipway_monitor_alert{model=\"lending\",subject=\"input:funded_amnt\"} 0"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("slipway_monitor_value{model=\"lending\",subject=\"prediction\"} "), std::string::npos);
  stop_server();
}

// Retraining on labelled traffic: the rows an endpoint served, joined by request id (row R of a
// longer request is ID/R) with the labels that arrived later, train a candidate that is gated and
// deployed as a canary.
TEST_F(ServingOps, RetrainsOnLabelledTraffic) {
  data::Table sample = log_endpoint_and_sample(4);
  int port = start_server({});
  ASSERT_GT(port, 0);
  const data::Column* label = sample.find("Class");
  ASSERT_NE(label, nullptr);
  std::ofstream labels(home_.path() + "/labels.csv");
  labels << "request,outcome\n";
  std::size_t request = 0, row = 0;
  for (std::string body : serve::v2_requests_from_table(sample, 10, {"Class"})) {
    std::string id = "b" + std::to_string(request++);
    body.insert(1, "\"id\":\"" + id + "\",");
    ASSERT_EQ(http_request(port, "POST", "/v2/models/web/infer", body).status, 200);
    for (std::size_t in_request = 0; in_request < 10 && row < sample.row_count(); ++in_request, ++row) {
      labels << id << "/" << in_request << "," << label->text_at(row) << "\n";
    }
  }
  labels.close();
  stop_server();
  ASSERT_EQ(slipway({"retrain", "policy", "lending", "--on", "performance", "--data", "traffic", "--id-col", "@id",
                     "--endpoint", "web", "--deploy", "canary:10", "--gate-max-drop", "0.2"})
                .exit_code,
            0);
  auto unlabelled = slipway({"retrain", "lending", "--force"});  // recorded as failed, and said
  EXPECT_EQ(unlabelled.exit_code, 1);
  EXPECT_NE(unlabelled.out.find("failed (none of the 2460 rows lending@1 answered in the last 7d 0h has a label yet"),
            std::string::npos)
      << unlabelled.out;
  ASSERT_EQ(slipway({"labels", "ingest", home_.path() + "/labels.csv", "--model", "lending", "--id-col", "request",
                     "--label-col", "outcome"})
                .exit_code,
            0);
  auto measured = slipway(
      {"--json", "monitor", "web", "--window", "10m", "--id-col", "@id", "--max-metric-drop", "auc=0.5", "--alert"});
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  EXPECT_NE(measured.out.find("\"performance\":{\"rows\":" + std::to_string(row) + ",\"unlabelled\":0"),
            std::string::npos)
      << measured.out;
  EXPECT_NE(slipway({"retrain", "lending"}).out.find("not due: cooling down: retraining #1 started"),
            std::string::npos);
  auto retrained = slipway({"retrain", "lending", "--force"});
  ASSERT_EQ(retrained.exit_code, 0) << retrained.err;
  EXPECT_NE(retrained.out.find("on the labelled traffic of lending@1 (artifact "), std::string::npos) << retrained.out;
  EXPECT_NE(retrained.out.find("deployed: lending@2 to web: canary 10%"), std::string::npos) << retrained.out;
  EXPECT_NE(slipway({"endpoints"}).out.find("lending@2 10%, lending@1 90%"), std::string::npos);
  EXPECT_EQ(slipway({"verify"}).exit_code, 0);  // the traffic rows are an artifact the retraining names
}

// A shadow sees copies of the requests; its answers are compared in /metrics and never returned.
TEST_F(ServingOps, AShadowIsComparedAndNeverAnswers) {
  auto second = slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--model", "gbdt",
                         "--param", "rounds=10", "--register", "lending"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto deployed = slipway({"deploy", "web", "lending@1", "--shadow", "lending@2"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.err;
  EXPECT_NE(deployed.out.find("shadow lending@2 on 100% of requests"), std::string::npos) << deployed.out;
  int port = start_server({});
  ASSERT_GT(port, 0);
  for (int request = 0; request < 40; ++request) {
    auto answer = http_request(port, "POST", "/v2/models/web/infer", kOneRow);
    ASSERT_EQ(answer.status, 200) << answer.body;
    EXPECT_NE(answer.body.find("\"model_version\":\"1\""), std::string::npos) << answer.body;
  }
  std::string metrics;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const std::string answered =
      "slipway_shadow_requests_total{endpoint=\"web\",route=\"lending@2\",outcome=\"answered\"} 40";
  while (std::chrono::steady_clock::now() < deadline && metrics.find(answered) == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    metrics = http_request(port, "GET", "/metrics").body;
  }
  EXPECT_NE(metrics.find(answered), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("slipway_shadow_rows_compared_total{endpoint=\"web\",route=\"lending@2\"} 40"),
            std::string::npos);
  EXPECT_NE(metrics.find("slipway_shadow_score_difference_count{endpoint=\"web\",route=\"lending@2\"} 40"),
            std::string::npos);
  EXPECT_EQ(slipway({"deploy", "web", "--no-shadow"}).exit_code, 0);
  stop_server();
}

}  // namespace
}  // namespace slipway::testing
