// The slipway command line: option structs filled by main.cpp, one function per subcommand.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "slipway/core.h"
#include "slipway/llm.h"
#include "slipway/pipeline.h"
#include "slipway/registry.h"
#include "slipway/serve.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11's name
class App;
}

namespace slipway::cli {

struct GlobalOptions {
  std::string home;  // resolved: --home, else $SLIPWAY_HOME, else ./.slipway
  bool json = false;
};

// `slipway train`: a pipeline::TrainSpec filled from a --spec file first, then from the flags
// given on the command line (which win), plus what only the command line has.
struct TrainOptions : pipeline::TrainSpec {
  std::string spec_path;
  bool progress = true;  // a progress bar on stderr when it is a terminal
};

// How a command opens the workspace. Commands that only read (models, versions, runs, show,
// eval, predict, explain, serve, token list, serving-config without flags, verify without
// --repair) open it read-only: they work where they may not write and never change it.
enum class WorkspaceAccess { kReadOnly, kWrite, kCreate };
Result<std::unique_ptr<registry::Registry>> open_workspace(const GlobalOptions& global, WorkspaceAccess access);
// pipeline::resolve_reference, opening the workspace read-only only for a registry reference.
Result<pipeline::LoadedReference> load_reference(const GlobalOptions& global, const std::string& reference);

// `slipway tune`: a hyperparameter study (pipeline::run_study).
struct TuneOptions {
  std::string study, resume, spec_path;
  std::string data, target, model = "gbdt", valid, split = "random", slice, weight, experiment;
  double test_fraction = 0.2;
  std::uint64_t seed = 42;
  int threads = 0;
  std::vector<std::string> params, ignore, objectives, constraints;
  std::string space, sampler = "tpe", pruner = "none", from_study, register_as, budget;
  std::string costs;  // a cost matrix: inline text or a CSV file
  int trials = 20;
  int parallel = 1;
  int ensemble_size = 3;  // --auto: the top trials averaged into an ensemble (below 2: none)
  bool force = false;
  bool use_cache = true;  // a trial whose inputs match an earlier run reuses its bundle
  bool auto_ml = false;   // --auto: pipeline::run_automl across model families
  bool progress = true;   // a line per finished trial on stderr
};
int run_tune(const GlobalOptions& global, const TuneOptions& flags, const std::vector<std::string>& given);
int run_studies(const GlobalOptions& global);
// With `html`, also writes the study as an HTML page (history, front, importance, trials).
int run_study_show(const GlobalOptions& global, const std::string& study, const std::string& html);
struct StudyNarrowOptions {
  std::string study, out;
  double top_fraction = 0.2;
};
int run_study_narrow(const GlobalOptions& global, const StudyNarrowOptions& flags);

int run_init(const GlobalOptions& global);
int run_train(const GlobalOptions& global, const TrainOptions& flags, const std::vector<std::string>& flags_given);
int run_eval(const GlobalOptions& global, const std::string& reference, const std::string& data,
             const std::string& slice, bool use_cache);
int run_predict(const GlobalOptions& global, const std::string& reference, const std::string& data,
                const std::string& out, const std::string& id_column);
struct CompareOptions {
  std::string reference_a, reference_b;
  std::string data_path;
  double tolerance = 1e-6;
  std::string slice;
  std::size_t worst_rows = 10;
};
// A golden comparison (eval::compare): exit 0 within the tolerance, 1 beyond it, 2 on error.
int run_compare(const GlobalOptions& global, const CompareOptions& options);
int run_models(const GlobalOptions& global);
int run_versions(const GlobalOptions& global, const std::string& model);
struct RunsFlags {
  std::size_t limit = 20;
  std::string experiment;           // empty: every experiment
  std::string status;               // RUNNING, FINISHED, FAILED or INTERRUPTED; empty: any
  std::string model;                // the model family (gbdt, ...); empty: any
  std::string target;               // the column the run's spec predicts; empty: any
  std::vector<std::string> params;  // KEY=VALUE each run's params must hold
  bool ids_only = false;            // one run id per line, for scripts
};
int run_runs(const GlobalOptions& global, const RunsFlags& flags);
int run_show(const GlobalOptions& global, const std::string& run_id);
int run_alias(const GlobalOptions& global, const std::string& reference, const std::string& alias);

struct AnnotateFlags {
  std::string reference;  // NAME (the model) or NAME@VERSION
  std::optional<std::string> description;
  std::optional<std::string> owner;
  std::vector<std::string> tags;    // KEY=VALUE
  std::vector<std::string> untags;  // KEY
};
// Description, owner and tags of a model or a version.
int run_annotate(const GlobalOptions& global, const AnnotateFlags& flags);
// Records (or with `revoke` withdraws) the acting user's approval of a version.
int run_approve(const GlobalOptions& global, const std::string& reference, const std::string& note, bool revoke);
struct AuditFlags {
  std::string model;
  std::string since;
  int limit = 0;
};
// The audit log, optionally about one model and from a time.
int run_audit(const GlobalOptions& global, const AuditFlags& flags);
// Trains a finished run again from its record; exit 0 identical bundle, 1 different, 2 refused.
int run_reproduce(const GlobalOptions& global, const std::string& run_id);
// Takes a version out of service (kept for lineage).
int run_retire(const GlobalOptions& global, const std::string& reference);
// Lists, or with `apply` deletes, artifacts nothing names that are older than `min_age`.
int run_gc(const GlobalOptions& global, bool apply, const std::string& min_age);

// What REF (a version, run id or data file) came from, or with `downstream` what was built from
// it: a tree, --json, or Graphviz with `dot`.
int run_lineage(const GlobalOptions& global, const std::string& reference, bool downstream, bool dot);

class CommandResult;

struct GateFlags {
  std::string reference;  // the candidate
  std::string baseline;
  std::string data_path;
  std::string slice;
  eval::GateCriteria criteria;
};
struct GateOutcome {
  bool passed = false;
  std::unique_ptr<CommandResult> result;
};
// Runs a gate and, for registered versions, records its result with them.
Result<GateOutcome> run_gate_check(const GlobalOptions& global, const GateFlags& flags);
// `slipway gate`: exit 0 passed, 1 failed, 2 could not run.
int run_gate(const GlobalOptions& global, const GateFlags& flags);

struct MonitorFlags {
  std::string reference;  // NAME[@VERSION|@ALIAS], an endpoint, or a bundle file (with --data)
  std::string data;       // the current rows from a file instead of the request log
  std::string window = "1h";
  std::string baseline = "training";  // training, previous-window, or a file
  std::string request_log_dir;        // empty: <workspace>/request_log
  double distance = 0.3;
  double p_value = 0.05;
  std::string id_column;  // --id-col: join labels (slipway labels ingest) by this input for performance
  bool alert = false;     // --alert: record the alert states (/metrics shows them), notify --webhook of changes
  std::string webhook;    // POST the alerts that changed here
  std::vector<std::string> min_metrics;  // --min-metric auc=0.7: alert below it
  std::vector<std::string> max_metrics;  // --max-metric log_loss=0.3: alert above it
  // --max-metric-drop auc=0.05: alert when the metric is that much worse than the bundle's test value
  std::vector<std::string> max_metric_drops;
  std::string html;   // --html FILE: the report page
  std::string slice;  // --slice COL: the performance per value of COL too
};
struct LabelFlags {
  std::string path;
  std::string model;
  std::string id_column;
  std::string label_column;
};
// Stores ground truth for a model's predictions, by id (slipway monitor --id-col joins it).
int run_labels_ingest(const GlobalOptions& global, const LabelFlags& flags);
// Skew and drift of a model's traffic or of a file against its training data (slipway/monitor.h).
int run_monitor(const GlobalOptions& global, const MonitorFlags& flags);

struct RetrainPolicyFlags {
  std::string model;
  // Each set only when given: the policy keeps its stored value (or the default) otherwise.
  std::optional<std::string> on, every, cooldown, data, window, id_column, spec_path;
  std::optional<std::int64_t> rounds, min_rows;
  std::optional<bool> warm_start;
  std::optional<std::string> gate, gate_metric, gate_data, gate_slice, endpoint, deploy, rollout_interval;
  std::optional<double> gate_min, gate_max, gate_max_drop, gate_max_relative_drop;
  bool reset = false;   // --reset: the keys given replace the stored policy
  bool remove = false;  // --remove: delete the policy
};
// Shows or stores a model's retrain policy (pipeline::RetrainPolicy).
int run_retrain_policy(const GlobalOptions& global, const RetrainPolicyFlags& flags);
struct RetrainFlags {
  std::string model;     // NAME, or --due for every policy
  bool due = false;      // --due: each model whose policy is due
  bool force = false;    // --force: now, whatever the triggers say (and even on unchanged rows)
  bool dry_run = false;  // --dry-run: say whether it is due and why; change nothing
  bool progress = true;
};
// Retrains a model whose policy is due (or every due one); exit 1 when a retraining failed.
int run_retrain(const GlobalOptions& global, const RetrainFlags& flags);
// The retrainings, newest first (one model's when `model` is not empty).
int run_retrain_history(const GlobalOptions& global, const std::string& model, std::int64_t limit);

struct BatchFlags {
  std::string reference;
  std::string data;
  std::string out;
  std::string format = "csv";
  std::size_t shards = 0;
  int workers = 0;
  double max_error_rate = 0.01;
  std::string id_column;
  bool progress = true;
};
// Scores a file with a model into a job folder (slipway/batch.h): sharded, resumable, idempotent.
int run_batch(const GlobalOptions& global, const BatchFlags& flags);
// The manifest of the job in `out`.
int run_batch_status(const GlobalOptions& global, const std::string& out);

struct DeployFlags {
  std::string endpoint;
  std::string reference;         // NAME@VERSION (or NAME@ALIAS, NAME), resolved to a version now
  std::optional<double> canary;  // --canary PERCENT: that share to the new version
  bool promote = false;          // --promote: the canary takes all traffic
  std::string steps;             // --steps 10,50,100: a rollout in steps, with analysis
  std::string interval = "2m";   // --interval: each step's length
  registry::RolloutCriteria criteria;
  std::string fallback;  // --fallback none|main|previous|cached|constant:VALUE
  std::string deadline;  // --deadline 200ms: a route slower than that is answered by the fallback; 0 removes it
  std::optional<std::string> slo;  // --slo "p99<=20ms@500rps": what the endpoint promises; "" removes it
  std::string shadow;              // --shadow REF: mirror requests to it
  double shadow_percent = 100.0;
  bool no_shadow = false;
  std::optional<std::string> owner;
  std::string require_approval;  // --require-approval yes|no
  GateFlags gate;                // --gate-data ...: a gate against the endpoint's main version first
};
// Routes an endpoint to a model version (all traffic, or a canary share), or promotes its canary.
int run_deploy(const GlobalOptions& global, const DeployFlags& flags);
// Returns an endpoint to the configuration its last change replaced.
int run_rollback(const GlobalOptions& global, const std::string& endpoint);
// Every endpoint with its routes and rollback target.
int run_endpoints(const GlobalOptions& global);
// What an on-call engineer needs about an endpoint (versions and shares, inputs, evaluation,
// rollout, how to roll back), as Markdown; also written to `markdown_path` when given.
int run_describe(const GlobalOptions& global, const std::string& endpoint, const std::string& markdown_path);
// The endpoint's rollout: step, shares, the last analysis, the verdict.
int run_rollout_status(const GlobalOptions& global, const std::string& endpoint);
// Serving configuration flags shared by `serve` (server-wide defaults) and `serving-config`
// (one model): the keys of serve::serving_config_keys() given on the command line.
// The flags are generated from serve::serving_config_declarations().
struct ServingConfigFlags {
  std::map<std::string, std::string> values;              // storage for every key's flag
  std::map<std::string, std::vector<std::string>> lists;  // list keys: one item per repeated flag
  std::map<std::string, std::string> given() const;       // the keys set on the command line
  std::vector<std::string> given_keys;                    // filled by main.cpp after parsing
};

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 0;
  int io_threads = 2;
  std::string config_path;                 // --config YAML
  std::vector<std::string> cached_models;  // --cache NAME: cache on for these models
  std::size_t cache_bytes = std::size_t{64} << 20;
  std::size_t fallback_cache_bytes = std::size_t{64} << 20;  // answers kept for endpoints' cached fallback
  std::string request_log_dir;                               // empty: <workspace>/request_log
  int request_log_retention_hours = 24 * 7;
  std::size_t request_log_max_mb = 1024;
  std::size_t memory_budget_mb = 0;
  int max_pending = 0;      // 0: 64 per worker thread
  int max_connections = 0;  // 0: from the open-file limit
  // Request bodies in flight, each counted at kV2BodyMemoryFactor times its size; 0: 1,024 MiB.
  std::size_t max_request_memory_mb = 0;
  bool lazy = false;       // load models on their first request instead of at start
  bool auth = false;       // require bearer tokens
  llm::EngineOptions llm;  // each registered LLM's engine
};
int run_serve(const GlobalOptions& global, const ServeOptions& options, const ServingConfigFlags& defaults);
// Shows the model's stored serving configuration, or stores the keys given (`reset`: replacing it).
int run_serving_config(const GlobalOptions& global, const std::string& model, const ServingConfigFlags& flags,
                       bool reset);
