// slipway/http.h — Slipway's one HTTP/1.1 stack: the server its APIs plug into, and the client
// the load generator (and tests and tools) use. It knows nothing of models.
//
// Server: modules register routes (a path prefix and a handler), and the server owns the
// connections, their limits and timeouts, admission control for blocking work, and a graceful
// drain. Connections are served on `io_threads` asio event loops. A route either answers on the
// event loop (it must be quick: health, metadata) or is handed to a pool of `worker_threads`
// (it may block: inference). A handler may answer later from any thread (a batch executor); the
// server writes the response on the connection's own event loop.
//
// Client: keep-alive connections on an event loop the caller runs on its own thread
// (ClientLoop), built for load generation: a connection's request line and headers are set once
// and each send only supplies a body view and a deadline, and the completion callback is stored
// in the connection, so a send allocates no more than asio and Beast do. fetch() is a blocking
// one-shot request for tests and tools.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slipway/core.h"

namespace slipway::http {

// A request as a handler sees it. The views live until the handler has answered.
class Request {
 public:
  std::string_view method;
  std::string_view target;  // path and query, as sent
  std::string_view path;    // target without the query
  std::string_view body;
  // Readable bytes past the body's end (a SIMD parser may read up to 64 bytes past the end of
  // its input; with enough padding it parses the body in place instead of copying it).
  std::size_t body_padding = 0;
  // The value of a header (case-insensitive name), or "" when absent.
  std::string_view header(std::string_view name) const { return header_lookup_ ? header_lookup_(name) : ""; }
  // How many times the header appears (to refuse duplicates of single-valued headers).
  std::size_t header_count(std::string_view name) const { return header_counter_ ? header_counter_(name) : 0; }
  // True once the client has closed its connection: long work (generating text) polls it to stop
  // early. The function may be copied and called from any thread until the request is answered.
  std::function<bool()> client_gone = [] { return false; };

  // For the server and tests: where header() looks.
  void set_header_lookup(std::function<std::string_view(std::string_view)> lookup,
                         std::function<std::size_t(std::string_view)> counter) {
    header_lookup_ = std::move(lookup);
    header_counter_ = std::move(counter);
  }

 private:
  std::function<std::string_view(std::string_view)> header_lookup_;
  std::function<std::size_t(std::string_view)> header_counter_;
};

// The writing end of a response sent as it is produced (chunked transfer encoding: server-sent
// events, generated tokens). Thread-safe: a producer on any thread writes chunks, which go out in
// order on the connection's event loop.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Queues a chunk. False once the client has gone, or when it reads so slowly that more than
  // kMaxPendingStreamBytes wait for it (the response is then abandoned): the producer stops.
  virtual bool write(std::string chunk) = 0;
  // Ends the response (the connection then serves its next request); later writes are refused.
  virtual void finish() = 0;
  // True once the client has closed its connection or a write to it failed: checked between
  // tokens, so abandoned work stops.
  virtual bool client_gone() const = 0;
};
inline constexpr std::size_t kMaxPendingStreamBytes = std::size_t{4} << 20;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones, e.g. Retry-After
  // Set to stream the body instead: the status and headers are sent, then this is called (on the
  // event loop: it must only hand the stream to its producer) and `body` is ignored. A client
  // that disconnects or stops reading for read_timeout ends the stream.
  std::function<void(std::shared_ptr<ResponseStream>)> start_stream;
};

// {"error": message} with the status: the one shape every Slipway API uses for errors.
Response error_response(int status, std::string_view message);

// Answers a request exactly once, from any thread.
using Respond = std::function<void(Response)>;

// Where a route's handler runs.
enum class Execution {
  kEventLoop,  // on the I/O thread that read the request: for answers that take microseconds
  kWorker,     // on the worker pool, behind admission control: for work that may block
};

struct Route {
  // Matches paths equal to the prefix or under it ("/v2" matches "/v2" and "/v2/models/x").
  std::string prefix;
  // Decides per request where the handler runs (e.g. only ".../infer" goes to the workers).
  std::function<Execution(const Request&)> execution;
  std::function<void(const Request&, Respond)> handle;
  // The answer to a request of this route that the server refuses before its handler (a body
  // over the limit, a full backlog, a handler that threw), in the shape the route's clients read
  // errors (OpenAI's, under /v1); null: {"error": message}.
  std::function<Response(int status, std::string_view message)> refusal;
};

