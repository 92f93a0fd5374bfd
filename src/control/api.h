// The management API's routes, declared once (private to control): the dispatcher matches and
// authorizes a call with the declaration, and the OpenAPI document is generated from the same
// declarations, so a route cannot answer without being documented or be documented without
// answering (tests/control checks both against the running server).
#pragma once

#include <simdjson.h>

#include <atomic>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "slipway/control.h"
#include "slipway/pipeline.h"

namespace slipway::control {

struct ApiParameter {
  std::string_view name;
  std::string_view schema;  // JSON Schema, e.g. {"type":"integer","minimum":1}
  std::string_view description;
};

struct ApiCall;
using ApiHandler = serve::HttpResponse (*)(ApiCall& call);

struct ApiRoute {
  std::string_view method;  // GET, POST, PUT, PATCH or DELETE
  std::string_view path;    // "/api/endpoints/{endpoint}/deploy": each {name} is one path segment
  serve::Role role;         // the least role that may call it
  bool writes = false;      // opens the workspace for writing (a read opens it read-only)
  std::string_view summary;
  std::vector<ApiParameter> query;  // optional query parameters
  // The body: a JSON Schema (the body is a JSON object), "binary" (raw bytes), or empty (none).
  std::string_view request_schema;
  std::string_view response_schema;  // of the 200 answer
  ApiHandler handle = nullptr;
  bool creates = false;  // answers 201 when it made something (200 when a retry found it made)
  bool accepts = false;  // answers 202, not 200: the work goes on after the answer
};

// A matched call, as a handler sees it.
struct ApiCall {
  const serve::ManagementCall& http;
  std::map<std::string, std::string, std::less<>> path;  // the {name} segments, percent-decoded
  registry::Registry* registry = nullptr;                // opened as the route declares
  pipeline::Caller caller;
  struct ApiServer* server = nullptr;  // what the handler keeps: its options and jobs

  const std::string& path_parameter(std::string_view name) const { return path.find(name)->second; }
};

// Every route under /api, and /openapi.json.
const std::vector<ApiRoute>& api_routes();
// Each area's routes (endpoint_routes.cpp, model_routes.cpp, run_routes.cpp; tokens, labels,
// annotations and retrain policies in governance_routes.cpp).
void add_endpoint_routes(std::vector<ApiRoute>& routes);
void add_model_routes(std::vector<ApiRoute>& routes);
void add_run_routes(std::vector<ApiRoute>& routes);
void add_governance_routes(std::vector<ApiRoute>& routes);  // governance_routes.cpp
void add_monitoring_routes(std::vector<ApiRoute>& routes);  // monitoring_routes.cpp
void add_batch_routes(std::vector<ApiRoute>& routes);       // batch_routes.cpp
void add_training_routes(std::vector<ApiRoute>& routes);    // training_routes.cpp
void add_workspace_routes(std::vector<ApiRoute>& routes);   // workspace_routes.cpp
// evaluation_routes.cpp: evaluations, comparisons, explanations and exports of a version.
void add_evaluation_routes(std::vector<ApiRoute>& routes);
void add_retraining_routes(std::vector<ApiRoute>& routes);    // retraining_routes.cpp
void add_optimization_routes(std::vector<ApiRoute>& routes);  // optimization_routes.cpp
void add_study_routes(std::vector<ApiRoute>& routes);         // study_routes.cpp

// Work the server runs on threads of its own for /api (batch jobs, training jobs), by name: each
// member callable from any thread, at most `max_running` at once. A job's record is what it
// writes (a batch job's folder, a training run); this keeps only the jobs running and how the
// last kRememberedEndings jobs ended (an error, or a result the work left), so nothing a client
// sends grows it without limit.
class BackgroundJobs {
 public:
  static constexpr std::size_t kRememberedEndings = 64;
  static constexpr std::size_t kMaxResultBytes = 1u << 20;