// The serving config keys as a table, or with `markdown` as docs/serving-config.md.
int run_serving_config_keys(const GlobalOptions& global, bool markdown);
int run_token_create(const GlobalOptions& global, const std::string& name, const std::string& role);
int run_token_list(const GlobalOptions& global);
int run_token_revoke(const GlobalOptions& global, const std::string& id);
int run_params(const GlobalOptions& global, bool markdown);
// Checks the workspace (registry::verify_workspace); exit 0 when it found no problem, 1 otherwise.
int run_verify(const GlobalOptions& global, bool repair);

struct ImportOptions {
  std::string format;  // "xgboost", "onnx" or "gguf"
  std::string model_path;
  std::vector<std::string> class_labels;  // onnx
  std::string register_as;
  std::string schema_path;  // a CSV whose header names the features (the target column is skipped)
  std::string target = "label";
  std::string bundle_out;
};
int run_import(const GlobalOptions& global, const ImportOptions& options);

struct LlmTestModelFlags {
  std::string out;
  std::string type = "f32";
  std::uint64_t seed = 1;
  llm::TestModelShape shape;
};
// A random-weight Llama GGUF with a small tokenizer, for tests and benchmarks.
int run_llm_make_test_model(const GlobalOptions& global, const LlmTestModelFlags& flags);

