// Orchestration shared by the CLI, the management API, tune, optimize and monitor's retraining:
// a training run from a spec (data preparation, split, leakage report, warm start, resume from a
// checkpoint, the registry run's lifecycle, evaluation, bundle storage, registration), model
// reference resolution, and scoring or evaluating a file. Nothing here prints; progress is
// reported through callbacks and log lines go through core logging (stderr).
//
// Threads: every call runs on the calling thread (training itself fans out to `threads`
// workers). Calls that take a Registry use it only for their duration; a Registry is not
// thread-safe, so give each thread its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/batch.h"
#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/eval.h"
#include "slipway/model.h"
#include "slipway/monitor.h"
#include "slipway/registry.h"
#include "slipway/train.h"

namespace slipway::pipeline {

// Who asks. The audit log names `actor` (empty: the registry's own, the OS user). Approving and
// lifting an endpoint's approval requirement need `may_administer` (the admin role): a caller
// who may only deploy cannot approve what it deploys, nor lift the requirement. The CLI acts as
// the workspace's owner, with every right.
struct Caller {
  std::string actor;
  bool may_administer = true;
};

// What to train, from what data, and where the result goes: what a YAML spec holds.
struct TrainSpec {
  std::string data;       // training CSV (with a header row)
  std::string test_data;  // a separate test CSV, instead of splitting `data`
  std::string target;
  std::string model = "logistic";  // logistic, linear or gbdt
  std::string split = "random";    // random, stratified, time:COLUMN or group:COLUMN
  double test_fraction = 0.2;
  std::string slice;  // also report test metrics per value of this column
  std::uint64_t seed = 42;
  std::vector<std::string> params;  // KEY=VALUE, checked by train::resolve_parameters
  std::vector<std::string> ignore;  // columns that are not features (accepted, unused, at serving)
  // Binary classification: how the decision threshold is chosen (eval::check_threshold_rule:
  // f1, precision>=P, recall>=R, cost=C, or a number). A rule is applied to held-out rows:
  // `threshold_fraction` of the training split, which the model is then not fitted on. Empty: 0.5.
  std::string threshold;
  double threshold_fraction = 0.2;
  std::string register_as;  // register the bundle as a new version of this model
  std::string experiment = "default";
  std::string bundle_out;  // also write the bundle file here
  int threads = 0;         // 0: all cores
  std::string weight_column;
  std::string init_model;  // a model reference (gbdt) to continue boosting from
  int checkpoint_every = 0;
  // Reuse an earlier successful run whose inputs match this one's: the data fingerprint, the
  // code version, the target, model, split, seed, parameters, ignored and weight columns, the
  // warm-start bundle and the thread count (the bundle's bytes depend on nothing else).
  bool use_cache = true;
  // A run id: continue that interrupted run from its latest checkpoint. Its stored spec replaces
  // every field above except `threads` and `bundle_out` (where it runs may change, not what).
  std::string resume_run;
  // The new run's id (32 lowercase hex digits), chosen by the caller so that it can name the run
  // before it exists (a server answers with it at once); empty: a random one.
  std::string run_id;
};

// Reads a YAML spec into `spec`, leaving fields the file does not set untouched. Relative paths
// in it are relative to the spec file's folder. Unknown keys are refused with file:line.
Status load_spec(const std::string& path, TrainSpec& spec);
// The same from YAML text (e.g. a run's stored spec); `source` names it in errors.
Status load_spec_text(const std::string& yaml, const std::string& source, TrainSpec& spec);
// The spec as YAML with absolute paths: what a run stores so that it can be replayed.
std::string spec_yaml(const TrainSpec& spec);
// What can be checked of a spec without the workspace or the data: the data and target given,
// the thread count, the parameters for the model family, the model name to register under, and
// the options that apply to gbdt and mlp only. `run_training` checks it first.
Status check_train_spec(const TrainSpec& spec);
// Parses KEY=VALUE strings; a pair without '=' or without a key is refused.
Result<std::map<std::string, std::string>> parse_key_values(const std::vector<std::string>& pairs);

// Reads a CSV file, logging its size and the time taken.
Result<data::Table> read_table(const std::string& path);

// Called on the training thread; none is required.
struct TrainCallbacks {
  // Once the run exists (started, reopened to resume, or recorded from the step cache).
  std::function<void(const std::string& run_id)> on_run_started;
  // After each boosting round (gbdt) or optimizer iteration; `total` may grow once known.
  std::function<void(const train::RoundMetrics& latest, int total)> on_round;
  // Once fitting ends, before evaluation and storage (successful or not): a progress bar ends here.
  std::function<void()> on_fit_done;
  // Set from another thread, fitting stops after the round or iteration in progress: the run is
  // marked INTERRUPTED ("cancelled", resumable from its latest checkpoint), nothing is registered,
  // and the result is FailedPrecondition.
  const std::atomic<bool>* cancel = nullptr;
};

struct TrainOutcome {
  TrainSpec spec;  // as trained: the stored spec of a resumed run
  std::string run_id;
  train::TrainSummary summary;  // the fitted bundle (without test metrics), rounds, history
  std::string split_description;
  data::LeakageReport leakage;  // all zeros when a separate test file was given
  eval::Evaluation evaluation;  // on the held-out rows
  double train_seconds = 0;
  std::string bundle_sha256;  // the stored bundle, with test metrics in its manifest
  std::optional<registry::ModelVersion> registered;
  // The earlier run whose bundle this one reused (the step cache), instead of training; empty
  // when it trained.
  std::string cached_from;
  data::Table held_out;  // the rows `evaluation` scored
};

// Trains one run from `spec` in `registry` and returns what happened.
//
// The sequence, and the state a failure leaves at each step:
//  1. Checks the spec (a resumed run's spec is read from the run first: the run must exist, not
//     be FINISHED, have a checkpoint, and its data fingerprint must match), resolves the
//     parameters and `init_model`, reads and splits the data. A failure here writes nothing: no
//     run is started (a failing spec, such as a missing target column, leaves no run).
//  2. Starts a RUNNING run (or reopens the resumed one), fits, stores checkpoints as artifacts
//     (crash point `train.after_checkpoint`), logs per-round metrics, evaluates, stores the
//     bundle (an artifact), writes `bundle_out`, logs metrics and marks the run FINISHED. A
//     failure here marks the run FAILED (best effort) and registers nothing; artifacts already
//     stored stay (unreferenced ones are what `slipway verify` reports as orphans).
//  3. Registers the bundle as a new version of `register_as` (crash point
//     `train.before_register` just before). A failure here leaves the run FINISHED and no version.
// With `use_cache`, a run whose inputs match an earlier FINISHED one (whose bundle is still
// stored) is not trained: step 2 records a FINISHED run with the earlier bundle, its metrics
// and `cached_from` (a param too), the held-out rows evaluated again; step 3 is the same.
Result<TrainOutcome> run_training(registry::Registry& registry, TrainSpec spec, const TrainCallbacks& callbacks = {});

// What `slipway monitor` measures skew against, of `bundle` on the rows it stands for: each
// input's distribution, its first score column's, and (tree models) each input's share of the
// attributions. Training records it in the bundle; optimize in each candidate it registers.
Result<model::DataProfile> training_profile(const model::Bundle& bundle, const data::Table& rows);

// A training process stopped by a signal (`signal_name`, such as "SIGINT") marks its RUNNING run
// INTERRUPTED; the answer says what became of the run and how to go on, in words (a run already
// ended, or a store that cannot be written, is said too: it runs in a signal's last moments).
std::string mark_run_interrupted(registry::Registry& registry, const std::string& run_id,
                                 const std::string& signal_name);

// A model loaded for use: from a bundle file or from the registry.
struct LoadedReference {
  std::shared_ptr<const model::Bundle> bundle;
  std::string description;  // "name@version" or the bundle file's path
  std::string sha256;       // the bundle's identity
};

// True when `reference` names a bundle file (it contains '/', ends in .slip, or is an existing
// file) rather than NAME[@VERSION|@ALIAS]; only the latter need a registry.
bool names_bundle_file(const std::string& reference);

// Loads a bundle file, or resolves NAME@VERSION, NAME@ALIAS or NAME (the production alias, else
// the newest version in service) in `registry`
// (read only; it may be null when `reference` names a bundle file). Returns not_found for a
// missing file, model, version or alias, and failed_precondition for a registry reference
// without a registry. The bundle keeps its own mapping: it outlives `registry`.
Result<LoadedReference> resolve_reference(registry::Registry* registry, const std::string& reference);

// `reference` evaluated on a labelled file.
struct EvaluationOutcome {
  std::string model;  // the reference's description
  std::string bundle_sha256;
  std::string data_path;
  eval::Evaluation evaluation;
  bool cached = false;  // reused from the step cache
};
// Reads `data_path` and evaluates overall and per value of `slice` (when not empty). Rows with an
// empty target are skipped, counted and logged as a warning. With `cache` (a writable registry),
// an evaluation of the same bundle on the same file bytes with the same slice by the same code
// version is reused, and a new one is recorded (best effort: a failure to record is logged).
Result<EvaluationOutcome> evaluate_file(const LoadedReference& reference, const std::string& data_path,
                                        const std::string& slice, registry::Registry* cache = nullptr);
// {"rows","rows_missing_target","overall":{METRIC:VALUE},"slice_column"?,"slices"?}
void write_evaluation_json(JsonWriter& json, const eval::Evaluation& evaluation);
// {"model","bundle_sha256","cached","metrics":EVALUATION}: what `slipway eval --json` prints.
void write_evaluation_outcome_json(JsonWriter& json, const EvaluationOutcome& outcome);

// Two models compared on a golden file (eval::compare), row by row and per slice.
struct ModelComparison {
  LoadedReference a, b;
  std::string data_path;
  eval::Comparison comparison;
};
Result<ModelComparison> compare_on_file(LoadedReference a, LoadedReference b, const std::string& data_path,
                                        const eval::ComparisonOptions& options);
// What `slipway compare --json` prints; `data_name` names the file.
void write_comparison_json(JsonWriter& json, const ModelComparison& compared, std::string_view data_name);

// ---------------------------------------------------------------------------------------------
// What a model says about itself: its feature importance and per-row contributions (tree models),
// its export to another system's format, and the training parameters. `slipway explain`,
// `export`, `params` and /api write these.

// Each input's splits (and gain and cover, when the model records them), most important first.
struct FeatureImportance {
  std::string model;  // the reference's description
  std::vector<std::string> names;
  std::vector<std::uint64_t> splits;
  std::vector<double> total_gain;   // empty when the model records no gain
  std::vector<double> total_cover;  // likewise
};
// InvalidArgument for a model that is not a tree ensemble.
Result<FeatureImportance> feature_importance(const LoadedReference& reference);
// {"model","features":[{"name","splits","total_gain"?,"total_cover"?}]}
void write_feature_importance_json(JsonWriter& json, const FeatureImportance& importance);

// TreeSHAP contributions per row: one column per input and the bias, per output (multiclass
// columns are prefixed "CLASS:").
struct RowContributions {
  std::string model;
  std::vector<std::string> columns;
  std::size_t rows = 0;
  std::size_t rows_in_file = 0;      // more than `rows` when max_rows cut the file
  std::vector<float> contributions;  // rows x columns
};
// The first `max_rows` rows of `data_path` explained (0: every row). InvalidArgument for a model
// that is not a tree ensemble.
Result<RowContributions> explain_rows(const LoadedReference& reference, const std::string& data_path,
                                      std::size_t max_rows = 0);
// The header line and one line per row.
std::string contributions_csv(const RowContributions& explained);
// {"model","rows","rows_in_file","columns":[…],"contributions":[[…]]}
void write_contributions_json(JsonWriter& json, const RowContributions& explained);

// A model in another system's format, predicting what the bundle predicts.
struct ModelExport {
  std::string format;  // onnx, xgboost-json
  std::string bytes;
  std::string warning;  // what a user of the file must know (empty when nothing)
  // Categorical inputs and their levels: code i stands for levels[i].
  std::vector<std::pair<std::string, std::vector<std::string>>> categories;
};
// InvalidArgument for an unknown format, or a model the format cannot hold (the reason given).
Result<ModelExport> export_model(const model::Bundle& bundle, const std::string& format);

// {"parameters":[{"name","models":[…],"default","description"}]}: the training parameters'
// declarations.
void write_parameters_json(JsonWriter& json);

// Predictions for every row of a file, with what is needed to write them.
struct ScoredRows {
  std::string model;             // the reference's description
  std::string id_name;           // the identifying column copied through; empty when none
  std::vector<std::string> ids;  // one per row when id_name is set
  model::Task task = model::Task::kRegression;
  std::vector<std::string> class_labels;  // multiclass: the probability columns, in order
  model::Predictions predictions;
  std::vector<std::string> labels;  // classification: the predicted label per row