// Why the server answered or dropped a request without calling its route's handler.
enum class Refusal {
  kOverloaded,    // 429: the worker backlog was full
  kClientClosed,  // the client closed its connection before a worker took the request (nginx's 499)
  kNoRoute,       // 404: no route matched the path
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;  // 0 picks a free port; port() tells which
  int io_threads = 2;
  int worker_threads = 0;                                 // 0 = default_thread_count()
  std::size_t max_body_bytes = std::size_t{64} << 20;     // larger bodies: 413
  std::size_t max_header_bytes = std::size_t{16} * 1024;  // larger request headers: 431
  // The longest a connection may take to deliver a request (or stay idle between requests);
  // a client slower than that is disconnected, so slow clients cannot hold connections.
  std::chrono::seconds read_timeout{30};
  // Requests waiting for a worker, at most; beyond it a request is answered 429 at once, on the
  // I/O thread, without its body being looked at. 0 = 64 per worker thread.
  int max_pending_requests = 0;
  // Open connections, at most. At the limit a new connection replaces the one idle the longest
  // (keep-alive clients reconnect), or is answered 503 when none is idle. 0 = the process's file
  // descriptor limit less 256 kept for files, models and the database.
  int max_connections = 0;
  // Bodies of requests being read or handled, in total: past it a request is answered 503. Each
  // request's body is bounded by max_body_bytes; this bounds their sum, each body counted at
  // body_memory_factor times its size. 0 = max(4, 2 x body_memory_factor) x max_body_bytes.
  std::size_t max_inflight_body_bytes = 0;
  // What handling a body may take in memory, as a multiple of its size (a parsed JSON document is
  // several times its text): a body counts at its bytes while it arrives and at this multiple
  // once it has, so the budget bounds the memory requests take, not only their bytes, and a slow
  // sender holds only what it sends. 1 = the bytes alone. Server::start refuses a budget that
  // could not hold one body at the limit counted so.
  std::size_t body_memory_factor = 1;
  // How long stop() (or SIGINT/SIGTERM) waits for requests in flight before the last answers.
  std::chrono::milliseconds drain_timeout{5000};
  // Called on the event loop when the drain deadline passes with requests still in flight, so
  // their owners can answer them (e.g. 503 to queued batch requests) before the loop ends.
  std::function<void()> on_drain_deadline;
  // Called on SIGHUP (on the event loop). Without it SIGHUP is logged and ignored.
  std::function<void()> on_hangup;
  // Whether run() takes SIGINT/SIGTERM (drain and stop) and SIGHUP (on_hangup). A server run
  // inside a command that has work of its own (optimize's, on loopback) leaves them alone.
  bool handle_signals = true;
  // Called for every request the server refused or dropped itself (for metrics). Must be quick.
  std::function<void(const Request&, Refusal)> on_refusal;
};

// Counters the server keeps about its connections (read at any time, from any thread).
struct ServerStats {
  std::uint64_t connections_open = 0;
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_evicted = 0;  // idle connections closed to make room (max_connections)
  std::uint64_t accept_errors = 0;        // e.g. EMFILE: the server backed off and retried
  std::uint64_t malformed_requests = 0;   // 400/413/431 answered before routing
  std::uint64_t inflight_body_bytes = 0;
};

class Server {
 public:
  // Binds and listens; InvalidArgument for a bad host or option, Io when the port is taken. The
  // routes are fixed from here on; the longest matching prefix wins.
  static Result<std::unique_ptr<Server>> start(std::vector<Route> routes, const ServerOptions& options);
  // Stops (as stop()) and joins the worker pool.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;
  // Blocks until stop() or SIGINT/SIGTERM, then drains: no new connections; idle connections
  // are closed; requests in flight finish and are answered with `Connection: close` (also
  // requests that arrive on open connections meanwhile), up to drain_timeout; then
  // on_drain_deadline lets owners answer what is left, and run() returns.
  void run();
  // Thread-safe; run() returns soon after.
  void stop();
  ServerStats stats() const;

 private:
  struct State;
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The path of a target without its query string.
std::string_view path_of(std::string_view target);

// ---------------------------------------------------------------------------------------------
// Client.

// Where an http:// URL points.
struct Url {
  std::string host;          // a name or an address; an IPv6 address without its brackets
  std::uint16_t port = 80;   // 80 when the URL has none
  std::string target = "/";  // path and query; "/" when the URL has none
};

// Splits http://HOST[:PORT][/PATH]. InvalidArgument (naming the URL) for another scheme or
// none, a missing host, or a port that is not a number in 1..65535.
Result<Url> parse_url(std::string_view url);

// The resolved addresses of a host and port. Copies are cheap and share the addresses; they may
// be used from any thread.
class ClientEndpoint {
 public:
  // Resolves now (blocking). InvalidArgument naming the host when it cannot be resolved.
  static Result<ClientEndpoint> resolve(const std::string& host, std::uint16_t port);

