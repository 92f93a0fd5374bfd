// HTTP/1.1 server (Boost.Beast): asio event loops for I/O, a thread pool for blocking routes.
//
// Connections are tracked in a registry so the server can close the one idle the longest when
// it reaches max_connections, and close idle ones when it drains. Request bodies are admitted
// against a shared byte budget once their headers are read (their Content-Length is known then),
// so the memory held by bodies in flight is bounded whatever clients send.
#include <utility>  // Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "slipway/http.h"

namespace slipway::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kBodyPadding = 64;  // simdjson's SIMDJSON_PADDING

class Session;

// What every session shares: the options, the routes, the worker pool and the counters.
struct Shared {
  ServerOptions options;
  std::vector<Route> routes;  // longest prefix first
  asio::thread_pool& workers;
  int max_worker_backlog = 0;
  int max_connections = 0;
  std::size_t max_inflight_body_bytes = 0;
  std::size_t body_memory_factor = 1;  // options.body_memory_factor, at least 1

  std::atomic<int> in_flight{0};       // requests read and not yet answered
  std::atomic<int> worker_backlog{0};  // requests handed to the workers and not yet started
  std::atomic<bool> draining{false};
  std::atomic<std::uint64_t> inflight_body_bytes{0};
  std::atomic<std::uint64_t> connections_accepted{0};
  std::atomic<std::uint64_t> connections_evicted{0};
  std::atomic<std::uint64_t> accept_errors{0};
  std::atomic<std::uint64_t> malformed_requests{0};

  std::mutex sessions_mutex;
  std::unordered_set<Session*> sessions;  // every live session; see Session's constructor

  const Route* route_for(std::string_view path) const {
    for (const auto& route : routes) {
      if (path.size() < route.prefix.size() || path.substr(0, route.prefix.size()) != route.prefix) continue;
      if (path.size() == route.prefix.size() || route.prefix.back() == '/' || path[route.prefix.size()] == '/') {
        return &route;
      }
    }
    return nullptr;
  }

