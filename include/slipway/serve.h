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
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/http.h"
#include "slipway/llm.h"
#include "slipway/model.h"
#include "slipway/registry.h"

namespace slipway::serve {

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones, e.g. Retry-After
  // Why a request failed, for the failure metrics (not sent): a Status code name such as
  // "deadline_exceeded"; empty means "derive it from the HTTP status".
  std::string failure_reason;
};

HttpResponse json_response(int status, std::string body);
// {"error": MESSAGE} (absolute server paths hidden) with `status`.
HttpResponse error_response(int status, std::string_view message);
// The HTTP status and failure reason a Status maps to (InvalidArgument 400, PermissionDenied 403,
// NotFound 404, FailedPrecondition 409, ...).
HttpResponse error_response(const Status& status);
// 405 with the Allow header naming the methods the route takes.
HttpResponse method_not_allowed(std::string_view allowed);

// Who may call a route: roles rank predict < read < deploy < admin, each with the rights of those
// below it; kOpen needs no token. predict: inference and model metadata; read: also the
// management API's reads (runs, models, endpoints, audit) and run tracking; deploy: also its
// changes and the repository API; admin: also approvals, lifting an approval requirement, tokens,
// /metrics and statistics.
enum class Role { kOpen = 0, kPredict = 1, kRead = 2, kDeploy = 3, kAdmin = 4 };
// "predict", "read", "deploy", "admin" (and "open").
std::string_view role_name(Role role);

// A route of the serving protocol (KServe v2 with the repository and statistics extensions, and
// /metrics), declared once: authorization takes each route's role from here, and the OpenAPI
// document lists them.
struct ProtocolRoute {
  std::string_view method;  // GET or POST
  std::string_view path;    // "/v2/models/{model}/versions/{version}/infer": {name} is one segment
  Role role;
  std::string_view summary;
};
const std::vector<ProtocolRoute>& protocol_routes();

// A call to the management API (/api/... and /openapi.json), once the service has checked its
// token: the service requires at least the read role for /api; each route then checks its own.
struct ManagementCall {
  std::string_view method;
  std::vector<std::string_view> segments;  // the path at '/': {"api", "endpoints", "web", "deploy"}
  std::string_view query;                  // the target after '?'
  std::string_view body;
  Role role = Role::kAdmin;  // the token's; kAdmin without auth
  std::string token_name;    // empty without auth
  // The Idempotency-Key header: a retried write with the same key gets the first answer again.
  std::string_view idempotency_key;
  bool idempotency_key_repeated = false;  // sent more than once: refused
};
// Answers a management call; runs on a worker thread, any number at once.
using ManagementHandler = std::function<HttpResponse(const ManagementCall&)>;

// What the HTTP layer passes in besides method, target and body.
struct RequestHeaders {
  std::string_view authorization;  // the Authorization header; empty when absent
  // Triton's binary tensor extension: the length of the JSON part of the body; empty when absent.
  std::string_view inference_header_length;
  bool inference_header_length_repeated = false;  // sent more than once: refused
  // Readable bytes past the body's end (http::Request::body_padding): with 64 the JSON is parsed
  // in place, without a padded copy.
  std::size_t body_padding = 0;
  // X-Slipway-Route-Key: requests to an endpoint with the same key reach the same version.
  std::string_view route_key;
  std::string_view idempotency_key;  // Idempotency-Key (management writes)
  bool idempotency_key_repeated = false;
};

// Dynamic batching of one model version (Triton's semantics; see src/serve/batcher.h). With
// max_batch_size 0 or 1 requests run as they arrive, on the thread that parsed them.
struct BatchingConfig {
  std::size_t max_batch_size = 0;  // rows; 0 or 1: every request runs alone, as it arrives
  std::chrono::microseconds max_queue_delay{0};
  std::vector<std::size_t> preferred_batch_sizes;
  std::size_t max_queue_size = 0;                // queued requests; 0 = unbounded
  std::chrono::microseconds default_timeout{0};  // 0 = none
  int priority_levels = 1;                       // priorities 1 (highest) .. levels; 0 means default_priority
  int default_priority = 1;
  int instances = 1;  // executors running batches in parallel

