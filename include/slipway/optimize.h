// slipway/optimize.h — making models fast and cheap against explicit service-level objectives:
// the load generator that measures a served model honestly, and the profile that says where a
// model's serving time goes.
//
// Open loop (a fixed arrival rate, constant or Poisson): each request has an intended send time,
// and its latency is measured from that time, not from when a free connection finally sent it,
// so a server that falls behind is charged for the queue it causes (no coordinated omission).
// Closed loop (a fixed number of requests outstanding) measures from the actual send, as closed
// loops must.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/llm.h"
#include "slipway/model.h"
#include "slipway/registry.h"

namespace slipway::optimize {

struct LoadTestOptions {
  std::string url;  // http://HOST:PORT/PATH
  // Request bodies, cycled in order; empty sends GETs.
  std::vector<std::string> bodies;
  std::vector<std::pair<std::string, std::string>> headers;
  double rate = 0.0;     // open loop: requests per second (> 0), or
  int concurrency = 0;   // closed loop: requests outstanding (> 0)
  bool poisson = false;  // open loop: exponential gaps instead of constant ones
  std::chrono::milliseconds duration{10'000};
  std::chrono::milliseconds warmup{0};        // sent, not recorded
  std::chrono::milliseconds timeout{10'000};  // per request, from its intended send time
  int max_connections = 512;                  // open loop: connections opened as needed, up to this
  int threads = 1;                            // event-loop threads of the generator
  std::uint64_t seed = 1;
  // JSON-object bodies only: the share of requests that repeat, byte for byte, one of the last 256
  // requests their generator thread sent (which a response cache can answer); every other request
  // is the next body with a KServe v2 request "id" no request had before, so none can. Unset:
  // the bodies exactly as given, which repeat once they are cycled through.
  std::optional<double> repeat_rate;
  // Called about once a second with the report so far.
  std::function<void(double elapsed_seconds, std::uint64_t completed, double current_rate)> on_progress;
};

struct LoadTestReport {
  double target_rate = 0.0;    // open loop; 0 for closed loop
  double achieved_rate = 0.0;  // completed (recorded) requests per second of the measured window
  double measured_seconds = 0.0;
  std::uint64_t sent = 0;       // recorded requests
  std::uint64_t succeeded = 0;  // 2xx
  // By HTTP status; 0 counts requests with no response (connection error or timeout).
  std::map<int, std::uint64_t> status_counts;
  std::uint64_t late_sends = 0;  // open loop: sent more than 1 ms after their intended time
  // Latency of recorded requests (every status), in milliseconds.
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
  int connections_used = 0;
};

Result<LoadTestReport> run_load_test(const LoadTestOptions& options);

// A latency objective such as "p95<=50ms", "p99<=2.5ms" or "mean<=1s".
struct LatencySlo {
  std::string statistic;  // p50, p90, p95, p99, p99.9, max, mean
  double limit_ms = 0.0;
  std::string text;
};
Result<LatencySlo> parse_latency_slo(const std::string& text);
// The report's value for the statistic, in milliseconds.
double latency_statistic(const LoadTestReport& report, const std::string& statistic);

// ---------------------------------------------------------------------------------------------
// Profile: where one model's serving time goes, per request size, in-process stage by stage and
// through the real server on loopback. Find the bottleneck before changing anything.

struct ProfileOptions {
  std::shared_ptr<const model::Bundle> bundle;
  std::string model;                  // how the user named it (NAME@VERSION or a file), for the report
  const data::Table* rows = nullptr;  // request rows; the model's target column is skipped if present
  std::vector<std::size_t> rows_per_request = {1, 8, 64};
  int threads = 1;                                 // the server's worker threads
  std::chrono::milliseconds in_process_time{500};  // per request size
  std::chrono::milliseconds server_time{2000};     // per request size, for latency and again for throughput
  // Called as each step starts: `step` of `total` (a progress bar).
  std::function<void(int step, int total, const std::string& what)> on_progress;
};

struct StageTime {
  std::string name;      // parse, preprocess, compute, postprocess, encode, transport
  double median_us = 0;  // per request
  double share = 0;      // of the server latency (p50)
};

struct RequestSizeProfile {
  std::size_t rows_per_request = 0;
  std::size_t request_bytes = 0;  // the median v2 JSON request body
  std::size_t response_bytes = 0;
  // In-process, one request at a time on one thread: the five stages inside the server, then
  // "transport": what the server adds around them (HTTP parsing, routing, the worker hand-off,
  // queueing and the loopback), the server's p50 less the in-process total.
  std::vector<StageTime> stages;
  std::uint64_t requests_timed = 0;
  double in_process_us = 0;  // the sum of the in-process stages' medians
  double server_p50_us = 0;  // through the server, one request outstanding
  double server_p99_us = 0;
  double in_process_rows_per_second = 0;  // one thread, the in-process total per request
  double server_rows_per_second = 0;      // closed loop, `connections` requests outstanding
  int connections = 0;
  std::string bottleneck;  // the stage with the largest share
};

struct ProfileReport {
  std::string model;
  std::string family;  // linear, tree_ensemble
  std::size_t bundle_bytes = 0;
  std::size_t loaded_bytes = 0;  // Bundle::memory_bytes()
  int threads = 0;
  std::vector<RequestSizeProfile> sizes;
};

// Starts a server on loopback (a temporary workspace holding the bundle) for the server half.
// InvalidArgument when a request size is 0 or larger than the rows given, or the rows do not fit
// the model.
Result<ProfileReport> profile_model(const ProfileOptions& options);
// What `slipway profile --json` prints.
void write_profile_report_json(JsonWriter& json, const ProfileReport& report);

// ---------------------------------------------------------------------------------------------
// The candidate table: optimized versions of a model, each measured on this machine against the
// service-level objectives, and the one to ship.

// "p95<=5ms@2000rps,cost<=0.02/1k,auc_drop<=0.005": a latency statistic at a request rate, a cost
// per 1,000 predictions (needs a price per hour), and the largest drops in quality metrics
// (`<metric>_drop`, positive meaning worse, as eval::quality_drop).
struct Slo {
  std::string text;
  std::optional<LatencySlo> latency;
  double rate = 0.0;  // requests per second the latency must hold at (with latency)
  std::optional<double> cost_per_1k;
  std::vector<std::pair<std::string, double>> quality_drops;  // metric, largest drop allowed
};
Result<Slo> parse_slo(const std::string& text);

struct CandidateResult {
  std::string name;       // "baseline", "quantize", "prune:120"
  std::string technique;  // baseline, quantize, prune
  std::map<std::string, std::string> settings;
  std::shared_ptr<const model::Bundle> bundle;  // with its optimization record; null on error
  std::string error;                            // a candidate that could not be built or measured
  // Quality on the golden rows, in `quality_metric`, and the drops from the baseline.
  double quality = 0.0, quality_drop = 0.0;
  std::string worst_slice;
  double worst_slice_drop = 0.0;  // NaN without slices
  std::size_t rows_beyond_tolerance = 0, label_flips = 0;
  double max_abs_difference = 0.0;
  // Through the server on loopback, open loop at the SLO's rate (or closed loop without one).
  double p50_ms = 0.0, p95_ms = 0.0, p99_ms = 0.0, achieved_rate = 0.0;
  std::uint64_t failed_requests = 0;
  double max_rate = 0.0;  // the highest rate found whose latency SLO holds (throughput without one)
  // Closed-loop throughput (rows/s) over interleaved rounds: every contender measured once per
  // round, in turn, so a burst of noise falls on all of them. The median and the range of the
  // rounds; NaN for a candidate not measured in them (it misses the SLO, or an earlier run's).
  // Two contenders whose ranges overlap are a tie, which the fewer changes win.
  double throughput_median = std::nan(""), throughput_low = std::nan(""), throughput_high = std::nan("");
  int throughput_rounds = 0;
  double cost_per_1k = 0.0;  // price per hour / (3600 x max_rate) x 1000; NaN without a price
  std::size_t bundle_bytes = 0, loaded_bytes = 0;
  std::size_t request_bytes = 0;  // the median one-row v2 JSON request: its inputs only
  bool meets_slo = false;
  std::vector<std::string> failures;  // each SLO clause or guard it fails, in words
  int changes = 0;
  std::string version;  // what on_candidate registered it as; empty if not registered
};

struct OptimizeOptions {
  std::shared_ptr<const model::Bundle> baseline;
  std::string baseline_name;               // NAME@VERSION or the file, recorded in each candidate
  const data::Table* golden = nullptr;     // labelled rows: quality, differences and request bodies
  const data::Table* train = nullptr;      // labelled rows to retrain on ("features", "distill"); may be null
  const data::Table* unlabeled = nullptr;  // more rows for "distill", labelled by the teacher; may be null
  // Rows an MLP's int8 activation scales are calibrated on ("int8"); may be null (per-row only).
  const data::Table* calibration = nullptr;
  double distill_alpha = 0.7;        // the teacher's weight against the label
  double distill_temperature = 1.0;  // softens the teacher's probabilities (binary classification)
  std::string slice_column;
  Slo slo;
  double price_per_hour = 0.0;  // 0: no cost
  std::vector<std::string> techniques = {"quantize", "prune", "features", "distill", "int8", "sparse", "serving"};
  // Golden-set differences beyond it keep a candidate from being recommended; unset: reported only.
  std::optional<double> tolerance;
  // The share of load-test requests that repeat an earlier request byte for byte; the others are
  // made unique (LoadTestOptions::repeat_rate). Above 0 the serving sweep adds the response cache.
  double repeat_rate = 0.0;
  std::chrono::milliseconds measure_time{2000};  // per load test
  // The whole run's time: once it is spent, the candidates not yet built or measured are rows
  // saying so (the baseline is always measured). Unset: no limit.
  std::optional<std::chrono::milliseconds> budget;
  // Load tests spent finding each candidate's highest rate within the latency SLO: doublings (or
  // halvings) from the SLO's rate, then bisections, at most this many in all, half as long each.
  int rate_search_steps = 9;
  int threads = 1;  // the server's worker threads
  std::function<void(int step, int total, const std::string& what)> on_progress;
  // Called for each candidate that meets the SLO as soon as it is measured (to register it, so a
  // run that stops keeps what it finished); returns its version.
  std::function<Result<std::string>(const CandidateResult&)> on_candidate;
  // What else the measurements depend on (the golden file, slice, tolerance, price, training
  // rows), recorded with each candidate so a resumed run only reuses records made the same way.
  std::string context;
  // Resuming: the version and optimization record of a candidate of this name that an earlier run
  // measured against the same baseline, SLO and context; nullopt to measure it. A record whose
  // settings differ from the candidate built now is measured again. Null: measure all.
  std::function<std::optional<std::pair<std::string, std::map<std::string, std::string>>>(const std::string& name)>
      find_finished;
  // Set (from another thread) to stop: the candidates not yet built or measured become rows
  // saying so, as when the budget runs out.
  const std::atomic<bool>* cancel = nullptr;
};

struct OptimizeReport {
  std::string baseline_name;
  std::string quality_metric;
  std::string slo_text;
  double price_per_hour = 0.0;
  double repeat_rate = 0.0;
  std::vector<CandidateResult> candidates;                  // the baseline first
  std::vector<std::pair<std::size_t, double>> prune_curve;  // rounds, quality on the golden rows
  int recommended = -1;                                     // index into candidates; -1 when none meets the SLO
  std::string reason;                                       // why that one, or why none
};

// Builds the candidates of `techniques` ("quantize", "prune", "features": retrained without the
// least important inputs, "distill": smaller students of the baseline, "int8": a linear model's
// weights in 8 bits, "serving": dynamic batching
// configurations of the baseline, not registered), measures each and the baseline,
// and marks the recommended one: it meets every SLO clause and guard at the lowest cost (the
// highest sustainable rate when there is no price), ties going to fewer changes. A candidate that
// fails to build or measure is a row with its error. InvalidArgument for an unknown technique, a
// cost SLO without a price, or golden rows without the target.
Result<OptimizeReport> optimize_model(const OptimizeOptions& options);

// The whole of `slipway optimize` for a tabular model, as the CLI and /api run it: the reference
// resolved, the files read, the settings checked (InvalidArgument naming the one that is wrong),
// and with `register_candidates` each candidate registered as a version of the baseline's model
// as soon as it is measured; `resume` reuses the versions an earlier registering run of the same
// baseline, SLO and settings made.
struct OptimizationRequest {
  std::string reference;                                     // NAME@VERSION, NAME@ALIAS, NAME, or a bundle file
  std::string data_path;                                     // labelled golden rows (required)
  std::string train_path, unlabeled_path, calibration_path;  // optional: see OptimizeOptions
  std::string slo;                                           // parse_slo's text; empty: none
  std::vector<std::string> techniques;                       // empty: every technique
  double price_per_hour = 0.0;
  std::optional<double> tolerance;
  std::chrono::milliseconds duration{2000};  // per load test, at least 200 ms
  std::optional<std::chrono::milliseconds> budget;
  int threads = 1;  // the server's worker threads, 1 to 256
  double repeat_rate = 0.0;
  double distill_alpha = 0.7;
  double distill_temperature = 1.0;
  std::string slice_column;
  bool register_candidates = false;
  bool resume = false;
  std::function<void(int step, int total, const std::string& what)> on_progress;
  const std::atomic<bool>* cancel = nullptr;
};
// InvalidArgument for an unknown technique of the tabular table.
Status check_technique(const std::string& technique);
// What can be told of a request before anything is read or measured: its settings, its SLO and
// techniques (InvalidArgument naming the one that is wrong).
Status check_optimization_request(const OptimizationRequest& request);
// `registry` resolves a registered model (null for a bundle file); registering needs it writable.
Result<OptimizeReport> run_optimization(registry::Registry* registry, const OptimizationRequest& request);
// What `slipway optimize --json` prints for a tabular model; `data_name` names the golden file.
void write_optimize_report_json(JsonWriter& json, const OptimizeReport& report, std::string_view data_name);

// ---------------------------------------------------------------------------------------------
// The LLM candidate table: a GGUF model served by the generation engine, each candidate changing
// one thing (the weights' quantization, the KV cache's precision, speculative decoding, the
// batching limits), measured under the same closed-loop load against TTFT/ITL objectives and a
// cost per 1,000 output tokens.

// "ttft_p95<=500ms,itl_p99<=80ms,cost<=0.05/1k,top1>=0.9": time to first token and inter-token
// latency statistics, a cost per 1,000 output tokens (needs a price per hour), and the least
// share of prompt positions whose top token must agree with the baseline's.
struct LlmSlo {
  std::string text;
  std::optional<LatencySlo> time_to_first_token, inter_token_latency;
  std::optional<double> cost_per_1k;
  std::optional<double> top1_agreement;
};
Result<LlmSlo> parse_llm_slo(const std::string& text);

struct LlmLatency {  // milliseconds
  double p50 = 0, p95 = 0, p99 = 0, mean = 0;
};

struct LlmCandidateResult {
  std::string name;       // "baseline", "quantize:q4_k", "kv:int8", "speculative:ngram", "batching:seqs=4"
  std::string technique;  // baseline, quantize, kv, speculative, batching
  // What differs from the baseline: `slipway llm serve` flag -> value, or "quantize" -> the type.
  std::map<std::string, std::string> settings;
  std::string serve_flags;  // the serve flags among them
  std::string model_path;   // the GGUF file it serves
  std::string error;
  // Against the baseline file's logits with an f32 cache, on one prompt of random tokens (0 and 1
  // for the candidates that change no arithmetic: speculative decoding is checked greedy, batching
  // changes nothing).
  double max_logit_difference = 0, rms_logit_difference = 0, top1_agreement = 1;
  double output_tokens_per_second = 0;
  LlmLatency time_to_first_token, inter_token_latency;
  std::size_t completed = 0;
  double cost_per_1k = 0;  // price per hour / (3600 x output tokens/s) x 1000; NaN without a price
  std::uint64_t weight_bytes = 0, kv_cache_bytes = 0;
  bool meets_slo = false;
  std::vector<std::string> failures;
  int changes = 0;
};

struct LlmOptimizeOptions {
  std::string model_path;  // a GGUF Llama
  std::string baseline_name;
  LlmSlo slo;
  double price_per_hour = 0;
  std::vector<std::string> techniques = {"quantize", "kv", "speculative", "batching"};
  // The load: `clients` closed-loop clients send `requests` requests in all, each of
  // `prompt_tokens` random token ids and exactly `output_tokens` greedy output tokens.
  std::size_t clients = 8, requests = 32, prompt_tokens = 128, output_tokens = 64;
  int threads = 0;            // the engine's (0: all cores)
  llm::EngineOptions engine;  // the baseline's; candidates change one field
  // Where quantized candidates are written and kept; empty: a temporary folder, removed at the end.
  std::string work_dir;
  std::function<void(int step, int total, const std::string& what)> on_progress;
};

struct LlmOptimizeReport {
  std::string baseline_name, slo_text;
  double price_per_hour = 0;
  std::size_t clients = 0, requests = 0, prompt_tokens = 0, output_tokens = 0;
  std::vector<LlmCandidateResult> candidates;  // the baseline first
  bool files_kept = false;                     // quantized candidates' files are still there
  int recommended = -1;
  std::string reason;
};

// Builds and measures every candidate of `techniques` and the baseline, one after another on
// this machine, and recommends the one that meets every objective at the lowest cost (the most
// output tokens per second without a price); scores within 2% of the best count as ties (a run's
// noise), going to fewer changes, then to the logits closer to the baseline's. A candidate that cannot
// be built or served is a row with its error. InvalidArgument for an unknown technique, a cost
// objective without a price, or a load that does not fit the model's context.
Result<LlmOptimizeReport> optimize_llm(const LlmOptimizeOptions& options);

}  // namespace slipway::optimize