  // The CSV `slipway predict` writes: [id,] prediction | probability,label | probability_<class>...,label.
  std::string to_csv() const;
};

struct ScoringOptions {
  // Column copied to the output to identify rows; empty: a column named id, ID or Id if any.
  std::string id_column;
  // When not empty, the CSV is written here atomically (temp file and rename).
  std::string out;
};
// Reads and scores `data_path` with `reference`, writing the CSV to `options.out` when given. On
// failure nothing is written.
Result<ScoredRows> score_file(const LoadedReference& reference, const std::string& data_path,
                              const ScoringOptions& options);

// The data fingerprint a training run of `spec` records (of the data file, and the test file when
// it has one).
Result<std::string> data_fingerprint(const TrainSpec& spec);

// A run trained again from what it recorded, to see whether the same bundle comes out.
struct Reproduction {
  std::string run_id;
  std::string recorded_sha256;
  std::string reproduced_sha256;
  bool identical() const { return recorded_sha256 == reproduced_sha256; }
  double seconds = 0;
};

// Trains FINISHED run `run_id` again from its stored spec and seed, in a scratch workspace (the
// registry gains nothing), and compares the bundle's hash with the one it recorded. Refuses with
// FailedPrecondition, naming the difference, when the code version differs from this binary's,
// the data no longer matches the recorded fingerprint, the run is not a finished training run, or
// it warm-started from another model (not reproducible yet). NotFound for an unknown run.
// `callbacks` see the replay's training (its cancel flag stops it).
Result<Reproduction> reproduce_run(registry::Registry& registry, const std::string& run_id,
                                   const TrainCallbacks& callbacks = {});
// {"run_id","recorded_sha256","reproduced_sha256","identical","seconds"}
void write_reproduction_json(JsonWriter& json, const Reproduction& reproduction);

// ---------------------------------------------------------------------------------------------
// Lineage: the workspace as a graph in the ML Metadata model's terms. Artifacts (data sets by
// content fingerprint, bundles, model versions, gate reports), executions (train and import runs,
// optimize, batch scoring jobs, retrainings, studies and their trials), contexts (experiments, aliases, endpoints), and
// edges for the events between them (an execution's inputs and outputs, a version's bundle, what points or routes to a
// version).

struct LineageNode {
  std::string id;    // "data:<fingerprint>", "run:<id>", "bundle:<sha256>", "version:<model>@<n>",
                     // "alias:<model>@<alias>", "endpoint:<name>", "gate:<sha256>", "experiment:<name>",
                     // "batch:<job key>", "retrain:<id>", "study:<name>", "trial:<study>#<number>"
  std::string type;  // data, run, bundle, version, alias, endpoint, gate, experiment, batch, retrain, study,
                     // trial
  std::string label;
  std::map<std::string, std::string> properties;
};

struct LineageEdge {
  std::string from, to;
  std::string kind;  // input, output, registered, points_to, routes (percent), baseline, candidate, optimized, in
};

struct LineageGraph {
  std::vector<LineageNode> nodes;  // the start first
  std::vector<LineageEdge> edges;
};

// The lineage of `reference`: a model version (NAME@VERSION, NAME@ALIAS, NAME), a run id, or a
// data file (by its content fingerprint). Upstream (default): what it was built from, back to
// the data, and what exposes it (aliases, endpoints). Downstream: everything built from it.
// NotFound when the reference names nothing the workspace knows.
Result<LineageGraph> lineage(registry::Registry& registry, const std::string& reference, bool downstream);
// {"start", "direction", "nodes": [{"id", "type", "label", "properties"}], "edges": [{"from", "to", "kind"}]}.
void write_lineage_json(JsonWriter& json, const LineageGraph& graph, bool downstream);

// ---------------------------------------------------------------------------------------------
// Retraining: a policy per registered model says when to train it again (on its monitoring
// alerts, on a schedule), on which rows, from which spec, how the candidate is gated against the
// version it would replace, and whether it is deployed. `slipway retrain` runs it.

struct RetrainPolicy {
  std::string model;  // whose policy (not a stored key)
  // When it is due, comma-separated: alert (any monitoring alert of the model fired), drift (an
  // input or the prediction), performance (a metric limit), schedule (every `every`).
  std::string on = "alert";
  std::chrono::seconds every{0};
  // No retraining starts sooner than this after the last one (a flapping alert retrains once).
  std::chrono::seconds cooldown{6 * 3600};
  // The new rows: a CSV file read when it runs, or "traffic": the baseline version's request log
  // of the last `traffic_window`, joined with the labels ingested for the model by `id_column`.
  std::string data;
  std::chrono::seconds traffic_window{7 * 86400};
  std::string id_column;
  // Fewer new rows than this fail the retraining: a gate on a handful of rows proves nothing.
  std::int64_t min_rows = 200;
  // A train spec (YAML text); empty: the spec of the run that trained the baseline version.
  std::string spec;
  // gbdt: continue boosting from the baseline's trees (`rounds` more, 0: the spec's rounds).
  // Other models train from scratch.
  bool warm_start = true;
  std::int64_t rounds = 0;
  // The gate: `gate_metric` (empty: the task's watched metric) held to `gate` thresholds against
  // the baseline, on `gate_data` (empty: the new rows' held-out split), per `gate_slice` too.
  std::string gate_metric;
  std::string gate = "max_drop=0";
  std::string gate_data;
  std::string gate_slice;
  // The baseline is the main version of `endpoint` when set, else the model's newest version.
  std::string endpoint;
  // What a candidate that passed the gate gets: none (registered only), full, canary:PERCENT, or
  // rollout:STEPS (e.g. rollout:10,50,100, a rollout with analysis every `rollout_interval`).
  std::string deploy = "none";
  std::chrono::seconds rollout_interval{120};
};

// The policy's stored keys, their types, defaults and help (`slipway retrain policy --help`,
// docs/cli.md).
const ConfigSchema<RetrainPolicy>& retrain_policy_schema();
// Checks what the schema cannot: the triggers, `every` with schedule, the data, the gate
// thresholds, the deploy mode (and an endpoint for it), and that the spec parses.
Status check_retrain_policy(const RetrainPolicy& policy);
// `model`'s stored policy, checked; nullopt when it has none.
Result<std::optional<RetrainPolicy>> load_retrain_policy(registry::Registry& registry, const std::string& model);

// Whether `policy` is due at `now_ms`, and why (or why not).
struct RetrainDecision {
  bool due = false;
  std::string reason;
};
Result<RetrainDecision> retrain_due(registry::Registry& registry, const RetrainPolicy& policy, std::int64_t now_ms);

// The model version `policy` compares with (and would replace).
Result<registry::ModelVersion> retrain_baseline(registry::Registry& registry, const RetrainPolicy& policy);

struct RetrainOptions {
  // Now, whatever the triggers say, and even on the rows and baseline of an earlier retraining.
  bool force = false;
  TrainCallbacks callbacks;
};

struct RetrainOutcome {
  RetrainDecision decision;  // not due: nothing else is set
  // state: unchanged, failed, rejected, registered, deployed or deploy_failed
  registry::RetrainingRecord record;
  std::string baseline;  // NAME@VERSION
  std::string data;      // where the new rows came from, in words
  std::optional<TrainOutcome> training;
  std::optional<eval::GateReport> gate;
  std::string gate_data;  // where the gate's rows came from, in words
};

// Stores `model`'s retrain policy as `values` (the schema's keys; what `slipway retrain policy`
// and a client give, merged with what was stored): checked first as the schema and
// check_retrain_policy check it, then what can be checked now rather than after a training (the
// files it reads exist, the endpoint's baseline resolves). Nothing is stored on a failure.
Status save_retrain_policy(registry::Registry& registry, const std::string& model,
                           const std::map<std::string, std::string>& values, const Caller& caller);
// Removes `model`'s retrain policy (NotFound when it has none).
Status remove_retrain_policy(registry::Registry& registry, const std::string& model, const Caller& caller);

// Retrains `policy.model` once if it is due (or forced). Under the model's retraining lock (a
// second process gets FailedPrecondition; records a killed process left `running` become
// `interrupted`) it decides, reads the new rows (for data=traffic, the baseline's labelled
// request log, stored as an artifact), trains the spec on them (warm-started from the baseline),
// gates the candidate against the baseline, registers it as the next version only when the gate
// passes with evidence (a defined metric), and deploys it as the policy says. Progress is written
// to the retraining's record as it goes (run, then candidate), so a crash leaves a record that
// names what it made. Once a record exists every outcome is recorded in it and OK is returned;
// errors are returned for what stops it before (the lock, the baseline, the new rows), or when
// the record itself cannot be written (then it may stay `running` until the next retraining
// marks it `interrupted`). Calls run on the calling thread.
Result<RetrainOutcome> retrain(registry::Registry& registry, const RetrainPolicy& policy,
                               const RetrainOptions& options);
// One model's retraining as `slipway retrain --json` and /api write it: {"model","error","due",
// "decision"} and, once a record exists, {"id","state","message","baseline","data","run",
// "candidate","deployed","gate_report_sha256","gate"?}.
void write_retraining_json(JsonWriter& json, const std::string& model, const Status& error,
                           const RetrainOutcome& outcome);
// A retraining's record: {"id","model","state","reason","baseline_version","run_id",
// "candidate_version","deployed","message","data_fingerprint","gate_report_sha256","started_ms",
// "finished_ms","actor"}.
void write_retraining_record_json(JsonWriter& json, const registry::RetrainingRecord& record);

// ---------------------------------------------------------------------------------------------
// Operations on endpoints, versions and approvals. `slipway deploy`, `rollback`, `approve`,
// `retire` and `gate` and the management API under /api call these same functions for the same
// request, so every front door applies the same checks: the gate, the constant fallback, the
// approval requirement and who may change it. The front doors parse, authorize the route and
// render; they never change the store themselves.
//
// Each takes a Registry opened for writing (reads aside) and the Caller, and leaves the store as
// it was when it fails, unless its comment says otherwise.

// A gate: `candidate` held to `criteria` against `baseline` on the labelled rows of `data_path`,
// overall and per value of `slice` when it is set.
struct GateRequest {
  std::string candidate;  // references: registered versions, or bundle files
  std::string baseline;
  std::string data_path;
  eval::GateCriteria criteria;
  std::string slice;
};

struct GateOutcome {
  std::string candidate;  // the references' descriptions (NAME@VERSION or the file)
  std::string baseline;
  std::string data_path;
  eval::GateReport report;
  std::string report_sha256;  // the stored report, recorded with the candidate; empty when not recorded
  bool passed() const { return report.passed(); }
};
// {"candidate", "baseline", "data", the report's fields[, "report_sha256"]}: what is stored.
void write_gate_outcome_json(JsonWriter& json, const GateOutcome& outcome);

// Runs a gate. When both are registered versions the report is stored as an artifact and its
// result recorded with the candidate (a failed gate too); with a bundle file nothing is recorded
// and `registry` may be null. InvalidArgument for a missing baseline, data or metric; the gate's
// own errors (an unknown metric, rows without the target) as eval::gate returns them.
Result<GateOutcome> run_gate(registry::Registry* registry, const GateRequest& request, const Caller& caller = {});

// Endpoint settings as a caller gives them: each one set is changed, the others stay.
struct EndpointSettingsRequest {
  // owner, require_approval, deadline_ms, slo (checked by the front door: optimize parses SLOs),
  // fallback. `shadow` is ignored: the fields below set it.
  registry::EndpointSettings settings;
  std::string shadow_reference;  // mirror requests to this version (an alias or NAME resolves now)
  double shadow_percent = 100.0;
  bool remove_shadow = false;
  bool empty() const;
};

// Changes `endpoint`'s settings, all or none. A constant fallback must fit what the endpoint's
// main version serves (InvalidArgument, saying what fits). Lifting require_approval needs
// `may_administer` (PermissionDenied); setting it, or giving the value it has, does not. NotFound
// for an unknown endpoint or shadow version.
Result<registry::Endpoint> configure_endpoint(registry::Registry& registry, const std::string& endpoint,
                                              const EndpointSettingsRequest& request, const Caller& caller);

struct DeployRequest {
  std::string endpoint;
  // The version to route to: NAME@VERSION, NAME@ALIAS or NAME, pinned now (moving the alias later
  // changes nothing). Empty with `promote`, or for settings alone.
  std::string reference;
  bool promote = false;          // the canary takes all traffic
  std::optional<double> canary;  // that share (percent) to `reference`, the rest to the main route
  // A rollout in steps (the canary's shares, ending at 100), each `interval_ms` long, advanced
  // while a server's analysis passes `criteria`.
  std::vector<double> steps;
  std::int64_t interval_ms = 120'000;
  registry::RolloutCriteria criteria;
  EndpointSettingsRequest settings;
  // A gate first: `reference` against the endpoint's main version on gate->data_path (candidate
  // and baseline are filled in); a failed gate deploys nothing (its result is recorded).
  std::optional<GateRequest> gate;
};

struct DeployOutcome {
  registry::Endpoint endpoint;               // after the change
  std::optional<registry::Rollout> rollout;  // the rollout started, with steps
  std::optional<GateOutcome> gate;
};

// Deploys, promotes or changes settings, in this order:
//  1. Checks the request's shape (a version, promote, or settings; canary, steps and promote
//     exclude each other; a gate needs a version and an endpoint that serves one), the shares
//     (at the routing resolution: a canary from 0.01 to 99.99%), the settings' values.
//  2. On an existing endpoint, the settings (so a new approval requirement holds for this
//     deploy); a failure stores nothing.
//  3. The gate, when asked: a failed gate returns FailedPrecondition naming the report, and the
//     settings of step 2 stay.
//  4. The change of routes (the endpoint's approval requirement is checked in the same
//     transaction), then, on an endpoint it created, the settings.
Result<DeployOutcome> deploy(registry::Registry& registry, const DeployRequest& request, const Caller& caller);

// Returns `endpoint` to the routes its last change replaced (FailedPrecondition when none).
Result<registry::Endpoint> rollback(registry::Registry& registry, const std::string& endpoint, const Caller& caller);

// What an on-call engineer needs about an endpoint (`slipway describe`): its configuration, its
// rollout, and per version served its record, bundle (null when it cannot load, with why) and
// gate results, newest first.
struct EndpointDescription {
  registry::Endpoint endpoint;
  std::optional<registry::Rollout> rollout;
  struct Version {
    registry::EndpointRoute route;
    registry::ModelVersion record;
    std::shared_ptr<const model::Bundle> bundle;
    std::string load_error;
    std::vector<registry::GateRecord> gates;
  };
  std::vector<Version> versions;
};
// NotFound for an endpoint that does not exist.
Result<EndpointDescription> describe_endpoint(registry::Registry& registry, const std::string& endpoint);
// {"endpoint":ENDPOINT,"versions":[{"reference","percent","bundle_sha256","run_id","task"?,"inputs"?,
// "load_error"?,"version":VERSION,"gates":[{"baseline","metric","criteria","passed","created_ms"}]}],
// "rollout_state"?,"rollout_last_check"?,"rollback_command"}
void write_endpoint_description_json(JsonWriter& json, const EndpointDescription& description);

// Approves `version` of `model` with a note (1 to 1,000 characters of UTF-8 text without control
// characters), or withdraws the approval. PermissionDenied without `may_administer`.
struct ApprovalRequest {
  std::string model;
  std::int64_t version = 0;
  std::string note;
  bool revoke = false;
};
Result<registry::ModelVersion> set_approval(registry::Registry& registry, const ApprovalRequest& request,
                                            const Caller& caller);

struct RetireOutcome {
  std::string reference;  // NAME@VERSION
  // Endpoints whose rollback target routed to it: they no longer roll back.
  std::vector<std::string> rollback_targets_dropped;
};
// Takes a version out of service (registry::ModelStore::retire's rules).
Result<RetireOutcome> retire(registry::Registry& registry, const std::string& model, std::int64_t version,
                             const Caller& caller);

// Description, owner and tags of a model (`version` nullopt) or of one version
// (registry::ModelStore::annotate's rules).
Status annotate(registry::Registry& registry, const std::string& model, std::optional<std::int64_t> version,
                const registry::Annotations& annotations, const Caller& caller);

// API tokens for `slipway serve --auth`: creating and revoking them is an admin act
// (PermissionDenied otherwise). A name is 1 to 128 characters of text without control
// characters; the role predict, read, deploy or admin. The secret is in the answer only.
Result<registry::NewToken> create_token(registry::Registry& registry, const std::string& name, const std::string& role,
                                        const Caller& caller);
Status revoke_token(registry::Registry& registry, const std::string& id, const Caller& caller);

// Ground truth for a model's predictions, by the id its requests carry (what performance
// monitoring joins). Ids and labels are 1 to 1,024 bytes of text; at most 100,000 a call.
struct LabelsOutcome {
  std::size_t recorded = 0;  // pairs stored
  std::size_t added = 0;     // of which new ids (the rest replaced a label)
  std::size_t skipped = 0;   // rows without an id or a label
};
Result<LabelsOutcome> record_labels(registry::Registry& registry, const std::string& model,
                                    const std::vector<std::pair<std::string, std::string>>& labels,
                                    const Caller& caller);
// The same from a CSV or JSON Lines file's `id_column` and `label_column` (two different columns);
// rows without either are skipped and counted.
Result<LabelsOutcome> ingest_labels_file(registry::Registry& registry, const std::string& model,
                                         const std::string& path, const std::string& id_column,
                                         const std::string& label_column, const Caller& caller);

// Stores `bundle` as an artifact and registers it as the next version of `model` (no run: what
// `slipway optimize --register` does with each candidate it measured).
Result<registry::ModelVersion> register_bundle(registry::Registry& registry, const std::string& model,
                                               const model::Bundle& bundle, const Caller& caller);

// Points `alias` of the model at `version` (moving it when it pointed elsewhere).
Status set_alias(registry::Registry& registry, const std::string& model, const std::string& alias, std::int64_t version,
                 const Caller& caller);

// A model made elsewhere, imported: an XGBoost JSON model or an ONNX model (MLP or trees)
// becomes a bundle; a GGUF LLM is checked as a server would check it and stored as it is.
struct ImportRequest {
  std::string format;      // xgboost, onnx or gguf
  std::string model_path;  // the file
  // A CSV whose header names the inputs, the target column left out (xgboost, onnx); empty:
  // f0, f1, ...
  std::string schema_path;
  std::string target = "label";
  std::vector<std::string> class_labels;  // onnx classifiers
  std::string register_as;                // register as the next version of this model; empty: convert only
  std::string bundle_out;                 // also write the bundle here (not gguf)
  std::string source;                     // what the import run records it came from; empty: model_path
  std::vector<std::string> input_names;   // the inputs in order, instead of schema_path
};
struct ImportOutcome {
  std::string bundle_sha256;  // of the bundle (or the GGUF file)
  std::optional<registry::ModelVersion> registered;
  std::shared_ptr<const model::Bundle> bundle;  // null for gguf
  std::size_t llm_layers = 0;                   // gguf: its shape
  std::size_t llm_context = 0;
  std::uint64_t llm_parameters = 0;
};
// Converts (or checks) the file and, with register_as, stores it under a finished run of
// experiment "imports" (its source and shape as params) and registers it; `registry` may be null
// without register_as. InvalidArgument naming the file for one that does not convert.
Result<ImportOutcome> import_model(registry::Registry* registry, const ImportRequest& request, const Caller& caller);
// Stores `bytes` under a finished run of experiment "imports" (its spec and params as given;
// `remote`: recorded for a client elsewhere) and registers them as the next version of `model`.
// A failure after the run starts marks it FAILED and registers nothing.
Result<registry::ModelVersion> register_imported_bytes(registry::Registry& registry, const std::string& model,
                                                       std::span<const std::byte> bytes, const std::string& spec,
                                                       const std::map<std::string, std::string>& params, bool remote,
                                                       const Caller& caller);

// A model file a client uploaded (the management API's imports): its bytes and the sha256 the
// client sent with them. Checked against the hash first (InvalidArgument, nothing stored), then
// written to a scratch file of the workspace's tmp/ folder (removed after) and imported as
// `import_model` does; the import run records "upload sha256:HEX" as its source.
struct UploadedImport {
  std::string format;  // xgboost, onnx or gguf
  std::string_view bytes;
  std::string expected_sha256;
  std::vector<std::string> input_names;  // xgboost, onnx: the inputs in order; empty: f0, f1, ...
  std::string target = "label";
  std::vector<std::string> class_labels;
  std::string register_as;
};
Result<ImportOutcome> import_uploaded_model(registry::Registry& registry, const UploadedImport& upload,
                                            const Caller& caller);

struct RegisteredFile {
  registry::ModelVersion version;
  bool created = true;  // false: the model's version with these bytes already (a retried upload)
};
// Registers a bundle file's bytes (a .slip file, as `slipway train --bundle-out` writes) as the
// next version of `model`, when their sha256 is `expected_sha256` and they load as a bundle this
// build can serve (InvalidArgument naming the problem otherwise; nothing stored). Bytes the model
// already has as a version return that version (created false), so a client may retry. The
// bytes are recorded as an import run ("imports" experiment) for lineage.
Result<RegisteredFile> register_bundle_bytes(registry::Registry& registry, const std::string& model,
                                             std::string_view bytes, const std::string& expected_sha256,
                                             const Caller& caller);

// ---------------------------------------------------------------------------------------------
// Tracking for training code that runs elsewhere, as MLflow's tracking server does: a PyTorch
// script starts a run, logs params, metrics with steps, tags and files, and ends it; `slipway
// runs` and `slipway show` list it beside the runs Slipway trained. What a client sends is
// bounded per call (kTrackingLimits), and every call may be retried: a start with the same
// client-chosen id, the same params, the same file and the same end are accepted again. Only runs
// started this way take logs, files and an end (FailedPrecondition for a run Slipway trained or
// imported itself: a client that may record runs cannot rewrite another's history).

struct TrackingLimits {
  std::size_t metrics_per_call = 1000;
  std::size_t params_per_call = 100;
  std::size_t tags_per_call = 100;
  std::size_t key_bytes = 250;           // params, metrics and tags: letters, digits, _ - . / and space
  std::size_t param_value_bytes = 6000;  // MLflow's limits
  std::size_t tag_value_bytes = 5000;
  std::size_t file_path_bytes = 256;  // a relative path: no "..", no leading '/'
};
inline constexpr TrackingLimits kTrackingLimits{};

struct TrackedRunStart {
  std::string experiment = "default";
  // Chosen by the client (32 lowercase hex digits) so that a retried start finds the run it made;
  // empty: a new id.
  std::string run_id;
  std::map<std::string, std::string> params;
  std::map<std::string, std::string> tags;
};
struct TrackedRun {
  registry::RunRecord run;
  bool created = true;  // false when `run_id` named a run this start made before (a retry)
};
// Starts a RUNNING run recorded remotely (no local process owns it). A start that names an
// existing run of the same experiment returns it (created false); another experiment is
// AlreadyExists. InvalidArgument for a bad name, key or value (nothing stored).
Result<TrackedRun> start_tracked_run(registry::Registry& registry, const TrackedRunStart& start, const Caller& caller);

struct TrackingBatch {
  std::map<std::string, std::string> params;
  std::vector<registry::MetricRecord> metrics;  // key, value (finite), step (0 to 2^53), timestamp_ms (0: now)
  std::map<std::string, std::string> tags;
};
// Logs a batch to a RUNNING run (tags to any run): checked whole first (InvalidArgument naming
// the first problem, nothing stored), then params (a param keeps its first value), metrics and
// tags, each in one transaction.
Status log_to_run(registry::Registry& registry, const std::string& run_id, const TrackingBatch& batch,
                  const Caller& caller);

// Stores `bytes` as the run's file `path` when their sha256 is `expected_sha256` (InvalidArgument
// naming both otherwise, nothing stored): written to the artifact store (temporary file, fsync,
// rename), then recorded with the run.
Result<registry::RunArtifact> store_run_file(registry::Registry& registry, const std::string& run_id,
                                             const std::string& path, std::string_view bytes,
                                             const std::string& expected_sha256, const Caller& caller);

// Ends a RUNNING run as FINISHED or FAILED; ending it again the same way is accepted.
Result<registry::RunRecord> end_tracked_run(registry::Registry& registry, const std::string& run_id, bool succeeded,
                                            const Caller& caller);

// ---------------------------------------------------------------------------------------------
// Monitoring (monitoring.cpp): skew and drift of a model's traffic (its request log) or of a
// file, against the training distribution its bundle carries, another file or the window before;
// its performance once labels arrive; and the alert states that follow from both.

struct MonitorRequest {
  std::string reference;  // NAME[@VERSION|@ALIAS], an endpoint (its main version), or a bundle file (with data)
  std::string data;       // the current rows from this file instead of the request log
  std::int64_t window_ms = 3'600'000;
  std::string window = "1h";          // the window as given, for the report's words
  std::string baseline = "training";  // training, previous-window, or a file
  std::string request_log_dir;        // empty: <workspace>/request_log
  monitor::DriftThresholds thresholds;
  std::string id_column;  // joins ingested labels by this input: the performance too
  std::string slice;      // with id_column: the performance per value of this input too
  bool history = false;   // over the request log: the drift of each twelfth of the window
};

struct MonitorReport {
  std::string model;       // "churn@3", with "(main version of endpoint E)" when watched through one
  std::string model_name;  // the registered model (empty for a bundle file): whose labels and alerts
  std::string current;     // what was compared, in words
  std::string reference;
  monitor::DriftReport drift;
  monitor::DriftThresholds thresholds;
  std::optional<monitor::Performance> performance;  // with id_column
  std::map<std::string, double> training_metrics;   // the bundle's metrics (test_* among them)
  std::string slice_column;
  std::vector<monitor::DriftPoint> history;     // with request.history, over the request log
  std::shared_ptr<const model::Bundle> bundle;  // the version watched (its profile draws the page)
};

// The report: reads the request log (or the file), bins it in the bundle's training profile and
// compares. InvalidArgument for a bad threshold, window or option pair; FailedPrecondition for a
// bundle without a training profile or no rows to compare.
Result<MonitorReport> monitoring_report(registry::Registry& registry, const MonitorRequest& request);
// {"model", "current", "reference", "distance_threshold", "p_value_threshold", "inputs": [...],
// "prediction", "drifted_inputs", "drifted_share", "attribution_drifted_inputs", "performance"}
// (no closing brace: the caller may add keys and closes the object).
void write_monitor_report_json(JsonWriter& json, const MonitorReport& report);

// "auc=0.7": a metric and its limit.
struct MetricLimit {
  std::string metric;
  double limit = 0;
};
Result<MetricLimit> parse_metric_limit(const std::string& text);

struct AlertRules {
  std::vector<MetricLimit> min_metrics;       // alert below
  std::vector<MetricLimit> max_metrics;       // alert above
  std::vector<MetricLimit> max_metric_drops;  // alert when this much worse than the bundle's test value
  std::string webhook;                        // POST the alerts that changed here (JSON)
};
struct AlertOutcome {
  std::vector<registry::AlertState> states;   // every alert's state now
  std::vector<registry::AlertState> changes;  // those that fired or resolved since the last record
  std::string webhook_status;                 // what the webhook answered
};
// The report's alert states (each input and the prediction, drifted or not, and each metric
// rule), recorded for /metrics after the webhook (when given) took the changes: a webhook that
// does not answer 2xx is Unavailable and nothing is recorded, so the next run tells it again.
Result<AlertOutcome> record_alerts(registry::Registry& registry, const MonitorReport& report, const AlertRules& rules,
                                   const Caller& caller);
// [{"subject", "state": "firing"|"resolved", "value"}]
void write_alert_changes_json(JsonWriter& json, const std::vector<registry::AlertState>& changes);

// ---------------------------------------------------------------------------------------------
// Batch scoring (batch_jobs.cpp) and what optimize and serving configs left in the registry.

// Runs (or resumes) a batch job (batch::run_job) and records it for lineage in `registry` when
// given (best effort: the job's folder holds its whole record; a failure to record is logged).
// A job refused before it started is not recorded; a job that failed is.
Result<batch::JobOutcome> run_batch_job(registry::Registry* registry, const LoadedReference& model,
                                        const batch::JobSpec& spec, const batch::JobProgress& progress,
                                        const Caller& caller);
// The job's manifest in `out`, a "running" one that no process runs as "interrupted".
Result<batch::JobManifest> batch_job_status(const std::string& out);

// The optimization record (model::Manifest::optimization) of each version, in order: how
// `slipway optimize` made it; empty for a version optimize did not make, or whose bundle cannot
// be read (`slipway verify` reports those). Each bundle is loaded: the record is in its manifest.
std::vector<std::map<std::string, std::string>> optimization_records(
    registry::Registry& registry, const std::string& model, const std::vector<registry::ModelVersion>& versions);

// ---------------------------------------------------------------------------------------------
// Workspace upkeep (maintenance.cpp): `slipway verify` and `slipway gc`, and their /api routes.

// Checks the workspace (registry::verify_workspace); `repair` fixes what can be fixed and needs a
// caller that may administer (PermissionDenied otherwise) and a registry opened for writing.
Result<registry::VerifyReport> verify_workspace(registry::Registry& registry, bool repair, const Caller& caller);
// The report as `slipway verify --json` prints it; `home` is left out when empty.
void write_verify_report_json(JsonWriter& json, std::string_view home, const registry::VerifyReport& report,
                              bool repair);
// Lists (or with `apply` deletes) artifacts nothing names, older than `min_age_ms`
// (registry::collect_garbage); `apply` needs a caller that may administer.
Result<registry::GcReport> collect_garbage(registry::Registry& registry, bool apply, std::int64_t min_age_ms,
                                           const Caller& caller);
void write_gc_report_json(JsonWriter& json, const registry::GcReport& report);

// A model's serving config: what is stored (serve's keys) and what applies (stored over defaults).
struct ServingConfigView {
  std::map<std::string, std::string> stored;
  std::map<std::string, std::string> effective;
};
Result<ServingConfigView> serving_config(registry::Registry& registry, const std::string& model);
// Sets `given` over the stored config (over nothing with `reset`), checked whole by the server's
// rules so that a stored config always applies; NotFound for a model that has no version.
Result<ServingConfigView> set_serving_config(registry::Registry& registry, const std::string& model,
                                             const std::map<std::string, std::string>& given, bool reset,
                                             const Caller& caller);

}  // namespace slipway::pipeline