  std::size_t connection_count() {
    std::lock_guard lock(sessions_mutex);
    return sessions.size();
  }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) {
    std::lock_guard lock(shared_.sessions_mutex);
    shared_.sessions.insert(this);
  }
  ~Session() {
    release_body_budget();
    std::lock_guard lock(shared_.sessions_mutex);
    shared_.sessions.erase(this);
  }

  void start() { read(); }

  // Answers 503 without reading a request: the server has no room for this connection.
  void refuse_connection() {
    request_.version(11);
    write(error_response(503, "the server has too many open connections; retry later"), false, false);
  }

  // Nanoseconds (monotonic) since when this session has waited for a request; 0 while busy.
  std::int64_t idle_since() const { return idle_since_.load(std::memory_order_relaxed); }

  // Closes the connection if it is waiting for a request and none has started to arrive
  // (called on its own strand). A request already arriving is read and answered, with
  // `Connection: close` while the server drains.
  void close_if_idle() {
    if (idle_since() == 0 || buffer_.size() > 0) return;
    char byte = 0;
    if (::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0) return;
    shutdown_both();
  }

  asio::any_io_executor executor() { return stream_.get_executor(); }

 private:
  void read() {
    if (shared_.draining.load()) {
      close();
      return;
    }
    parser_.emplace();
    parser_->body_limit(shared_.options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(shared_.options.max_header_bytes));
    stream_.expires_after(shared_.options.read_timeout);
    idle_since_.store(monotonic_ns(), std::memory_order_relaxed);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code error, std::size_t) { self->on_header(error); });
  }

  void on_header(beast::error_code error) {
    idle_since_.store(0, std::memory_order_relaxed);
    if (error) return on_read_error(error);
    // A body is admitted against the shared budget before it is read: its Content-Length, or
    // the body limit for a chunked body of unknown length.
    auto length = parser_->content_length();
    std::uint64_t reserve = length ? *length : (parser_->chunked() ? shared_.options.max_body_bytes : 0);
    if (reserve > shared_.options.max_body_bytes) return on_read_error(bhttp::error::body_limit);
    if (length) {
      // Room for a SIMD parser to read past the end: the body is parsed where it lies.
      parser_->get().body().reserve(static_cast<std::size_t>(*length) + kBodyPadding);
    }
    request_.version(parser_->get().version());  // for a refusal's status line
    if (!admit_body(reserve)) return;
    // What has arrived with the headers is parsed here: a request without a body, or one whose
    // body came in the same segments (most do), is answered without another trip through the
    // event loop.
    beast::error_code parse_error;
    while (!parser_->is_done() && buffer_.size() > 0) {
      std::size_t used = parser_->put(buffer_.data(), parse_error);
      buffer_.consume(used);
      if (parse_error == bhttp::error::need_more) {
        parse_error = {};
        break;
      }
      if (parse_error || used == 0) break;
    }
    if (parse_error || parser_->is_done()) return on_read(parse_error);
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code read_error, std::size_t) { self->on_read(read_error); });
  }

  void on_read_error(beast::error_code error) {
    if (error == bhttp::error::end_of_stream || error == beast::error::timeout ||
        error == asio::error::operation_aborted || error == asio::error::connection_reset ||
        error == asio::error::eof || error == asio::error::bad_descriptor) {
      close();
      return;
    }
    // A request we could not parse (too large, malformed HTTP): answer once, then close.
    ++shared_.malformed_requests;
    int status = 400;
    std::string message = "malformed HTTP request: " + error.message();
    const Route* route = nullptr;
    if (error == bhttp::error::body_limit) {
      status = 413;
      message = "the request body is larger than the server's limit";
      // The headers were read: the route is known, and answers in its clients' shape.
      auto target = parser_->get().target();
      route = shared_.route_for(path_of(std::string_view(target.data(), target.size())));
    } else if (error == bhttp::error::header_limit) {
      status = 431;
      message = "the request headers are larger than the server's limit";
    }
    request_.version(11);
    write(refusal_for(route, status, message), false, false);
  }

  void on_read(beast::error_code error) {
    if (error) {
      release_body_budget();
      return on_read_error(error);
    }
    request_ = parser_->release();
    // A body was admitted at its bytes while it arrived (so slow senders hold only what they
    // send); handling it takes body_memory_factor times that, admitted now or refused.
    if (!admit_body(request_.body().size() * (shared_.body_memory_factor - 1))) return;
    shared_.in_flight.fetch_add(1);
    fill_request_view();
    const Route* route = shared_.route_for(view_.path);
    if (route == nullptr) {
      if (shared_.options.on_refusal) shared_.options.on_refusal(view_, Refusal::kNoRoute);
      write(error_response(404, "no route for " + std::string(view_.method) + " " + std::string(view_.path)),
            keep_alive(), true);
      return;
    }
    if (route->execution && route->execution(view_) == Execution::kWorker) return dispatch_to_worker(*route);
    call(*route, [self = shared_from_this()](Response response) { self->answer(std::move(response)); });
  }

  void dispatch_to_worker(const Route& route) {
    // Under load, a request whose client has already gone is dropped here rather than taking a
    // backlog slot: after an overload the accept queue can hold thousands of such requests from
    // clients that timed out, and each would otherwise pass through a worker before live
    // requests are served. (Checked only when the backlog is filling: it costs a system call.)
    if (shared_.worker_backlog.load(std::memory_order_relaxed) >= shared_.max_worker_backlog / 2 &&
        buffer_.size() == 0 && peer_closed()) {
      return drop_for_closed_client();
    }
    // Admission control: past the backlog bound the request is refused here, on the I/O thread,
    // without its body being looked at, so an overloaded server sheds load in microseconds and
    // its queue (and the latency it adds) stays bounded.
    if (shared_.worker_backlog.fetch_add(1) >= shared_.max_worker_backlog) {
      shared_.worker_backlog.fetch_sub(1);
      if (shared_.options.on_refusal) shared_.options.on_refusal(view_, Refusal::kOverloaded);
      Response busy = refusal_for(&route, 429, "the server is overloaded (its request backlog is full); retry later");
      busy.headers.emplace_back("Retry-After", "1");
      write(std::move(busy), keep_alive(), true);
      return;
    }
    asio::post(shared_.workers, [self = shared_from_this(), &route] {
      self->shared_.worker_backlog.fetch_sub(1);
      // A client that closed its connection before a worker took its request is not served
      // (nginx's 499): under overload the requests of abandoned connections, many still in the
      // kernel's accept queue, would otherwise hold the server busy long after their clients
      // left. A client that only shut down its sending side looks the same and is dropped too.
      if (self->peer_closed()) {
        asio::post(self->stream_.get_executor(), [self] { self->drop_for_closed_client(); });
        return;
      }
      self->call(route, [self](Response response) {
        asio::post(self->stream_.get_executor(),
                   [self, response = std::move(response)]() mutable { self->answer(std::move(response)); });
      });
    });
  }

  // The client left before its request was served: counted as a refusal, never answered.
  void drop_for_closed_client() {
    if (shared_.options.on_refusal) shared_.options.on_refusal(view_, Refusal::kClientClosed);
    shared_.in_flight.fetch_sub(1);
    release_body_budget();
    close();
  }

  void call(const Route& route, const Respond& respond) {
    try {
      route.handle(view_, respond);
    } catch (const std::exception& exception) {  // the boundary: nothing escapes into asio
      respond(refusal_for(&route, 500, std::string("internal error: ") + exception.what()));
    }
  }

  static Response refusal_for(const Route* route, int status, std::string_view message) {
    return route != nullptr && route->refusal ? route->refusal(status, message) : error_response(status, message);
  }

  void answer(Response response) {
    if (response.start_stream) return start_stream(response);
    write(std::move(response), keep_alive(), true);
  }

  // A streamed response: the headers now, with chunked transfer encoding, then each chunk the
  // producer writes, then the last chunk; the connection then reads its next request.
  //
  // The chunks wait in a StreamQueue the session and the producer's Stream share. The Stream
  // also holds the session, which has no pending operation to keep it alive while the producer
  // works between chunks; a Stream dropped unfinished abandons the response.
  struct StreamQueue {
    std::mutex mutex;
    std::deque<std::string> chunks;
    std::size_t pending_bytes = 0;
    bool finished = false;
    std::atomic<bool> gone{false};
  };

  class Stream final : public ResponseStream {
   public:
    Stream(std::shared_ptr<Session> session, std::shared_ptr<StreamQueue> queue)
        : session_(std::move(session)), queue_(std::move(queue)), fd_(session_->stream_.socket().native_handle()) {}
    ~Stream() override {
      bool finished = false;
      {
        std::lock_guard lock(queue_->mutex);
        finished = queue_->finished;
      }
      if (!finished) queue_->gone.store(true);
      kick();
    }

    bool write(std::string chunk) override {
      if (chunk.empty()) return !queue_->gone.load();  // an empty chunk would end the response
      if (queue_->gone.load()) {
        kick();  // so the session learns of it and closes, even if no write reached it
        return false;
      }
      {
        std::lock_guard lock(queue_->mutex);
        if (queue_->finished) return false;
        if (queue_->pending_bytes + chunk.size() > kMaxPendingStreamBytes) {
          queue_->gone.store(true);  // a client this slow is abandoned: its bytes would pile up here
        } else {
          queue_->pending_bytes += chunk.size();
          queue_->chunks.push_back(std::move(chunk));
        }
      }
      kick();
      return !queue_->gone.load();
    }

    void finish() override {
      {
        std::lock_guard lock(queue_->mutex);
        queue_->finished = true;
      }
      kick();
    }

    bool client_gone() const override {
      if (queue_->gone.load()) return true;
      char byte = 0;
      if (::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        queue_->gone.store(true);
        kick();
      }
      return queue_->gone.load();
    }

   private:
    void kick() const {
      asio::post(session_->stream_.get_executor(), [session = session_] { session->pump_stream(); });
    }
    std::shared_ptr<Session> session_;
    std::shared_ptr<StreamQueue> queue_;
    int fd_;
  };

  void start_stream(const Response& response) {
    auto header = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(response.status),
                                                                       request_.version());
    header->set(bhttp::field::server, "slipway");
    header->set(bhttp::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) header->set(name, value);
    header->keep_alive(keep_alive());
    header->chunked(true);
    auto serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*header);
    stream_queue_ = std::make_shared<StreamQueue>();
    stream_writing_ = true;
    stream_.expires_after(shared_.options.read_timeout);
    bhttp::async_write_header(stream_, *serializer,
                              [self = shared_from_this(), header, serializer](beast::error_code error, std::size_t) {
                                self->stream_writing_ = false;
                                if (error) return self->end_stream(false);
                                self->pump_stream();
                              });
    response.start_stream(std::make_shared<Stream>(shared_from_this(), stream_queue_));
  }

  // Writes the stream's next chunk, or its end; one write at a time, on this session's strand.
  void pump_stream() {
    if (!stream_queue_ || stream_writing_) return;
    StreamQueue& queue = *stream_queue_;
    if (queue.gone.load()) return end_stream(false);
    std::shared_ptr<std::string> chunk;
    bool finished = false;
    {
      std::lock_guard lock(queue.mutex);
      if (!queue.chunks.empty()) {
        chunk = std::make_shared<std::string>(std::move(queue.chunks.front()));
        queue.chunks.pop_front();
      }
      finished = queue.finished;
    }
    if (!chunk && !finished) return;
    stream_writing_ = true;
    stream_.expires_after(shared_.options.read_timeout);
    if (chunk) {
      asio::async_write(stream_, bhttp::make_chunk(asio::buffer(*chunk)),
                        [self = shared_from_this(), chunk](beast::error_code error, std::size_t) {
                          self->stream_writing_ = false;
                          {
                            std::lock_guard lock(self->stream_queue_->mutex);
                            self->stream_queue_->pending_bytes -= chunk->size();
                          }
                          if (error) return self->end_stream(false);
                          self->pump_stream();
                        });
      return;
    }
    asio::async_write(stream_, bhttp::make_chunk_last(),
                      [self = shared_from_this()](beast::error_code error, std::size_t) {
                        self->stream_writing_ = false;
                        self->end_stream(!error);
                      });
  }

  // The stream is over: written whole (`complete`), or abandoned with its client.
  void end_stream(bool complete) {
    if (!stream_queue_) return;
    stream_queue_->gone.store(true);  // later writes are refused either way
    stream_queue_.reset();
    shared_.in_flight.fetch_sub(1);
    release_body_budget();
    if (!complete || !keep_alive()) {
      close();
      return;
    }
    read();
  }

  bool keep_alive() const { return request_.keep_alive() && !shared_.draining.load(); }

  void fill_request_view() {
    auto method = request_.method_string();
    // HEAD is answered as GET without the body (the handler sees GET).
    head_ = request_.method() == bhttp::verb::head;
    view_.method = head_ ? std::string_view("GET") : std::string_view(method.data(), method.size());
    view_.target = {request_.target().data(), request_.target().size()};
    view_.path = path_of(view_.target);
    view_.body = request_.body();
    view_.body_padding = request_.body().capacity() - request_.body().size();
    view_.client_gone = [self = std::weak_ptr<Session>(shared_from_this())] {
      auto session = self.lock();
      return !session || session->peer_closed();
    };
    view_.set_header_lookup(
        [this](std::string_view name) -> std::string_view {
          auto found = request_.find(beast::string_view(name.data(), name.size()));
          if (found == request_.end()) return {};
          return {found->value().data(), found->value().size()};
        },
        [this](std::string_view name) -> std::size_t {
          return request_.count(beast::string_view(name.data(), name.size()));
        });
  }

  // True when the peer has closed its side: the socket is readable with nothing left to read.
  // Safe from a worker thread: no other operation is pending on the socket while a request is
  // being handled.
  bool peer_closed() {
    char byte = 0;
    int fd = stream_.socket().native_handle();
    return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  // `counted`: the request was counted in flight, so its end is counted too.
  void write(Response response, bool keep_alive, bool counted,
             const std::vector<std::pair<std::string, std::string>>& extra_headers = {}) {
    auto message = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(response.status),
                                                                         request_.version());
    message->set(bhttp::field::server, "slipway");
    message->set(bhttp::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message->set(name, value);
    for (const auto& [name, value] : extra_headers) message->set(name, value);
    message->keep_alive(keep_alive);
    message->body() = std::move(response.body);
    message->prepare_payload();
    auto done = [self = shared_from_this(), counted, keep_alive](beast::error_code error, std::size_t) {
      if (counted) self->shared_.in_flight.fetch_sub(1);
      self->release_body_budget();
      if (error || !keep_alive) {
        self->close();
        return;
      }
      self->read();
    };
    if (head_) {
      // The headers GET would send, Content-Length included, and no body.
      auto header_only = std::make_shared<bhttp::response<bhttp::empty_body>>(message->result(), message->version());
      for (const auto& field : *message) header_only->set(field.name_string(), field.value());
      head_ = false;
      bhttp::async_write(
          stream_, *header_only,
          [header_only, done = std::move(done)](beast::error_code error, std::size_t bytes) { done(error, bytes); });
      return;
    }
    bhttp::async_write(
        stream_, *message,
        [message, done = std::move(done)](beast::error_code error, std::size_t bytes) { done(error, bytes); });
  }

  // Adds `bytes` to this request's share of the budget for bodies in flight. Past the budget the
  // request is answered 503 with Retry-After (the connection then closes) and false returned.
  bool admit_body(std::uint64_t bytes) {
    if (bytes == 0) return true;
    std::uint64_t before = shared_.inflight_body_bytes.fetch_add(bytes);
    body_reserved_ += bytes;
    if (before + bytes <= shared_.max_inflight_body_bytes) return true;
    release_body_budget();
    ++shared_.malformed_requests;
    write(error_response(503, "the server is reading too many request bodies at once; retry later"), false, false,
          {{"Retry-After", "1"}});
    return false;
  }

  void release_body_budget() {
    if (body_reserved_ > 0) shared_.inflight_body_bytes.fetch_sub(std::exchange(body_reserved_, 0));
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  void shutdown_both() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::request<bhttp::string_body> request_;
  Request view_;
  bool head_ = false;
  std::uint64_t body_reserved_ = 0;
  std::atomic<std::int64_t> idle_since_{0};
  Shared& shared_;
  std::shared_ptr<StreamQueue> stream_queue_;  // while a streamed response is being sent
  bool stream_writing_ = false;
};

std::size_t worker_count(const ServerOptions& options) {
  return static_cast<std::size_t>(options.worker_threads > 0 ? options.worker_threads : default_thread_count());
}

int default_max_connections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 60'000;
  return static_cast<int>(std::max<rlim_t>(16, limit.rlim_cur > 256 + 16 ? limit.rlim_cur - 256 : 16));
}

}  // namespace

