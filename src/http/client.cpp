// HTTP/1.1 client (Boost.Beast): keep-alive connections on an asio event loop the caller runs.
//
// Built for the load generator's hot path. A connection keeps one request message whose request
// line and headers are set once (set_request); a send only points the message's span body at the
// caller's bytes (written in place, never copied) and refreshes Content-Length when the size
// changes. The completion callback is stored in the connection, so a send allocates nothing of
// its own: what remains per request is asio's recycled handler memory and Beast's response
// parsing, as in the generator's code before this module had a client.
//
// Lifetimes: a connection's and a timer's state are shared with the handlers in flight, so
// destroying the public object while an operation is pending is safe: the socket is closed, the
// handler runs with operation_aborted, and no callback is called.
#include <utility>  // Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include <charconv>
#include <optional>

#include "slipway/http.h"

namespace slipway::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

beast::string_view to_beast(std::string_view text) { return {text.data(), text.size()}; }
std::string_view to_std(beast::string_view text) { return {text.data(), text.size()}; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// URLs and endpoints.

Result<Url> parse_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  auto refuse = [&](std::string_view why) {
    return invalid_argument("the URL '" + std::string(url) + "' " + std::string(why));
  };
  if (!url.starts_with(kScheme)) {
    return invalid_argument("the URL must start with http:// (got '" + std::string(url) + "')");
  }
  std::string_view rest = url.substr(kScheme.size());
  std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  Url parsed;
  if (slash != std::string_view::npos) parsed.target = std::string(rest.substr(slash));
  std::string_view host = authority;
  std::string_view port;
  if (authority.starts_with('[')) {  // [IPv6]:port
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return refuse("has an unclosed '[' in its host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return refuse("has text after its bracketed host; expected ':PORT'");
      port = after.substr(1);
      if (port.empty()) return refuse("has an empty port");
    }
  } else if (std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) return refuse("has an empty port");
  }
  if (host.empty()) return refuse("has no host");
  parsed.host = std::string(host);
  if (!port.empty()) {
    unsigned value = 0;
    auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (error != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      return refuse("has port '" + std::string(port) + "'; expected a number from 1 to 65535");
    }
    parsed.port = static_cast<std::uint16_t>(value);
  }
  return parsed;
}

struct ClientEndpoint::Addresses {
  std::string host;
  std::uint16_t port = 0;
  tcp::resolver::results_type results;
};

ClientEndpoint::ClientEndpoint(std::shared_ptr<const Addresses> addresses) : addresses_(std::move(addresses)) {}

Result<ClientEndpoint> ClientEndpoint::resolve(const std::string& host, std::uint16_t port) {
  auto addresses = std::make_shared<Addresses>();
  addresses->host = host;
  addresses->port = port;
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::error_code error;
  addresses->results = resolver.resolve(host, std::to_string(port), error);
  if (error) return invalid_argument("cannot resolve '" + host + "': " + error.message());
  return ClientEndpoint(std::move(addresses));
}

const std::string& ClientEndpoint::host() const { return addresses_->host; }
std::uint16_t ClientEndpoint::port() const { return addresses_->port; }

// ---------------------------------------------------------------------------------------------
// The loop and its timers.

struct ClientLoop::State {
  asio::io_context io;
};

ClientLoop::ClientLoop() : state_(std::make_unique<State>()) {}
ClientLoop::~ClientLoop() = default;

void ClientLoop::run() {
  state_->io.run();
  state_->io.restart();  // after, not before: a stop() that came before run() still counts
}

void ClientLoop::stop() { state_->io.stop(); }

void ClientLoop::post(std::function<void()> task) { asio::post(state_->io, std::move(task)); }

struct ClientTimer::State {
  explicit State(asio::io_context& io) : timer(io) {}
  asio::steady_timer timer;
  std::function<void()> fire;
  std::uint64_t generation = 0;  // which wait `fire` belongs to
};