struct LlmBenchFlags {
  std::string model;
  llm::LlmBenchOptions options;
  std::uint64_t bandwidth_mib = 0;  // 0: the bytes one decoded token reads
  bool skip_bandwidth = false;
  std::string device = "cpu";                        // or "cuda": llm::bench_cuda
  std::vector<std::size_t> sequences = {1, 16, 64};  // cuda: sequences decoding at once
};
// llama-bench's pp and tg tests on a GGUF file, with the bandwidth roofline and int8 peak.
int run_llm_bench(const GlobalOptions& global, const LlmBenchFlags& flags);

// A GGUF model's matrices re-encoded as q8_0, q4_0, q4_k, f16 or bf16.
int run_llm_quantize(const GlobalOptions& global, const std::string& in, const std::string& out,
                     const std::string& type);

struct LlmServeFlags {
  std::string model;  // a GGUF file
  std::string name;   // the model id requests use; the file's stem when empty
  std::string host = "127.0.0.1";
  int port = 8080;
  llm::EngineOptions engine;
  std::string speculative;  // "", "ngram" or "draft"
  std::string draft_model;  // a GGUF file, for "draft"
  int io_threads = 2;
  int max_connections = 0;
  std::string api_key;  // required as a bearer token when set (or SLIPWAY_API_KEY)
};
// The OpenAI API over one GGUF file.
int run_llm_serve(const GlobalOptions& global, const LlmServeFlags& flags);
// The engine's scheduler and cache flags (--max-num-seqs, --max-num-batched-tokens, --ctx,
// --kv-cache-mb, --no-prefix-caching; --threads too when `prefix` is empty), each named
// "--" + prefix + name.
void add_engine_flags(CLI::App* command, llm::EngineOptions& options, const std::string& prefix);

