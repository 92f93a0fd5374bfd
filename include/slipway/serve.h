// slipway/serve.h — online serving: the KServe Open Inference Protocol v2 over HTTP, model
// resolution through the registry, and Prometheus metrics.
//
// Threads: HTTP I/O runs on an asio event loop; inference runs on a worker pool, never on the
// event loop. A bad request gets a 4xx with {"error": "..."}; nothing a client sends can stop the
// server.
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
#include "slipway/registry.h"

namespace slipway::serve {

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones, e.g. Retry-After
};

// Dynamic batching of one model version (Triton's semantics; see src/serve/batcher.h). With
// max_batch_size 0 or 1 requests run as they arrive, on the thread that parsed them.
struct BatchingConfig {
  std::size_t max_batch_size = 0;  // rows; 0 or 1: every request runs alone, as it arrives
  std::chrono::microseconds max_queue_delay{0};
  std::vector<std::size_t> preferred_batch_sizes;
  std::size_t max_queue_size = 0;  // queued requests; 0 = unbounded
  std::chrono::microseconds default_timeout{0};  // 0 = none
  int priority_levels = 1;  // priorities 1 (highest) .. levels; 0 means default_priority
  int default_priority = 1;
  int instances = 1;  // executors running batches in parallel
};

struct ServiceOptions {
  // How long a resolved name -> version -> bundle mapping is trusted before the registry is asked
  // again (aliases moved by `slipway alias` show up within this time; unknown names re-check at once).
  std::chrono::milliseconds registry_refresh{1000};
  // Applied to every model version served (per-model configuration is not built yet).
  BatchingConfig batching;
  // The response cache (opt-in per model): infer responses of the models named here are kept in
  // an LRU cache of at most response_cache_bytes, keyed by model, version and the request body's
  // exact bytes.
  std::vector<std::string> cached_models;
  std::size_t response_cache_bytes = std::size_t{64} << 20;
};

// The protocol, independent of sockets: maps (method, target, body) to a response. Thread-safe;
// any number of threads may call handle() at once.
class Service {
 public:
  Service(registry::Registry& registry, ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Answers a request; waits for a batched inference to finish.
  HttpResponse handle(std::string_view method, std::string_view target, std::string_view body);
  // The same, answering through `done` exactly once: at once, or from a batch executor's thread
  // when the request joined a batch (so no thread waits while it is queued). `body` is read
  // before handle_async returns.
  void handle_async(std::string_view method, std::string_view target, std::string_view body,
                    std::function<void(HttpResponse)> done);
  // Loads the version each registered model serves by default, so the first request does not pay
  // for it and a damaged bundle shows up at start. Returns "name@version" for each loaded model;
  // failures are logged and left to answer their requests with the error.
  std::vector<std::string> warm_up();
  // Stops the batch executors, answering queued requests 503; later requests run unbatched. The
  // server calls it at shutdown while it can still deliver those answers.
  void stop_batching();
  // True for requests that run a model: the HTTP layer sends those to the worker pool.
  static bool is_inference(std::string_view target);
  // Prometheus text exposition of the server's metrics.
  std::string metrics_text() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;  // 0 picks a free port; port() tells which
  int io_threads = 2;
  int worker_threads = 0;  // 0 = default_thread_count()
  std::size_t max_body_bytes = std::size_t{64} << 20;  // larger bodies: 413
  std::size_t max_header_bytes = 16 * 1024;             // larger request headers: 431
  // The longest a connection may take to deliver a request (or stay idle between requests);
  // a client slower than that is disconnected, so slow clients cannot hold connections.
  std::chrono::seconds read_timeout{30};
  ServiceOptions service;
};

class Server {
 public:
  // Binds and listens; InvalidArgument for a bad host, Io when the port is taken.
  static Result<std::unique_ptr<Server>> start(registry::Registry& registry, const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;
  Service& service();
  // Blocks until stop() or SIGINT/SIGTERM; then stops accepting, lets requests in flight finish
  // (up to a few seconds) and returns.
  void run();
  // Thread-safe; run() returns soon after.
  void stop();

 private:
  struct State;
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace slipway::serve