ClientTimer::ClientTimer(ClientLoop& loop) : state_(std::make_shared<State>(loop.state_->io)) {}

ClientTimer::~ClientTimer() {
  try {
    cancel();
  } catch (...) {  // a destructor must not throw; a timer that cannot be cancelled fires into nothing
  }
}

void ClientTimer::wait_until(std::chrono::steady_clock::time_point when, std::function<void()> fire) {
  // A wait that already expired may have its handler queued with success; the generation keeps
  // it from calling the new callback.
  std::uint64_t generation = ++state_->generation;
  state_->fire = std::move(fire);
  state_->timer.expires_at(when);
  state_->timer.async_wait([state = state_, generation](beast::error_code error) {
    if (error || generation != state->generation || !state->fire) return;
    // Moved out first: the callback may set the next wait, which replaces state->fire.
    std::function<void()> fire = std::move(state->fire);
    state->fire = nullptr;
    fire();
  });
}

void ClientTimer::cancel() {
  ++state_->generation;
  state_->fire = nullptr;
  state_->timer.cancel();
}

// ---------------------------------------------------------------------------------------------
// Connections.

struct ClientConnection::State : std::enable_shared_from_this<ClientConnection::State> {
  enum class Stage { kNone, kConnect, kWrite, kRead };

  State(asio::io_context& io, ClientEndpoint endpoint, tcp::resolver::results_type addresses, Done done)
      : stream(io), endpoint(std::move(endpoint)), addresses(std::move(addresses)), done(std::move(done)) {}

  beast::tcp_stream stream;
  ClientEndpoint endpoint;
  tcp::resolver::results_type addresses;
  Done done;
  // The body views the caller's bytes: sending copies nothing.
  bhttp::request<bhttp::span_body<const char>> request;
  std::optional<std::size_t> payload_size;  // the body size Content-Length was set for
  bhttp::response<bhttp::string_body> response;
  beast::flat_buffer buffer;
  bool connected = false;
  bool in_flight = false;
  bool abandoned = false;  // the ClientConnection is gone: call nothing
  // Why the last send failed, turned into a sentence only when asked.
  Stage failed_stage = Stage::kNone;
  beast::error_code failed_error;

  void close_socket() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
    connected = false;
  }

  void connect_and_send() {
    stream.async_connect(addresses, [self = shared_from_this()](beast::error_code error, const tcp::endpoint&) {
      if (error) {
        self->fail(Stage::kConnect, error);
        return;
      }
      self->connected = true;
      beast::error_code ignored;
      self->stream.socket().set_option(tcp::no_delay(true), ignored);
      self->write_and_read();
    });
  }

  void write_and_read() {
    bhttp::async_write(stream, request, [self = shared_from_this()](beast::error_code error, std::size_t) {
      if (error) {
        self->fail(Stage::kWrite, error);
        return;
      }
      self->response = {};
      bhttp::async_read(self->stream, self->buffer, self->response, [self](beast::error_code read_error, std::size_t) {
        if (read_error) {
          self->fail(Stage::kRead, read_error);
          return;
        }
        self->finish(self->response.result_int());
      });
    });
  }

  void fail(Stage stage, beast::error_code error) {
    failed_stage = stage;
    failed_error = error;
    response = {};
    finish(0);
  }

  void finish(int status) {
    if (status == 0 || !response.keep_alive()) close_socket();
    in_flight = false;
    if (abandoned) return;
    done(status);
  }
};

ClientConnection::ClientConnection(ClientLoop& loop, ClientEndpoint endpoint, Done done) {
  tcp::resolver::results_type addresses = endpoint.addresses_->results;
  state_ = std::make_shared<State>(loop.state_->io, std::move(endpoint), std::move(addresses), std::move(done));
  set_request(ClientRequest{});
}

ClientConnection::~ClientConnection() {
  state_->abandoned = true;
  state_->close_socket();
}