// A subcommand registered in its own file: runs it when it was parsed, else returns nullopt.
using LlmSubcommandRunner = std::function<std::optional<int>(const GlobalOptions&)>;
// `slipway llm bench-serve` (llm_bench_serve.cpp): adds it under `llm_command` and sets `run`.
void add_llm_bench_serve_command(CLI::App* llm_command, LlmSubcommandRunner& run);

// `slipway llm` and its subcommands: registered on the app by add_llm_commands, which fills these
// flags; run_llm_command runs the one that was parsed (nullopt when none was).
struct LlmCommands {
  CLI::App* make_test_model = nullptr;
  CLI::App* bench = nullptr;
  CLI::App* quantize = nullptr;
  CLI::App* serve = nullptr;
  LlmTestModelFlags test_model;
  LlmBenchFlags bench_flags;
  std::string quantize_in, quantize_out, quantize_type;
  LlmServeFlags serve_flags;
  LlmSubcommandRunner run_bench_serve;  // set by add_llm_bench_serve_command
};
void add_llm_commands(CLI::App& app, LlmCommands& commands);
std::optional<int> run_llm_command(const GlobalOptions& global, const LlmCommands& commands);

struct ExportOptions {
  std::string reference;
  std::string format;  // "onnx" or "xgboost-json"
  std::string out;
};
int run_export(const GlobalOptions& global, const ExportOptions& options);
// TreeSHAP contributions per row (CSV), or with importance=true the model's feature importance.
int run_explain(const GlobalOptions& global, const std::string& reference, const std::string& data,
                const std::string& out, bool importance);