  // What a job's work sees: whether it is asked to stop, and where its progress goes.
  struct Job {
    std::atomic<bool> cancel{false};
    std::atomic<bool> ended{false};
    std::atomic<std::size_t> done{0};   // rows scored, rounds fitted ...
    std::atomic<std::size_t> total{0};  // 0 until known
    // What a job that ends well has to say (JSON, at most kMaxResultBytes), set by its work
    // before it returns: remembered like an error.
    std::string result;
    std::thread thread;
  };
  using Work = std::function<Status(Job& job)>;

  // `kind` names a job in errors ("batch job").
  BackgroundJobs(std::string kind, std::size_t max_running) : kind_(std::move(kind)), max_running_(max_running) {}
  ~BackgroundJobs();  // cancels the jobs running and waits for them
  BackgroundJobs(const BackgroundJobs&) = delete;
  BackgroundJobs& operator=(const BackgroundJobs&) = delete;

  // AlreadyExists when a job of that name runs; ResourceExhausted when max_running run.
  Status start(const std::string& name, Work work);
  // False when no job of that name runs here.
  bool cancel(const std::string& name);
  struct Progress {
    bool running = false;
    bool cancelling = false;
    std::size_t done = 0;
    std::size_t total = 0;
    // How the last job of that name ended, while remembered (cleared when one of that name starts):
    std::string error;   // it failed: why
    std::string result;  // it ended well: what its work left
  };
  Progress progress(const std::string& name);
  std::vector<std::string> running();

 private:
  struct Ending {
    std::string error, result;
  };
  void reap_locked();  // joins the threads of jobs that ended
  void remember_locked(const std::string& name, Ending ending);

  std::string kind_;
  std::size_t max_running_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  std::map<std::string, Ending> endings_;  // by name, at most kRememberedEndings
  std::deque<std::string> ending_order_;   // their names, oldest first
};

// A training's callbacks as a job runs it: stopped by the job's cancel flag, its rounds (or epochs)
// counted as the job's progress.
pipeline::TrainCallbacks training_job_callbacks(BackgroundJobs::Job& job);

// Answers of writes sent with an Idempotency-Key header, so that a client that lost an answer can
// send the write again and get it (the IETF's Idempotency-Key draft): by caller and key, the
// request's fingerprint (method, path, query, body) and the answer of a write that was done (2xx;
// a refused write changed nothing, and its retry runs again). The same key with another request
// is 422; while the first is in flight, 409. Bounded: answers kept kLifetimeMs, at most
// kMaxEntries and kMaxBytes of answers (the oldest go first; an answer over kMaxAnswerBytes is
// not kept, and a retry of it is done again). Kept in this server's memory: a restart forgets them.
class IdempotencyCache {
 public:
  static constexpr std::size_t kMaxEntries = 10'000;
  static constexpr std::size_t kMaxBytes = 64u << 20;
  static constexpr std::size_t kMaxAnswerBytes = 1u << 20;
  static constexpr std::int64_t kLifetimeMs = std::int64_t{24} * 3'600'000;
  static constexpr std::size_t kMaxKeyBytes = 255;

  // The earlier answer to replay, or a refusal (422, 409); nullopt: go on, then `finish`.
  std::optional<serve::HttpResponse> begin(const std::string& key, const std::string& fingerprint);
  void finish(const std::string& key, const serve::HttpResponse& answer);

 private:
  struct Entry {
    std::string fingerprint;
    std::optional<serve::HttpResponse> answer;  // nullopt while in flight
    std::int64_t stored_ms = 0;
    std::size_t bytes = 0;
  };
  void evict_locked(std::int64_t now_ms);

