// HTTP/1.1 transport (Boost.Beast): an asio event loop for I/O and a worker pool for inference.
#include <utility>  // Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <thread>

#include "slipway/serve.h"

namespace slipway::serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct Shared {
  Service& service;
  asio::thread_pool& workers;
  std::size_t max_body_bytes;
  std::size_t max_header_bytes;
  std::chrono::seconds read_timeout;
  int max_worker_backlog;
  std::atomic<int> in_flight{0};
  // Inference requests handed to the worker pool and not yet through their synchronous part.
  std::atomic<int> worker_backlog{0};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) {}

  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->body_limit(shared_.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(shared_.max_header_bytes));
    stream_.expires_after(shared_.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, std::size_t) { self->on_read(error); });
  }

  void on_read(beast::error_code error) {
    if (error == http::error::end_of_stream || error == beast::error::timeout ||
        error == asio::error::operation_aborted) {
      close();
      return;
    }
    if (error) {
      // A request we could not parse (too large, malformed HTTP): answer once, then close.
      int status = 400;
      std::string message = "malformed HTTP request: " + error.message();
      if (error == http::error::body_limit) {
        status = 413;
        message = "the request body is larger than the server's limit";
      } else if (error == http::error::header_limit) {
        status = 431;
        message = "the request headers are larger than the server's limit";
      }
      std::string body = "{\"error\":";
      append_json_string(body, message);
      body += "}";
      write(HttpResponse{status, "application/json", std::move(body), {}}, 11, false, false);
      return;
    }
    request_ = parser_->release();
    shared_.in_flight.fetch_add(1);
    if (Service::needs_worker(target())) {
      // Admission control: past the backlog bound the request is refused here, on the I/O thread,
      // without reading its body, so an overloaded server sheds load in microseconds and its
      // queue (and the latency it adds) stays bounded.
      if (shared_.worker_backlog.fetch_add(1) >= shared_.max_worker_backlog) {
        shared_.worker_backlog.fetch_sub(1);
        shared_.service.record_rejection(target());
        HttpResponse busy = overloaded_response();
        write(std::move(busy), request_.version(), request_.keep_alive(), true);
        return;
      }
      // Parsing and preprocessing run on a worker; a batched request is answered later from a
      // batch executor, and no thread waits for it meanwhile.
      asio::post(shared_.workers, [self = shared_from_this()] {
        self->shared_.worker_backlog.fetch_sub(1);
        // A client that closed its connection before a worker took its request is not served
        // (nginx's 499): under overload the requests of abandoned connections, many still in the
        // kernel's accept queue, would otherwise hold the server busy long after their clients
        // left. A client that only shut down its sending side looks the same and is dropped too.
        if (self->peer_closed()) {
          self->shared_.service.record_abandoned(self->target());
          asio::post(self->stream_.get_executor(), [self] {
            self->shared_.in_flight.fetch_sub(1);
            self->close();
          });
          return;
        }
        self->respond_async([self](HttpResponse response) {
          asio::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
            self->write(std::move(response), self->request_.version(), self->request_.keep_alive(), true);
          });
        });
      });
    } else {
      write(respond(), request_.version(), request_.keep_alive(), true);
    }
  }

  HttpResponse respond() {
    std::string_view method(request_.method_string().data(), request_.method_string().size());
    try {
      return shared_.service.handle(method, target(), request_.body(), headers());
    } catch (const std::exception& exception) {  // the boundary: nothing escapes into asio
      return internal_error_response(exception);
    }
  }

  void respond_async(const std::function<void(HttpResponse)>& done) {
    std::string_view method(request_.method_string().data(), request_.method_string().size());
    try {
      shared_.service.handle_async(method, target(), request_.body(), headers(), done);
    } catch (const std::exception& exception) {
      done(internal_error_response(exception));
    }
  }

  std::string_view target() const { return {request_.target().data(), request_.target().size()}; }

  // True when the peer has closed its side: the socket is readable with nothing left to read.
  // Safe from a worker thread: no other operation is pending on the socket while a request is
  // being handled.
  bool peer_closed() {
    char byte = 0;
    int fd = stream_.socket().native_handle();
    return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  RequestHeaders headers() const {
    RequestHeaders headers;
    auto authorization = request_.find(http::field::authorization);
    if (authorization != request_.end()) headers.authorization = {authorization->value().data(), authorization->value().size()};
    auto header_length = request_.find("Inference-Header-Content-Length");
    if (header_length != request_.end()) {
      headers.inference_header_length = {header_length->value().data(), header_length->value().size()};
    }
    return headers;
  }

  static HttpResponse overloaded_response() {
    HttpResponse response{429, "application/json",
                          "{\"error\":\"the server is overloaded (its request backlog is full); retry later\"}", {}, {}};
    response.headers.emplace_back("Retry-After", "1");
    return response;
  }

  static HttpResponse internal_error_response(const std::exception& exception) {
    std::string body = "{\"error\":";
    append_json_string(body, std::string("internal error: ") + exception.what());
    body += "}";
    return HttpResponse{500, "application/json", std::move(body), {}};
  }

  // `counted`: the request was counted in flight, so its end is counted too.
  void write(HttpResponse response, unsigned version, bool keep_alive, bool counted) {
    auto message =
        std::make_shared<http::response<http::string_body>>(static_cast<http::status>(response.status), version);
    message->set(http::field::server, "slipway");
    message->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->keep_alive(keep_alive);
    message->body() = std::move(response.body);
    message->prepare_payload();
    http::async_write(stream_, *message,
                      [self = shared_from_this(), message, counted](beast::error_code error, std::size_t) {
                        if (counted) self->shared_.in_flight.fetch_sub(1);
                        if (error || !message->keep_alive()) {
                          self->close();
                          return;
                        }
                        self->read();
                      });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  Shared& shared_;
};

}  // namespace