  bool operator==(const BatchingConfig&) const = default;
};

// How one model is served. Set per model with `slipway serving-config` (stored in the registry)
// or in the file given to `slipway serve --config`; unset keys take the server's defaults.
struct ModelServingConfig {
  BatchingConfig batching;
  bool cache = false;  // answer byte-identical requests from the response cache
  // Unload the model after this long without a request (it loads again on the next one); 0 = never.
  std::chrono::seconds idle_unload{0};
  // Single-row predictions run when a version loads, before it takes requests.
  int warmup_requests = 1;
  // The share of infer requests (JSON ones) written to the request log with their answers.
  double request_log_rate = 0.0;

  bool operator==(const ModelServingConfig&) const = default;
};

// The declared keys of a serving configuration (name, type, default, range, help), in the order
// `serving-config --help` lists them; the CLI flags and docs/serving-config.md come from them.
const std::vector<ConfigKey>& serving_config_declarations();
// Their names.
const std::vector<std::string>& serving_config_keys();
// docs/serving-config.md: the keys as a Markdown table.
std::string serving_config_markdown();
// `base` with `values` applied (keys from serving_config_keys(); lists comma-separated).
// InvalidArgument naming the key for an unknown key (with the closest key suggested), a malformed
// or out-of-range value, or an inconsistent config (default_priority above priority_levels, a
// preferred batch size above max_batch_size).
Result<ModelServingConfig> apply_serving_config(ModelServingConfig base,
                                                const std::map<std::string, std::string>& values);
// Every key of `config` with its value, in the text apply_serving_config reads.
std::map<std::string, std::string> serving_config_values(const ModelServingConfig& config);
// Reads a `serve --config` YAML file: {defaults: {KEY: VALUE}, models: {NAME: {KEY: VALUE}}}.
// Each section is validated with apply_serving_config.
struct ServingConfigFile {
  std::map<std::string, std::string> defaults;
  std::map<std::string, std::map<std::string, std::string>> models;
};
Result<ServingConfigFile> read_serving_config_file(const std::string& path);

// KServe v2 infer bodies for consecutive rows of `table`, `rows_per_request` rows each (at most
// `max_requests` bodies): one input per column except `skip_columns`, numbers as FP32 (null when
// missing) and categories as BYTES, the form `slipway serve` takes. Used by load generators.
std::vector<std::string> v2_requests_from_table(const data::Table& table, std::size_t rows_per_request,
                                                const std::vector<std::string>& skip_columns,
                                                std::size_t max_requests = SIZE_MAX);

// A token the serving process is given (its secret's sha256, never the secret) rather than one
// the registry stores.
struct ConfiguredToken {
  std::string name;  // audited and logged as token:NAME
  std::string secret_sha256;
  Role role = Role::kPredict;
};

struct ServiceOptions {
  // How long a resolved name -> version -> bundle mapping (and the model's serving configuration
  // in the registry) is trusted before the registry is asked again: aliases moved by
  // `slipway alias` and configurations changed by `slipway serving-config` take effect within
  // this time. Unknown names re-check at once.
  std::chrono::milliseconds registry_refresh{1000};
  // Every model's configuration starts from `defaults`; the registry's serving-config for the
  // model applies over it, and `model_overrides` (a --config file) over that.
  ModelServingConfig defaults;
  std::map<std::string, std::map<std::string, std::string>> model_overrides;
  // The response cache shared by the models whose configuration has cache on.
  std::size_t response_cache_bytes = std::size_t{64} << 20;
  // Where sampled requests are logged (serving config request_log_rate): JSON Lines segments
  // under <request_log_directory>/<model>/ (docs/formats.md); empty: no request log.
  std::string request_log_directory;
  std::chrono::hours request_log_retention{24 * 7};
  std::size_t request_log_max_bytes = std::size_t{1} << 30;
  // The answers kept for endpoints whose fallback is "cached" (the last answer to each request's
  // bytes), least recently used out first.
  std::size_t fallback_cache_bytes = std::size_t{64} << 20;
  // Loaded models may take at most this many bytes (estimated from their arrays); loading one
  // more unloads the least recently used first. 0 = no budget.
  std::size_t memory_budget_bytes = 0;
  // The management API under /api (control::management_api); without it /api answers 404. A
  // call answered below 400 that is not a GET re-reads the endpoints and tokens at once.
  ManagementHandler management;
  // Bearer tokens from the registry (`slipway token create`) are required, with each route's role
  // (protocol_routes(); the management API's own table): predict for inference and model
  // metadata, deploy for the repository API, admin for /metrics and stats. Health endpoints and
  // /openapi.json stay open.
  bool require_auth = false;
  // Tokens given to the process rather than stored (`slipway llm serve --api-key KEY`: an API key
  // is a token), checked with the registry's, the same way. Any of them requires tokens.
  std::vector<ConfiguredToken> configured_tokens;
};

