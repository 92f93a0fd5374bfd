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

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/eval.h"
#include "slipway/model.h"
#include "slipway/registry.h"
#include "slipway/train.h"

namespace slipway::pipeline {

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
  std::vector<std::string> ignore;  // columns that are not features
  std::string register_as;          // register the bundle as a new version of this model
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
};

// Reads a YAML spec into `spec`, leaving fields the file does not set untouched. Relative paths
// in it are relative to the spec file's folder. Unknown keys are refused with file:line.
Status load_spec(const std::string& path, TrainSpec& spec);
// The same from YAML text (e.g. a run's stored spec); `source` names it in errors.
Status load_spec_text(const std::string& yaml, const std::string& source, TrainSpec& spec);
// The spec as YAML with absolute paths: what a run stores so that it can be replayed.
std::string spec_yaml(const TrainSpec& spec);
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

// A model loaded for use: from a bundle file or from the registry.
struct LoadedReference {
  std::shared_ptr<const model::Bundle> bundle;
  std::string description;  // "name@version" or the bundle file's path
  std::string sha256;       // the bundle's identity
};

// True when `reference` names a bundle file (it contains '/', ends in .slip, or is an existing
// file) rather than NAME[@VERSION|@ALIAS]; only the latter need a registry.
bool names_bundle_file(const std::string& reference);

// Loads a bundle file, or resolves NAME@VERSION, NAME@ALIAS or NAME (latest) in `registry`
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
Result<Reproduction> reproduce_run(registry::Registry& registry, const std::string& run_id);

// ---------------------------------------------------------------------------------------------
// Lineage: the workspace as a graph in the ML Metadata model's terms. Artifacts (data sets by
// content fingerprint, bundles, model versions, gate reports), executions (train and import runs,
// optimize, batch scoring jobs, retrainings), contexts (experiments, aliases, endpoints), and edges for the events
// between them (an execution's inputs and outputs, a version's bundle, what points or routes to a version).

struct LineageNode {
  std::string id;    // "data:<fingerprint>", "run:<id>", "bundle:<sha256>", "version:<model>@<n>",
                     // "alias:<model>@<alias>", "endpoint:<name>", "gate:<sha256>", "experiment:<name>",
                     // "batch:<job key>", "retrain:<id>"
  std::string type;  // data, run, bundle, version, alias, endpoint, gate, experiment, batch, retrain
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

}  // namespace slipway::pipeline