Response error_response(int status, std::string_view message) {
  std::string body = "{\"error\":";
  append_json_string(body, message);
  body += "}";
  return Response{status, "application/json", std::move(body), {}};
}

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

struct Server::State {
  State(std::vector<Route> routes, const ServerOptions& options)
      : workers(worker_count(options)),
        shared{options, std::move(routes), workers},
        acceptor(io),
        signals(io),
        hangup(io),
        accept_backoff(io) {
    std::stable_sort(shared.routes.begin(), shared.routes.end(),
                     [](const Route& left, const Route& right) { return left.prefix.size() > right.prefix.size(); });
    shared.max_worker_backlog =
        options.max_pending_requests > 0 ? options.max_pending_requests : 64 * static_cast<int>(worker_count(options));
    shared.max_connections = options.max_connections > 0 ? options.max_connections : default_max_connections();
    shared.body_memory_factor = std::max<std::size_t>(options.body_memory_factor, 1);
    shared.max_inflight_body_bytes =
        options.max_inflight_body_bytes > 0
            ? options.max_inflight_body_bytes
            : std::max<std::size_t>(4, 2 * shared.body_memory_factor) * options.max_body_bytes;
  }

  void accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code error, tcp::socket socket) {
      if (error) {
        if (error == asio::error::operation_aborted || !acceptor.is_open()) return;
        // Out of file descriptors (EMFILE, ENFILE) or memory: retrying at once would spin at
        // 100% CPU. Back off, doubling up to a second, and log once per episode.
        ++shared.accept_errors;
        if (backoff == std::chrono::milliseconds(0)) {
          log_warn("cannot accept connections (" + error.message() + "); backing off until it clears");
        }
        backoff = std::clamp(backoff * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
        accept_backoff.expires_after(backoff);
        accept_backoff.async_wait([this](beast::error_code wait_error) {
          if (!wait_error) accept();
        });
        return;
      }
      backoff = std::chrono::milliseconds(0);
      ++shared.connections_accepted;
      auto session = std::make_shared<Session>(std::move(socket), shared);
      if (shared.connection_count() > static_cast<std::size_t>(shared.max_connections) && !evict_idle()) {
        session->refuse_connection();
      } else {
        session->start();
      }
      accept();
    });
  }

  // Closes the connection idle the longest, to make room for a new one. False when none is idle.
  bool evict_idle() {
    std::shared_ptr<Session> oldest;
    std::int64_t oldest_since = 0;
    {
      std::lock_guard lock(shared.sessions_mutex);
      for (Session* session : shared.sessions) {
        std::int64_t since = session->idle_since();
        if (since != 0 && (oldest_since == 0 || since < oldest_since)) {
          if (auto alive = session->weak_from_this().lock()) {
            oldest = std::move(alive);
            oldest_since = since;
          }
        }
      }
    }
    if (!oldest) return false;
    ++shared.connections_evicted;
    asio::post(oldest->executor(), [oldest] { oldest->close_if_idle(); });
    return true;
  }

  void close_idle_sessions() {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard lock(shared.sessions_mutex);
      for (Session* session : shared.sessions) {
        if (auto alive = session->weak_from_this().lock()) live.push_back(std::move(alive));
      }
    }
    for (auto& session : live) asio::post(session->executor(), [session] { session->close_if_idle(); });
  }

  // Waits for requests in flight and open connections to finish until the deadline; then lets
  // owners answer what is left (on_drain_deadline) and gives those answers a second to be written
  // before the loop ends.
  void drain(const std::shared_ptr<asio::steady_timer>& timer, SteadyClock::time_point deadline, bool past_deadline) {
    auto now = SteadyClock::now();
    bool idle = shared.in_flight.load() <= 0;
    if (idle && shared.connection_count() == 0) {
      io.stop();
      return;
    }
    if (!past_deadline && now > deadline) {
      if (!idle && shared.options.on_drain_deadline) shared.options.on_drain_deadline();
      past_deadline = true;
      deadline = now + std::chrono::seconds(1);
      close_idle_sessions();
    } else if (past_deadline && (idle || now > deadline)) {
      io.stop();
      return;
    }
    timer->expires_after(std::chrono::milliseconds(10));
    timer->async_wait(
        [this, timer, deadline, past_deadline](beast::error_code) { drain(timer, deadline, past_deadline); });
  }

  void wait_for_hangup() {
    hangup.async_wait([this](beast::error_code error, int) {
      if (error) return;
      if (shared.options.on_hangup) {
        log_info("SIGHUP: reloading");
        shared.options.on_hangup();
      } else {
        log_info("SIGHUP ignored (the server has nothing to reload); stop it with SIGTERM");
      }
      wait_for_hangup();
    });
  }

  asio::thread_pool workers;
  Shared shared;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::signal_set signals;
  asio::signal_set hangup;
  asio::steady_timer accept_backoff;
  std::chrono::milliseconds backoff{0};
  std::atomic<bool> stopping{false};
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