// One v2 JSON inference inside the server, stage by stage, for `bundle`: no HTTP, no batching,
// no metrics. What `slipway profile` measures; seconds per stage.
struct InferStageTimes {
  double parse = 0;        // the request JSON into input columns
  double preprocess = 0;   // the bundle's preprocessing: columns into features
  double compute = 0;      // the model: features into margins
  double postprocess = 0;  // margins into outputs (sigmoid, softmax)
  double encode = 0;       // the response JSON
  std::size_t rows = 0;
  std::size_t response_bytes = 0;
  double total() const { return parse + preprocess + compute + postprocess + encode; }
};
// InvalidArgument for a request the server would refuse (with the same message).
Result<InferStageTimes> time_v2_infer(std::shared_ptr<const model::Bundle> bundle, std::string_view body);

// The protocol, independent of sockets: maps (method, target, body) to a response. Thread-safe;
// any number of threads may call handle() at once.
class Service {
 public:
  Service(registry::Registry& registry, const ServiceOptions& options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Answers a request; waits for a batched inference to finish.
  HttpResponse handle(std::string_view method, std::string_view target, std::string_view body,
                      const RequestHeaders& headers = {});
  // The same, answering through `done` exactly once: at once, or from a batch executor's thread
  // when the request joined a batch (so no thread waits while it is queued). `body` is read
  // before handle_async returns.
  void handle_async(std::string_view method, std::string_view target, std::string_view body,
                    const RequestHeaders& headers, std::function<void(HttpResponse)> done);
  // Loads the version each registered model serves by default, so the first request does not pay
  // for it and a damaged bundle shows up at start. Returns "name@version" for each loaded model;
  // failures are logged and left to answer their requests with the error. Without it models
  // load on their first request.
  std::vector<std::string> warm_up();
  // Stops the batch executors, answering queued requests 503; later requests run unbatched. The
  // server calls it at shutdown while it can still deliver those answers.
  void stop_batching();
  // Stops the endpoint deadlines: waits for a fallback being answered, drops those still waiting
  // (their requests are answered by their routes); later requests have no deadline. The server
  // calls it at shutdown before its connections go, since a waiting deadline holds one.
  void stop_deadlines();
  // True for requests that run or load a model: the HTTP layer sends those to the worker pool.
  static bool needs_worker(std::string_view target);
  // Counts a request the HTTP layer answered or dropped itself (backlog full, client gone, no
  // route). Only names of existing models become labels; and none under auth, whose check has
  // not run for such requests.
  void record_refusal(std::string_view target, http::Refusal refusal);
  // Replaces the server-wide serving defaults and per-model overrides (a reloaded --config);
  // models swap to their new configuration on their next request.
  void set_serving_configs(ModelServingConfig defaults,
                           std::map<std::string, std::map<std::string, std::string>> overrides);
  // Prometheus text exposition of the server's metrics.
  std::string metrics_text() const;
  // For routes served beside this protocol (the OpenAI API): the answer an unauthorized request
  // to `target` gets, as the other routes give it (401, 403), or nullopt when it may proceed.
  std::optional<HttpResponse> check_access(std::string_view target, std::string_view authorization);
  // The LLMs served beside this protocol, set before serving: their Prometheus text, appended to
  // /metrics, and their names, which warm_up() leaves alone.
  void set_llms(std::function<std::string()> metrics, std::function<std::set<std::string>()> names);

 private:
  friend Result<InferStageTimes> time_v2_infer(std::shared_ptr<const model::Bundle> bundle, std::string_view body);
  struct State;
  std::unique_ptr<State> state_;
};

// What a v2 request takes in memory while it is handled, as a multiple of its body: a JSON body's
// parsed document and decoded columns peaked at 7.2 times the body (docs/benchmarks.md, issue 9).
inline constexpr std::size_t kV2BodyMemoryFactor = 8;

// An LLM served under /v1 (the OpenAI API, below): an engine and the name requests give it.
struct ServedLlm {
  std::string id;  // the `model` requests name
  std::shared_ptr<llm::Engine> engine;
  std::int64_t created = 0;  // Unix seconds, for /v1/models
};

struct ServerOptions {
  // The transport: address, threads, limits, timeouts, drain. Its callbacks (on_drain_deadline,
  // on_hangup, on_refusal) are the serving process's own and are replaced by Server::start.
  // Bodies count at kV2BodyMemoryFactor times their size against the in-flight budget.
  http::ServerOptions http = [] {
    http::ServerOptions transport;
    transport.body_memory_factor = kV2BodyMemoryFactor;
    return transport;
  }();
  // Called on SIGHUP (e.g. to reload the --config file); without it SIGHUP is ignored.
  std::function<void(Service&)> on_hangup;
  ServiceOptions service;
  // Registered LLMs (GGUF files) are served with the OpenAI API under /v1, each by an engine
  // with these options, loaded at start.
  llm::EngineOptions llm;
  // LLMs the process loaded itself (`slipway llm serve FILE`), served under /v1 beside the
  // registered ones.
  std::vector<ServedLlm> llms;
};

// ---------------------------------------------------------------------------------------------
// The OpenAI API over LLM engines (the llm module is an engine with no HTTP in it, like libllama): GET /v1/models, POST
// /v1/completions and /v1/chat/completions, streamed as server-sent events when asked. Errors take OpenAI's shape,
// {"error": {"message", "type", "param", "code"}}.

class OpenAiApi {
 public:
  explicit OpenAiApi(std::vector<ServedLlm> models);
  // A request under /v1, answered once: at once (errors, /v1/models) or from the engine's thread.
  // A generation stops when its client disconnects.
  void handle(const http::Request& request, const http::Respond& respond) const;
  // Each engine's metrics, labelled by model.
  std::string metrics_text() const;
  // The routes it answers, for the OpenAPI document.
  static const std::vector<ProtocolRoute>& routes();
  // An answer in OpenAI's error shape, {"error": {"message", "type", "param", "code"}}: what a
  // refusal in front of these routes (a missing token, 401) is turned into, so OpenAI's clients
  // read it as theirs.
  static http::Response error(int status, std::string_view message);
  // Engine::cancel_all and Engine::shutdown on every model: a server calls them at its drain
  // deadline and before its connections go, so every request is answered while it can be.
  void cancel_all(const std::string& reason) const;
  void shutdown() const;
  const std::vector<ServedLlm>& models() const { return models_; }

 private:
  std::vector<ServedLlm> models_;
  // Per model, the most bytes of text one token stands for: a prompt longer than the context
  // times this cannot fit, and is refused before it is tokenized.
  std::vector<std::size_t> max_token_bytes_;
};

// The registered models whose serving version (the `production` alias, else the newest) is a
// GGUF LLM, each loaded with an engine; a model that fails to load is logged and left out.
std::vector<ServedLlm> load_registered_llms(registry::Registry& registry, const llm::EngineOptions& options);
// Whether a stored artifact is a GGUF file (an LLM) rather than a bundle.
bool is_gguf_artifact(const std::string& path);

class Server {
 public:
  // Binds and listens; InvalidArgument for a bad host, Io when the port is taken.
  static Result<std::unique_ptr<Server>> start(registry::Registry& registry, const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;
  http::ServerStats http_stats() const;
  Service& service();
  // Blocks until stop() or SIGINT/SIGTERM; then drains as http::Server::run does: idle
  // connections close, requests in flight finish and are answered with `Connection: close`, and
  // batch requests still queued at drain_timeout are answered 503. SIGHUP calls on_hangup.
  void run();
  // Thread-safe; run() returns soon after.
  void stop();

 private:
  struct State;
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace slipway::serve
