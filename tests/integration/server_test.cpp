// `slipway serve` as a user runs it: a real process on a free loopback port, real HTTP.
#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <csignal>
#include <thread>

#include "support/test_support.h"

namespace slipway::testing {
namespace {

// Sends raw bytes and returns everything the server sends back until it closes the connection.
std::string raw_exchange(int port, const std::string& request) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  asio::write(socket, asio::buffer(request));
  std::string received;
  boost::system::error_code error;
  char buffer[4096];
  while (!error) {
    std::size_t count = socket.read_some(asio::buffer(buffer), error);
    received.append(buffer, count);
  }
  return received;
}

TEST(Server, ServesV2OverHttpAndStopsCleanly) {
  TempDir home;
  auto trained = run_command({slipway_binary(), "--home", home.path(), "train", "--data", data_path("lending_club.csv"),
                              "--target", "Class", "--register", "lending"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;

  ChildProcess server({slipway_binary(), "--home", home.path(), "--json", "serve", "--port", "0"});
  const StartedServer started = read_started_server(server);
  ASSERT_GT(started.port, 0) << "serve printed: " << started.first_line;
  int port = started.port;

  EXPECT_EQ(http_request(port, "GET", "/v2/health/live").status, 200);
  EXPECT_EQ(http_request(port, "GET", "/v2/health/ready").status, 200);
  auto metadata = http_request(port, "GET", "/v2/models/lending");
  EXPECT_EQ(metadata.status, 200);
  EXPECT_NE(metadata.body.find("\"platform\":\"slipway_linear\""), std::string::npos);

  std::string request = R"({"id":"r1","inputs":[
    {"name":"funded_amnt","datatype":"FP32","shape":[2],"data":[16100,32000]},
    {"name":"term","datatype":"BYTES","shape":[2],"data":["term_36","term_60"]},
    {"name":"int_rate","datatype":"FP32","shape":[2],"data":[13.99,11.99]},
    {"name":"sub_grade","datatype":"BYTES","shape":[2],"data":["C4","C1"]},
    {"name":"addr_state","datatype":"BYTES","shape":[2],"data":["CT","MN"]},
    {"name":"verification_status","datatype":"BYTES","shape":[2],"data":["Not_Verified","Verified"]},
    {"name":"annual_inc","datatype":"FP32","shape":[2],"data":[35000,72000]},
    {"name":"emp_length","datatype":"BYTES","shape":[2],"data":["emp_5","emp_ge_10"]},
    {"name":"delinq_2yrs","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"inq_last_6mths","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"revol_util","datatype":"FP32","shape":[2],"data":[67.4,null]},
    {"name":"acc_now_delinq","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"open_il_6m","datatype":"FP32","shape":[2],"data":[1,5]},
    {"name":"open_il_12m","datatype":"FP32","shape":[2],"data":[0,1]},
    {"name":"open_il_24m","datatype":"FP32","shape":[2],"data":[0,3]},
    {"name":"total_bal_il","datatype":"FP32","shape":[2],"data":[1099,49187]},
    {"name":"all_util","datatype":"FP32","shape":[2],"data":[48,77]},
    {"name":"inq_fi","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"inq_last_12m","datatype":"FP32","shape":[2],"data":[3,0]},
    {"name":"delinq_amnt","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"num_il_tl","datatype":"FP32","shape":[2],"data":[3,9]},
    {"name":"total_il_high_credit_limit","datatype":"FP32","shape":[2],"data":[13193,65945]}]})";
  auto inferred = http_request(port, "POST", "/v2/models/lending/infer", request);
  EXPECT_EQ(inferred.status, 200) << inferred.body;
  EXPECT_NE(inferred.body.find("\"id\":\"r1\""), std::string::npos);
  EXPECT_NE(inferred.body.find("\"shape\":[2]"), std::string::npos);

  auto bad = http_request(port, "POST", "/v2/models/lending/infer", "{not json");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body.rfind("{\"error\":", 0), 0u);
  EXPECT_EQ(http_request(port, "GET", "/v2/models/ghost").status, 404);
  // The server survived the bad requests.
  EXPECT_EQ(http_request(port, "GET", "/v2/health/live").status, 200);

  // HEAD: GET's headers, Content-Length included, and no body.
  std::string head = raw_exchange(port, "HEAD /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 13\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "") << head;
  // 405 names the allowed method.
  std::string wrong = raw_exchange(port, "DELETE /v2/models/lending HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(wrong.rfind("HTTP/1.1 405", 0), 0u) << wrong;
  EXPECT_NE(wrong.find("Allow: GET\r\n"), std::string::npos) << wrong;

  // SIGHUP no longer kills the server (nothing to reload without --config: logged and ignored).
  server.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(http_request(port, "GET", "/v2/health/live").status, 200);

  auto metrics = http_request(port, "GET", "/metrics");
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"lending\",version=\"1\",code=\"200\"} 1"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("slipway_http_requests_total{route=\"model_metadata\",code=\"200\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_request_duration_seconds_count"), std::string::npos);

  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(), 0);
}

// SIGHUP re-reads `serve --config`; the models swap to the new configuration.
TEST(Server, SighupReloadsTheConfigFile) {
  TempDir home;
  auto trained = run_command({slipway_binary(), "--home", home.path(), "train", "--data", data_path("lending_club.csv"),
                              "--target", "Class", "--register", "lending"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::string config = home.file("serving.yaml");
  write_text(config, "models:\n  lending:\n    max_batch_size: 8\n");
  ChildProcess server({slipway_binary(), "--home", home.path(), "--json", "serve", "--port", "0", "--config", config});
  const StartedServer started = read_started_server(server);
  ASSERT_GT(started.port, 0) << "serve printed: " << started.first_line;
  int port = started.port;
  EXPECT_NE(http_request(port, "GET", "/v2/models/lending/config").body.find("\"max_batch_size\":8"),
            std::string::npos);

  write_text(config, "models:\n  lending:\n    max_batch_size: 16\n");
  server.signal(SIGHUP);
  std::string seen;
  for (int attempt = 0; attempt < 100; ++attempt) {
    seen = http_request(port, "GET", "/v2/models/lending/config").body;
    if (seen.find("\"max_batch_size\":16") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(seen.find("\"max_batch_size\":16"), std::string::npos) << seen;

  // A broken file keeps what is served.
  write_text(config, "models: [unclosed\n");
  server.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_NE(http_request(port, "GET", "/v2/models/lending/config").body.find("\"max_batch_size\":16"),
            std::string::npos);
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(), 0);
}

}  // namespace
}  // namespace slipway::testing