void ClientConnection::set_request(const ClientRequest& request) {
  auto& message = state_->request;
  message = {};
  message.version(11);
  if (bhttp::verb verb = bhttp::string_to_verb(to_beast(request.method)); verb != bhttp::verb::unknown) {
    message.method(verb);
  } else {
    message.method_string(to_beast(request.method));
  }
  message.target(to_beast(request.target));
  message.set(bhttp::field::host, state_->endpoint.host());
  for (const auto& [name, value] : request.headers) message.set(to_beast(name), value);
  message.keep_alive(true);
  state_->payload_size.reset();
}

void ClientConnection::send(std::string_view body, std::chrono::steady_clock::time_point deadline) {
  State& state = *state_;
  state.in_flight = true;
  state.failed_stage = State::Stage::kNone;
  state.request.body() = bhttp::span_body<const char>::value_type(body.data(), body.size());
  if (state.payload_size != body.size()) {
    state.request.prepare_payload();
    state.payload_size = body.size();
  }
  state.stream.expires_at(deadline);
  if (state.connected) {
    state.write_and_read();
  } else {
    state.connect_and_send();
  }
}

void ClientConnection::close() { state_->close_socket(); }

bool ClientConnection::connected() const { return state_->connected; }

std::string_view ClientConnection::response_body() const { return state_->response.body(); }

std::string_view ClientConnection::response_header(std::string_view name) const {
  return to_std(state_->response[to_beast(name)]);
}

std::vector<std::pair<std::string, std::string>> ClientConnection::response_headers() const {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& field : state_->response) {
    headers.emplace_back(std::string(to_std(field.name_string())), std::string(to_std(field.value())));
  }
  return headers;
}

std::string ClientConnection::failure() const {
  const State& state = *state_;
  if (state.failed_stage == State::Stage::kNone) return "";
  std::string where = state.endpoint.host() + ":" + std::to_string(state.endpoint.port());
  if (timed_out()) return "no response from " + where + " before the deadline";
  switch (state.failed_stage) {
    case State::Stage::kConnect:
      return "cannot connect to " + where + ": " + state.failed_error.message();
    case State::Stage::kWrite:
      return "sending the request to " + where + " failed: " + state.failed_error.message();
    default:
      return "reading the response from " + where + " failed: " + state.failed_error.message();
  }
}

bool ClientConnection::timed_out() const {
  return state_->failed_stage != State::Stage::kNone && state_->failed_error == beast::error::timeout;
}

// ---------------------------------------------------------------------------------------------
// Blocking one-shot requests.

std::string_view ClientResponse::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (beast::iequals(to_beast(key), to_beast(name))) return value;
  }
  return "";
}

Result<ClientResponse> fetch(std::string_view method, std::string_view url, std::string_view body,
                             const std::vector<std::pair<std::string, std::string>>& headers,
                             std::chrono::milliseconds timeout) {
  SLIPWAY_ASSIGN_OR_RETURN(Url parsed, parse_url(url));
  SLIPWAY_ASSIGN_OR_RETURN(ClientEndpoint endpoint, ClientEndpoint::resolve(parsed.host, parsed.port));
  ClientLoop loop;
  ClientResponse response;
  Status failure;
  ClientConnection* sender = nullptr;
  ClientConnection connection(loop, endpoint, [&](int status) {
    if (status == 0) {
      failure = sender->timed_out() ? deadline_exceeded(sender->failure()) : unavailable(sender->failure());
      return;
    }
    response.status = status;
    response.body = std::string(sender->response_body());
    response.headers = sender->response_headers();
  });
  sender = &connection;
  connection.set_request(ClientRequest{std::string(method), parsed.target, headers});
  connection.send(body, std::chrono::steady_clock::now() + timeout);
  loop.run();
  connection.close();
  if (!failure.ok()) return failure;
  return response;
}

}  // namespace slipway::http