namespace {

std::size_t worker_count(const ServerOptions& options) {
  return static_cast<std::size_t>(options.worker_threads > 0 ? options.worker_threads : default_thread_count());
}

}  // namespace

struct Server::State {
  State(registry::Registry& registry, const ServerOptions& options)
      : options(options),
        service(registry, options.service),
        workers(worker_count(options)),
        shared{service,
               workers,
               options.max_body_bytes,
               options.max_header_bytes,
               options.read_timeout,
               options.max_pending_requests > 0 ? options.max_pending_requests
                                                : 64 * static_cast<int>(worker_count(options))},
        acceptor(io),
        signals(io, SIGINT, SIGTERM) {}

  void accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code error, tcp::socket socket) {
      if (error) {
        if (error == asio::error::operation_aborted || !acceptor.is_open()) return;
      } else {
        std::make_shared<Session>(std::move(socket), shared)->start();
      }
      accept();
    });
  }

  // Lets requests in flight finish writing their responses (until `deadline`), then ends the loop.
  void drain_then_stop(std::shared_ptr<asio::steady_timer> timer, std::chrono::steady_clock::time_point deadline) {
    if (shared.in_flight.load() <= 0 || std::chrono::steady_clock::now() > deadline) {
      io.stop();
      return;
    }
    timer->expires_after(std::chrono::milliseconds(10));
    timer->async_wait([this, timer, deadline](beast::error_code) { drain_then_stop(timer, deadline); });
  }

  ServerOptions options;
  Service service;
  asio::thread_pool workers;
  Shared shared;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::signal_set signals;
  std::atomic<bool> stopping{false};
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

Server::~Server() {
  stop();
  state_->workers.join();
  // Queued batch requests are answered while the event loop their sessions live on still exists.
  state_->service.stop_batching();
}

Result<std::unique_ptr<Server>> Server::start(registry::Registry& registry, const ServerOptions& options) {
  auto state = std::make_unique<State>(registry, options);
  beast::error_code error;
  auto address = asio::ip::make_address(options.host, error);
  if (error) return invalid_argument("'" + options.host + "' is not an IP address");
  tcp::endpoint endpoint(address, options.port);
  state->acceptor.open(endpoint.protocol(), error);
  if (!error) state->acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) state->acceptor.bind(endpoint, error);
  if (!error) state->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return io_error("cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " + error.message());
  }
  return std::unique_ptr<Server>(new Server(std::move(state)));
}

std::uint16_t Server::port() const { return state_->acceptor.local_endpoint().port(); }

Service& Server::service() { return state_->service; }

void Server::run() {
  State& state = *state_;
  state.signals.async_wait([this](beast::error_code error, int) {
    if (!error) stop();
  });
  state.accept();
  std::vector<std::jthread> threads;
  int io_threads = std::max(1, state.options.io_threads);
  for (int index = 1; index < io_threads; ++index) threads.emplace_back([&state] { state.io.run(); });
  state.io.run();
}

void Server::stop() {
  State& state = *state_;
  if (state.stopping.exchange(true)) return;
  asio::post(state.io, [&state] {
    beast::error_code ignored;
    state.acceptor.close(ignored);
    state.signals.cancel(ignored);
    state.drain_then_stop(std::make_shared<asio::steady_timer>(state.io),
                          std::chrono::steady_clock::now() + std::chrono::seconds(5));
  });
}

}  // namespace slipway::serve