  const std::string& host() const;
  std::uint16_t port() const;

 private:
  friend class ClientConnection;
  struct Addresses;
  explicit ClientEndpoint(std::shared_ptr<const Addresses> addresses);
  std::shared_ptr<const Addresses> addresses_;
};

// One event loop, run by the thread that calls run(). ClientTimer and ClientConnection live on
// a loop: their calls and callbacks happen on the thread running it (or, for setup, while no
// thread runs it), and they must be destroyed before the loop.
class ClientLoop {
 public:
  ClientLoop();
  ~ClientLoop();
  ClientLoop(const ClientLoop&) = delete;
  ClientLoop& operator=(const ClientLoop&) = delete;

  // Runs callbacks on the calling thread until no work is left (no send in flight, no timer
  // waiting, nothing posted) or stop() is called. A loop that ran out of work may run again.
  void run();
  // Thread-safe: run() returns after the callback it is running, leaving the rest pending.
  void stop();
  // Thread-safe: `task` runs on the loop's thread, in posting order.
  void post(std::function<void()> task);

 private:
  friend class ClientTimer;
  friend class ClientConnection;
  struct State;
  std::unique_ptr<State> state_;
};

// A reusable one-shot timer on a loop (the load generator's arrival schedule).
class ClientTimer {
 public:
  explicit ClientTimer(ClientLoop& loop);
  // Cancels a pending wait; its callback is not called.
  ~ClientTimer();
  ClientTimer(const ClientTimer&) = delete;
  ClientTimer& operator=(const ClientTimer&) = delete;

  // Calls `fire` on the loop's thread at `when` (at once, through the loop, when it has passed).
  // Replaces a pending wait: the earlier callback is never called. A pending wait keeps run()
  // from returning.
  void wait_until(std::chrono::steady_clock::time_point when, std::function<void()> fire);
  // The pending callback, if any, is never called.
  void cancel();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// What a connection sends: the request line and headers, fixed until set again. A Host header
// with the endpoint's host is added unless `headers` has one; Content-Length comes from each
// send's body.
struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";
  std::vector<std::pair<std::string, std::string>> headers;
};

// One HTTP/1.1 keep-alive connection to an endpoint, sending one request at a time. TCP_NODELAY
// is on. Calls happen on the loop's thread (or while no thread runs the loop).
class ClientConnection {
 public:
  // Called on the loop's thread when a send ends: the response's status code, or 0 when there
  // was none (the connection was refused or broke, or the deadline passed). The callback may
  // send again on this connection (or any other).
  using Done = std::function<void(int status)>;

  ClientConnection(ClientLoop& loop, ClientEndpoint endpoint, Done done);
  // Closes the socket; a send in flight ends without its callback being called.
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Sets what the following sends send (not allowed while a send is in flight).
  void set_request(const ClientRequest& request);

  // Connects first if not connected, writes the request with `body` (a view the caller keeps
  // alive and unchanged until `done` is called; it is written in place, not copied), and reads
  // the response; then calls `done` exactly once. Connecting, writing and reading must all end
  // by `deadline`, else `done(0)`. One send at a time: calling it while one is in flight is a
  // bug.
  //
  // After done(0), or a response that did not allow keep-alive, the connection is closed, and
  // the next send opens a new one; after any other response it stays open for the next send.
  void send(std::string_view body, std::chrono::steady_clock::time_point deadline);

  // Shuts the socket down and closes it (idempotent); a later send reconnects. Not while a send
  // is in flight.
  void close();
  bool connected() const;

  // The last response, valid inside `done` and until the next send. Empty after done(0).
  std::string_view response_body() const;
  // The value of a response header (case-insensitive name), or "" when absent.
  std::string_view response_header(std::string_view name) const;
  std::vector<std::pair<std::string, std::string>> response_headers() const;
  // Why the last send got no response ("" when it got one): a sentence naming the endpoint.
  std::string failure() const;
  // Whether that was its deadline passing.
  bool timed_out() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

struct ClientResponse {
  int status = 0;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // The value of a header (case-insensitive name), or "" when absent.
  std::string_view header(std::string_view name) const;
};

// One request on a new connection, blocking the calling thread (any thread) until the response
// or `timeout`. Any status is a response; errors: InvalidArgument for a bad URL or a host that
// does not resolve, DeadlineExceeded when the timeout passes, Unavailable when the connection is
// refused or breaks.
Result<ClientResponse> fetch(std::string_view method, std::string_view url, std::string_view body = {},
                             const std::vector<std::pair<std::string, std::string>>& headers = {},
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000));

}  // namespace slipway::http