struct LoadTestFlags {
  std::string url;
  double rate = 0;
  int concurrency = 0;
  std::string arrival = "constant";
  std::string duration = "10s";
  std::string warmup = "0s";
  std::string timeout = "10s";
  std::string body_path;
  std::string csv_path;
  int rows_per_request = 1;
  std::vector<std::string> skip_columns;
  std::vector<std::string> headers;  // "Name: value"
  int connections = 512;
  int threads = 1;
  std::vector<std::string> slos;
  std::uint64_t seed = 1;
  std::optional<double> repeat_rate;  // --repeat-rate: share of requests sent as given; the others unique
  bool progress = true;
};
struct ProfileFlags {
  std::string reference;
  std::string data_path;
  std::vector<std::string> rows_per_request = {"1,8,64"};
  int threads = 1;
  std::string duration = "2s";
  bool progress = true;
};
// Where one model's serving time goes (optimize::profile_model), per request size.
int run_profile(const GlobalOptions& global, const ProfileFlags& flags);

struct OptimizeFlags {
  std::string reference;
  std::string data_path;
  std::string slice;
  std::string slo;  // "p95<=5ms@2000rps,cost<=0.02/1k,auc_drop<=0.005"
  double price_per_hour = 0.0;
  std::string candidates;        // empty: every technique of the model's kind
  std::string train_path;        // --train: rows to retrain on (features, distill)
  std::string unlabeled_path;    // --unlabeled: more rows for distill, labelled by the teacher
  std::string calibration_path;  // --calibration: rows an MLP's int8 activation scales are calibrated on
  double alpha = 0.7;
  double temperature = 1.0;
  std::optional<double> tolerance;
  double repeat_rate = 0.0;  // share of the load test's requests that repeat an earlier one
  std::string duration = "2s";
  std::string budget;  // --budget 10m: the whole run's time
  int threads = 0;     // 0: a tabular model's server gets 1, an LLM's engine every core
  bool register_candidates = false;
  bool resume = false;  // skip candidates an earlier --register run measured (same baseline and SLO)
  std::string markdown_path;
  bool progress = true;
  // A GGUF LLM's load, and where its quantized candidates are kept (empty: not kept).
  std::size_t clients = 8, requests = 32, prompt_tokens = 128, output_tokens = 64;
  std::string out_dir;
};
// The candidate table (optimize::optimize_model, or optimize::optimize_llm for a GGUF model);
// with --register each tabular candidate becomes a version.
int run_optimize(const GlobalOptions& global, const OptimizeFlags& flags);

