// The HTTP layer's limits against a real in-process server: oversized headers (431) and bodies
// (413), and a client too slow to finish its request is disconnected.
#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <thread>

#include "slipway/registry.h"
#include "slipway/serve.h"
#include "support/test_support.h"

namespace slipway::serve {
namespace {

using namespace std::chrono_literals;

TEST(HttpLimits, OversizedRequestsAndSlowClientsAreRefused) {
  testing::TempDir home;
  auto store = std::move(registry::Registry::open(home.path(), true)).value();
  ServerOptions options;
  options.http.port = 0;
  options.http.max_body_bytes = 1024;
  options.http.max_header_bytes = 2048;
  options.http.read_timeout = 1s;
  auto server = std::move(Server::start(*store, options)).value();
  std::jthread runner([&] { server->run(); });
  int port = server->port();

  EXPECT_EQ(testing::http_request(port, "GET", "/v2/health/live").status, 200);
  auto big_header = testing::http_request(port, "GET", "/v2/health/live", "", {{"X-Filler", std::string(4096, 'a')}});
  EXPECT_EQ(big_header.status, 431);
  EXPECT_NE(big_header.body.find("headers are larger"), std::string::npos);
  auto big_body = testing::http_request(port, "POST", "/v2/models/m/infer", std::string(4096, ' '));
  EXPECT_EQ(big_body.status, 413);

  // Half a request line, then silence: the server hangs up after its read timeout.
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  boost::asio::write(socket, boost::asio::buffer(std::string("GET /v2/health/live HT")));
  auto started = std::chrono::steady_clock::now();
  char byte = 0;
  boost::system::error_code error;
  std::size_t read = socket.read_some(boost::asio::buffer(&byte, 1), error);
  auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(read, 0u);
  EXPECT_TRUE(error == boost::asio::error::eof || error == boost::asio::error::connection_reset) << error.message();
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 10s);

  server->stop();
}

}  // namespace
}  // namespace slipway::serve