  std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::deque<std::pair<std::int64_t, std::string>> order_;  // (stored_ms, key), oldest first
  std::size_t bytes_ = 0;
};

// What a management handler keeps between calls.
struct ApiServer {
  explicit ApiServer(ManagementOptions given) : options(std::move(given)) {}
  ManagementOptions options;
  // The server's threads serve requests too: two batch jobs at once (each takes half the cores),
  // one training (it takes the cores its spec asks for).
  BackgroundJobs batch_jobs{"batch job", 2};
  BackgroundJobs training_jobs{"training job", 1};
  // One study at a time: its workers take the cores.
  BackgroundJobs study_jobs{"study", 1};
  IdempotencyCache idempotency;
};

// The OpenAPI 3.1 document of /api (these declarations), /v2 (serve's) and /v1 (the OpenAI
// protocol's), as JSON (openapi.cpp).
std::string openapi_document();

// %XX and '+' decoded; InvalidArgument for a '%' without two hex digits.
Result<std::string> url_decoded(std::string_view text);

// The query string as decoded pairs, each key among those the route declares (a typo is an
// error, not a silent default), once.
Result<std::map<std::string, std::string, std::less<>>> parse_query(std::string_view query,
                                                                    const std::vector<ApiParameter>& declared);
// A whole number from `least` to `most`, named in the error.
Result<std::int64_t> parse_integer(std::string_view text, std::string_view name, std::int64_t least, std::int64_t most);

// A route that takes no body: nothing, or {}. Anything else is refused, so a client that meant to
// send options learns they were not read.
Status check_no_body(std::string_view body);

// A file a client names: `relative` under `folder` (a relative path of at most 256 bytes, no "."
// or ".." part, no control character or backslash), so a token that may deploy cannot have the
// server read or write any other file it can. InvalidArgument naming `what`, with `example`.
Result<std::string> client_named_file(const std::string& folder, std::string_view relative, std::string_view what,
                                      std::string_view example);

// A spec's files as files of `folder` (client_named_file; `data` may be empty only when not
// `data_required`) and its warm start a registered model, not a file: a token that may train
// cannot make the server read any other file.
Status confine_spec_files(const std::string& folder, pipeline::TrainSpec& spec, bool data_required);
// The {run_id} path segment: 32 lowercase hex digits (InvalidArgument otherwise).
bool is_run_id(std::string_view text);
Result<std::string> run_id_parameter(ApiCall& call);

// A file of the workspace's data/ folder a client names (client_named_file) that exists: NotFound
// naming it otherwise.
Result<std::string> existing_data_file(ApiCall& call, std::string_view relative, std::string_view what,
                                       std::string_view example);
// A registered model a client names (NAME@VERSION, NAME@ALIAS, NAME), resolved: never a bundle
// file of the server's (InvalidArgument).
Result<pipeline::LoadedReference> registered_model(ApiCall& call, const std::string& reference);

// JSON answers.
serve::HttpResponse json_answer(JsonWriter& json);
serve::HttpResponse endpoint_answer(const registry::Endpoint& endpoint);

// Every field of `object` is among `known`, once (a typo is an error, not a silent default; a
// repeated key is refused rather than one copy silently winning).
Status check_fields(simdjson::dom::object object, std::string_view where,
                    std::initializer_list<std::string_view> known);

// A request body: a JSON object whose fields are all among those the route takes.
class JsonBody {
 public:
  Status parse(std::string_view body, std::string_view example, std::initializer_list<std::string_view> known);
  bool has(std::string_view key);
  bool is_null(std::string_view key);
  Result<std::string> text(std::string_view key, std::string_view what);
  Result<double> number(std::string_view key, std::string_view what);
  // A whole number from `least` to `most`: 0.4 is refused, not rounded (which could remove a
  // deadline).
  Result<std::int64_t> integer(std::string_view key, double least, double most, std::string_view what);
  Result<bool> boolean(std::string_view key);
  Result<std::vector<double>> numbers(std::string_view key, std::string_view what, std::size_t max_count);
  Result<simdjson::dom::object> object(std::string_view key, std::string_view what);
  // {"KEY": "text", ...}: at most `max_count` entries.
  Result<std::map<std::string, std::string>> text_map(std::string_view key, std::size_t max_count);
  Result<simdjson::dom::array> array(std::string_view key, std::string_view what);

  static Result<std::string> text_of(simdjson::dom::object object, std::string_view key, std::string_view what);
  // The whole body, for a parser of an object that may also come nested (a deploy's "gate").
  simdjson::dom::object fields() const { return object_; }

 private:
  simdjson::dom::parser parser_;
  simdjson::padded_string padded_;
  simdjson::dom::object object_;
};

}  // namespace slipway::control