// Open- or closed-loop HTTP load with latency percentiles; exit 1 when an --slo is missed.
int run_loadtest(const GlobalOptions& global, const LoadTestFlags& flags);

// ---------------------------------------------------------------------------------------------
// Output: every command builds a result and hands it to render(), which prints it as one JSON
// document on stdout with --json and as text otherwise. Commands never branch on --json.

// Prints "error: <message>" to stderr and returns the exit code for failures.
int fail(const Status& status);

class CommandResult {
 public:
  virtual ~CommandResult() = default;
  // One complete JSON value (normally an object) into an empty writer.
  virtual void write_json(JsonWriter& json) const = 0;
  // What a person reads: tables, lines, or the CSV a command prints.
  virtual void write_text(std::ostream& out) const = 0;
};

// Prints `result` as JSON (global.json) or text on stdout; returns exit code 0.
int render(const GlobalOptions& global, const CommandResult& result);
// A failed result prints "error: ..." on stderr (fail) and returns 1; else render(*result).
template <typename T>
int render(const GlobalOptions& global, const Result<T>& result) {
  if (!result.ok()) return fail(result.status());
  return render(global, *result);
}

// Prints one JSON document on stdout (what --json promises).
void print_json(const JsonWriter& json);
// Prints rows under headers, columns aligned (on stdout, or on `out`).
void print_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows);
void print_table(std::ostream& out, const std::vector<std::string>& headers,
                 const std::vector<std::vector<std::string>>& rows);
// A one-line progress bar on stderr, redrawn at most 10 times a second, shown only when stderr
// is a terminal (logs and pipes get no carriage-return noise).
class ProgressBar {
 public:
  ProgressBar(std::string label, std::int64_t total, bool enabled);
  ~ProgressBar();
  // `done` of total finished; `detail` is shown after the count (e.g. the latest metric).
  void update(std::int64_t done, const std::string& detail);
  // For work whose size is known only once it starts.
  void set_total(std::int64_t total) { total_ = std::max<std::int64_t>(total, 1); }
  void finish();

 private:
  std::string label_;
  std::int64_t total_;
  bool enabled_;
  std::int64_t started_ns_;
  std::int64_t last_draw_ns_ = 0;
  bool drawn_ = false;
};

// "12 B", "4.1 KiB", "1.4 MiB".
std::string format_bytes(std::size_t bytes);
// A metric value for display: 4 significant decimals, "-" for NaN.
std::string format_metric(double value);
// "-0.0000" (a tiny negative rounded away) as "0.0000"; any other text as it is.
std::string without_negative_zero(std::string formatted);
std::string format_time_ms(std::int64_t unix_ms);

// Pieces several commands print the same way.
// An evaluation as a table: one row for all rows, then one per slice.
void print_evaluation(std::ostream& out, const eval::Evaluation& evaluation);
// "registered": {"model": NAME, "version": N}, when a version was registered.
void write_registered_json(JsonWriter& json, const std::optional<registry::ModelVersion>& registered);

}  // namespace slipway::cli