Server::~Server() {
  stop();
  state_->workers.join();
}

Result<std::unique_ptr<Server>> Server::start(std::vector<Route> routes, const ServerOptions& options) {
  for (const auto& route : routes) {
    if (route.prefix.empty() || route.prefix.front() != '/' || !route.handle) {
      return invalid_argument("an HTTP route needs a prefix starting with '/' and a handler");
    }
  }
  if (options.max_connections < 0) return invalid_argument("max_connections must be >= 0");
  // A budget smaller than one largest body would refuse such a body forever, however idle.
  std::size_t largest = std::max<std::size_t>(options.body_memory_factor, 1) * options.max_body_bytes;
  if (options.max_inflight_body_bytes > 0 && options.max_inflight_body_bytes < largest) {
    return invalid_argument("the budget for bodies in flight (" + std::to_string(options.max_inflight_body_bytes) +
                            " bytes) must hold one body at the limit, counted at its memory factor (" +
                            std::to_string(largest) + " bytes)");
  }
  auto state = std::make_unique<State>(std::move(routes), options);
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

void Server::run() {
  State& state = *state_;
  if (state.shared.options.handle_signals) {
    state.signals.add(SIGINT);
    state.signals.add(SIGTERM);
    state.hangup.add(SIGHUP);
    state.signals.async_wait([this](beast::error_code error, int) {
      if (!error) stop();
    });
    state.wait_for_hangup();
  }
  state.accept();
  std::vector<std::jthread> threads;
  int io_threads = std::max(1, state.shared.options.io_threads);
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
    state.hangup.cancel(ignored);
    state.accept_backoff.cancel();
    state.shared.draining = true;
    state.close_idle_sessions();
    state.drain(std::make_shared<asio::steady_timer>(state.io), SteadyClock::now() + state.shared.options.drain_timeout,
                false);
  });
}

ServerStats Server::stats() const {
  Shared& shared = state_->shared;
  ServerStats stats;
  stats.connections_open = shared.connection_count();
  stats.connections_accepted = shared.connections_accepted.load();
  stats.connections_evicted = shared.connections_evicted.load();
  stats.accept_errors = shared.accept_errors.load();
  stats.malformed_requests = shared.malformed_requests.load();
  stats.inflight_body_bytes = shared.inflight_body_bytes.load();
  return stats;
}

}  // namespace slipway::http
