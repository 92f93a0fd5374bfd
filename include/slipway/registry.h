// slipway/registry.h — the workspace: metadata (experiments, runs, params, metrics, model
// versions, aliases, serving configs, API tokens, hyperparameter studies, audit log) in a metadata store, bundles in a
// content-addressed artifact folder.
//
// `Registry` is the facade callers hold. It owns the metadata backend and the artifact store and
// hands out one store per concept: runs(), models(), serving_configs(), tokens(), audit().
//
// The metadata backend is private to this module (src/registry/metadata_backend.h): transactions
// and parameterized statements, plus the backend's numbered schema migrations. SQLite
// (`<home>/slipway.db`, WAL mode) is the embedded default and the only backend today. A PostgreSQL
// backend is one more implementation of that interface (libpq, its own DDL for the same numbered
// migrations), chosen by Registry::open; the stores and every caller stay as they are.
//
// Guarantees: every mutation is one transaction, also recorded in the audit log; writers are
// serialized, so a read-then-write (the next version number, say) never races another writer.
// Artifacts are written to a temporary file, fsynced and renamed, and never rewritten. A crash at
// any point leaves no half-written row and no partial artifact; at worst an artifact that no row
// refers to (`verify_workspace` lists those).
//
// Schema: migrations are numbered; each is applied once, in its own transaction, and recorded in
// the `schema_migrations` table (version, name, applied_ms). Opening a workspace for writing
// applies the pending ones; opening it read-only applies none and fails if any is pending.
//
// Threads: a Registry and its stores may be used from any thread; one connection serves them,
// behind a mutex. Several processes may open one workspace at once (SQLite locking).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "slipway/core.h"

namespace slipway::registry {

struct MetricRecord {
  std::string key;
  double value = 0.0;
  std::int64_t step = 0;
  std::int64_t timestamp_ms = 0;
};

// The process that owns a RUNNING run, recorded when the run starts or resumes, so that
// `verify_workspace` can tell a run whose process died from one still training. pid 0: not
// recorded (runs started before schema version 2).
struct RunOwner {
  std::int64_t pid = 0;
  std::int64_t start_ticks = 0;  // the process's start time after boot (/proc/PID/stat): a reused pid differs
  std::string host;              // gethostname()
  std::string boot_id;           // /proc/sys/kernel/random/boot_id: changes when the machine restarts
  std::string pid_namespace;     // /proc/self/ns/pid: pids compare only within one namespace

  bool operator==(const RunOwner&) const = default;
};

// A file a run recorded (the tracking API): its bytes are an artifact in the store.
struct RunArtifact {
  std::string path;  // the name the run gave it, such as "model.pt" or "plots/loss.png"
  std::string sha256;
  std::int64_t size_bytes = 0;
  std::int64_t created_ms = 0;
};

struct RunRecord {
  std::string run_id;
  std::string experiment;
  // RUNNING, FINISHED, FAILED, or INTERRUPTED: its process died while it was RUNNING (marked by
  // `verify_workspace` with repair). FAILED and INTERRUPTED runs can be resumed (RunStore::reopen).
  std::string status;
  std::int64_t start_ms = 0;
  std::int64_t end_ms = 0;  // 0 while running
  std::string code_version;
  std::string data_fingerprint;
  std::string spec;           // the resolved spec, as YAML
  std::string bundle_sha256;  // empty when the run produced no bundle
  std::map<std::string, std::string> params;
  std::vector<MetricRecord> metrics;  // latest value per key (full history in the store)
  std::map<std::string, std::string> tags;
  std::vector<RunArtifact> artifacts;  // by path
  RunOwner owner;                      // the process that last started or resumed it (pid 0: none here)

  // An import (`slipway import`), not a training run: it has no spec to train again.
  bool imported() const { return params.count("source") != 0 || spec.starts_with("import"); }
};

struct CheckpointRecord {
  std::int64_t step = 0;  // e.g. boosting rounds done
  std::string bundle_sha256;
  std::int64_t created_ms = 0;
};

// Who approved a version for production, when, and why.
struct Approval {
  std::string approver;  // the OS user of the command, or the API token's name
  std::string note;
  std::int64_t approved_ms = 0;
};

struct ModelVersion {
  std::string model;
  std::int64_t version = 0;
  std::string bundle_sha256;
  std::string run_id;
  std::string creator;
  std::int64_t created_ms = 0;
  std::vector<std::string> aliases;
  std::string description;
  std::map<std::string, std::string> tags;
  std::optional<Approval> approval;
  std::int64_t retired_ms = 0;  // 0 while in service
};

struct ModelSummary {
  std::string name;
  std::int64_t created_ms = 0;
  std::int64_t latest_version = 0;
  std::int64_t version_count = 0;
  std::map<std::string, std::int64_t> aliases;
  std::string description;
  std::string owner;
  std::map<std::string, std::string> tags;
};

// An evaluation gate's result (`slipway gate`): a candidate version held to thresholds against a
// baseline version on a data set; the full report is an artifact (JSON).
struct GateRecord {
  std::string model;
  std::int64_t version = 0;
  std::string baseline_model;
  std::int64_t baseline_version = 0;
  std::string data_fingerprint;
  std::string metric;
  std::string criteria;  // "min=0.8,max_drop=0.005", as given
  bool passed = false;
  std::string report_sha256;
  std::int64_t created_ms = 0;
  std::string actor;
};

// A change to a model's or a version's annotations; unset fields stay as they are.
struct Annotations {
  std::optional<std::string> description;
  std::optional<std::string> owner;  // models only
  std::map<std::string, std::string> set_tags;
  std::vector<std::string> remove_tags;
};

struct NewRun {
  std::string experiment = "default";
  std::string code_version;
  std::string data_fingerprint;
  std::string spec;
  std::map<std::string, std::string> params;
  std::map<std::string, std::string> tags;
  // The run's id, chosen by the client so that a retried start is recognised (32 lowercase hex
  // digits); empty: a new random one.
  std::string run_id;
  // Recorded by a process elsewhere (the tracking API): no owner is recorded, so `verify` never
  // takes the run for one whose process died here.
  bool remote = false;
};

// A page of runs, newest first (by start time, then by insertion), filtered.
struct RunQuery {
  std::string experiment;  // empty: every experiment
  std::string status;      // empty: any
  std::size_t page_size = 100;
  // Where the previous page ended (RunPage::next_page_token); empty: the newest. A page starts
  // strictly after it, so runs started meanwhile never shift or repeat what a client pages
  // through.
  std::string page_token;
};
struct RunPage {
  std::vector<RunRecord> runs;
  std::string next_page_token;  // empty on the last page
};

// A step (a train or an eval) that may be reused instead of run again.
struct CachedStep {
  std::string kind;    // "train" or "eval"
  std::string key;     // sha256 of the step's inputs
  std::string run_id;  // the run that produced it (train); empty for eval
  std::string result;  // what the step returned, serialized by its caller
  std::int64_t created_ms = 0;
};

// A batch scoring job (slipway batch), recorded for lineage; its folder holds the whole record.
struct BatchJobRecord {
  std::string key;
  std::string model;  // "name@version" or a bundle file
  std::string bundle_sha256;
  std::string input;
  std::string input_sha256;
  std::string out;
  std::string state;  // running, finished, failed
  std::int64_t rows = 0, scored = 0, bad = 0;
  std::int64_t started_ms = 0, updated_ms = 0;
  std::string actor;
};

// The state of one monitoring alert of a model: "input:NAME", "prediction" or "metric:NAME".
struct AlertState {
  std::string model;
  std::string subject;
  bool firing = false;
  double value = 0;  // the distance, or the metric
  std::int64_t changed_ms = 0;
};

// A retraining (`slipway retrain`): a policy's training run on new data, its evaluation gate
// against the version it would replace, and what was done with the candidate. Recorded for
// lineage and for the policy's triggers (its cooldown, and which alerts it already acted on).
struct RetrainingRecord {
  std::int64_t id = 0;  // assigned by RetrainingStore::start
  std::string model;
  std::string reason;  // why it ran: the alert or schedule that fired, or "forced"
  // running, unchanged (the rows and baseline of an earlier retraining: nothing trained), failed
  // (it could not train or gate), rejected (the gate failed), registered, deployed, deploy_failed
  // (registered, but the deploy the policy asks for was refused), interrupted (its process died;
  // found by the next retraining of the model)
  std::string state;
  std::int64_t baseline_version = 0;
  std::string data_fingerprint;
  std::string data_sha256;  // the training data, when it is an artifact (the labelled request log)
  std::string run_id;
  std::int64_t candidate_version = 0;  // 0: none registered
  std::string gate_report_sha256;
  std::string deployed;  // "ENDPOINT: full|canary P%|rollout STEPS"; empty when not deployed
  std::string message;   // why it failed, or why a passing candidate was not deployed
  std::int64_t started_ms = 0, finished_ms = 0;
  std::string actor;
};

// A hyperparameter study (`slipway tune`): its definition, as the tune operation writes it, and
// its trials. The store keeps what it is given; pipeline interprets it.
struct StudyRecord {
  std::string name;               // validate_model_name's rules
  std::string definition;         // the space, objectives, sampler and training spec (YAML)
  std::string definition_sha256;  // what a study reused under the same name must match
  std::int64_t created_ms = 0;
  std::string actor;
};

struct StudySummary {
  StudyRecord study;
  std::map<std::string, std::int64_t> trials_by_state;  // running, complete, pruned, failed
  std::int64_t updated_ms = 0;                          // the latest trial's start or end
};

// One trial of a study: a training run with sampled parameters.
struct StudyTrial {
  std::int64_t number = 0;  // 0, 1, 2, … in the order trials were claimed
  std::string state;        // running, complete, pruned, failed
  std::map<std::string, std::string> params;
  // What was measured: the objectives and the constraints' quantities (auc, p95_us, bundle_kb,
  // ...); NaN is stored as missing and read back as NaN.
  std::map<std::string, double> measures;
  std::map<std::int64_t, double> intermediate;  // step -> the value the trainer reported
  std::map<std::int64_t, double> rung_values;   // successive halving's record, step -> value
  std::string run_id;                           // empty until the run starts
  std::string message;                          // why it failed or was pruned
  std::int64_t retry_of = -1;                   // the interrupted trial this one runs again
  RunOwner owner;                               // the process working it
  std::int64_t started_ms = 0, finished_ms = 0;
};

// What `StudyStore::claim_trial`'s chooser asks for: the next trial's parameters.
struct TrialClaim {
  std::map<std::string, std::string> params;
  std::int64_t retry_of = -1;
};

// A row that names an artifact. `verify_workspace` checks each is stored; a stored artifact that
// no row names is an orphan.
struct ArtifactReference {
  std::string sha256;
  std::string referrer;  // "model churn@2", "run 3f2a… bundle", "run 3f2a… checkpoint 10"
};

// Model and alias names: a letter or digit, then letters, digits, '_', '-', '.'; at most 128.
// Aliases also may not be all digits (that reads as a version) nor "latest".
Status validate_model_name(const std::string& name);
Status validate_alias_name(const std::string& alias);
// Experiment names: 1 to 128 bytes of UTF-8 text without control characters (no newlines).
Status validate_experiment_name(const std::string& experiment);

// API tokens for `slipway serve --auth`. Only the sha256 of a token is stored; the secret is
// shown once, when it is created.
struct TokenRecord {
  std::string id;
  std::string name;
  std::string role;  // predict, read, deploy or admin
  std::string token_sha256;
  std::int64_t created_ms = 0;
  std::int64_t revoked_ms = 0;  // 0 while active
};
struct AuditEntry {
  std::int64_t id = 0;  // rises with each entry
  std::int64_t time_ms = 0;
  std::string actor;
  std::string action;  // model.register, alias.set, endpoint.deploy, rollout.rollback, ...
  std::string detail;
};

// Which entries: those about `model` (its versions, aliases, approvals, and endpoint changes
// that route to it), from `since_ms`, the newest `limit`, oldest first; or, with `newest_first`,
// the newest `limit` before entry `before_id` (0: none), newest first: a page of a listing that
// entries written meanwhile never shift.
struct AuditFilter {
  std::string model;
  std::int64_t since_ms = 0;
  std::size_t limit = 0;  // 0: all
  bool newest_first = false;
  std::int64_t before_id = 0;
};

struct NewToken {
  std::string id;
  std::string secret;  // "slw_<id>_<64 hex>"
};
// InvalidArgument unless `role` is predict, read, deploy or admin.
Status validate_token_role(const std::string& role);

// What a model reference selects: an explicit version (NAME@3), an alias (NAME@staging), the
// newest version still in service (NAME@latest), or, for a bare NAME, the version the
// `production` alias points at, else the newest in service. The CLI, the server, batch, monitor
// and retrain all take a bare NAME by this rule.
struct VersionSelector {
  std::optional<std::int64_t> version;
  std::string alias;    // when not a version; empty for a bare NAME or NAME@latest
  bool latest = false;  // NAME@latest
};
inline constexpr std::string_view kProductionAlias = "production";
// Parses "NAME", "NAME@3", "NAME@production" into the name and selector.
Result<std::pair<std::string, VersionSelector>> parse_model_reference(const std::string& reference);
// The entry of `versions` (ascending) that `selector` selects by the rule above, or null.
const ModelVersion* select_version(const std::vector<ModelVersion>& versions, const VersionSelector& selector);

// Content-addressed bundle storage at <root>/sha256/<2 hex>/<62 hex>.
class ArtifactStore {
 public:
  // A read-only store refuses put() and quarantine() (FailedPrecondition).
  explicit ArtifactStore(std::string root, bool read_only = false);
  // Stores `bytes` (no-op when already present) and returns their sha256.
  Result<std::string> put(std::span<const std::byte> bytes);
  std::string path_for(const std::string& sha256) const;
  bool contains(const std::string& sha256) const;
  // The hashes of every stored artifact (used by consistency checks).
  std::vector<std::string> list() const;
  // Moves a stored artifact whose bytes do not match its name to <root>/quarantine/, so the
  // right bytes can be stored again; returns the new path. NotFound when it is not stored.
  Result<std::string> quarantine(const std::string& sha256);

 private:
  std::string root_;
  bool read_only_ = false;
};

// Shared state of the stores (the backend, the artifact store, the acting user); private to the
// module (src/registry/store_context.h).
struct StoreContext;

// Every call is one transaction. Errors: NotFound for an unknown run; FailedPrecondition for a
// call the run's status does not allow, or on a read-only registry for any mutation;
// Unavailable when another process holds the write lock past the busy timeout (10 s).
class RunStore {
 public:
  // Records a RUNNING run owned by the calling process (none with `remote`); returns its id (32
  // hex digits). AlreadyExists when `run.run_id` names a run that exists.
  Result<std::string> start(const NewRun& run);
  // Adds params to a RUNNING run. A param keeps its first value: the same value again is
  // accepted (a retry), another is FailedPrecondition, naming it.
  Status log_params(const std::string& run_id, const std::map<std::string, std::string>& params);
  // Sets tags of a run in any state (a later value replaces the earlier).
  Status set_tags(const std::string& run_id, const std::map<std::string, std::string>& tags);
  // Records a file of a RUNNING run, whose bytes are already in the artifact store
  // (FailedPrecondition otherwise). The same path with the same bytes again is accepted; with
  // other bytes it is AlreadyExists (a run's files do not change once recorded).
  Status add_artifact(const std::string& run_id, const RunArtifact& artifact);
  // Runs page by page; InvalidArgument for a page token this store did not give.
  Result<RunPage> query(const RunQuery& query);
  // Appends metric values at `step`. FailedPrecondition if the run is not RUNNING.
  Status log_metrics(const std::string& run_id, const std::vector<std::pair<std::string, double>>& metrics,
                     std::int64_t step = 0);
  // Appends many (key, step, value) records in one transaction: a metric's history, e.g. per
  // boosting round. Timestamps of 0 become now.
  Status log_metric_steps(const std::string& run_id, const std::vector<MetricRecord>& records);
  // Every metric record of the run, by key, then step.
  Result<std::vector<MetricRecord>> metric_history(const std::string& run_id);
  // Records a checkpoint (a bundle already in the artifact store) of a RUNNING run.
  Status record_checkpoint(const std::string& run_id, std::int64_t step, const std::string& bundle_sha256);
  // The run's checkpoint with the highest step; nullopt when it has none.
  Result<std::optional<CheckpointRecord>> latest_checkpoint(const std::string& run_id);
  // Marks a RUNNING (its process killed), INTERRUPTED or FAILED run RUNNING again, owned by the
  // calling process, to resume it. FailedPrecondition for a FINISHED run.
  Status reopen(const std::string& run_id);
  // Ends a RUNNING run as FINISHED or FAILED, recording the bundle it produced (may be empty).
  Status finish(const std::string& run_id, bool succeeded, const std::string& bundle_sha256);
  // Marks a RUNNING run INTERRUPTED (its process is gone), recording `reason` in the audit log.
  // FailedPrecondition, changing nothing, when the run is no longer RUNNING or no longer owned by
  // `owner` (it was resumed meanwhile).
  Status mark_interrupted(const std::string& run_id, const RunOwner& owner, const std::string& reason);
  Result<RunRecord> get(const std::string& run_id);
  // Most recent first.
  Result<std::vector<RunRecord>> list(std::size_t limit);
  // Every RUNNING run, oldest first.
  Result<std::vector<RunRecord>> list_running();
  // The bundle of every run that has one, and every checkpoint.
  Result<std::vector<ArtifactReference>> artifact_references();

  // Batch jobs: recorded (again) by key as they start and end; listed oldest first.
  Status record_batch_job(const BatchJobRecord& job);
  Result<std::vector<BatchJobRecord>> batch_jobs();

  // The step cache: a step's result under a key made of everything its output depends on. A
  // later record under the same key replaces the earlier one.
  Status record_cached_step(const CachedStep& step);
  Result<std::optional<CachedStep>> cached_step(const std::string& kind, const std::string& key);

 private:
  friend class Registry;
  explicit RunStore(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

// Models, versions and aliases. Errors as RunStore's.
class ModelStore {
 public:
  // Registers the next version of `model` (created on its first version). The bundle must
  // already be in the artifact store (FailedPrecondition otherwise).
  Result<ModelVersion> register_version(const std::string& model, const std::string& bundle_sha256,
                                        const std::string& run_id);
  // Every model, by name.
  Result<std::vector<ModelSummary>> list();
  // Ascending version order. NotFound for an unknown model.
  Result<std::vector<ModelVersion>> list_versions(const std::string& model);
  Result<ModelVersion> resolve(const std::string& model, const VersionSelector& selector);
  // Points `alias` at `version` (moving it if it pointed elsewhere).
  Status set_alias(const std::string& model, const std::string& alias, std::int64_t version);
  // Description, owner and tags of a model (`version` nullopt) or of one version. Tag keys: 1 to
  // 128 letters, digits, '_', '-', '.', '/'; values and descriptions at most 8 KiB of text.
  Status annotate(const std::string& model, std::optional<std::int64_t> version, const Annotations& annotations);
  // Records that the acting user approves `version` (replacing an earlier approval of it), with a
  // note; `revoke` withdraws it. Endpoints that require approval refuse unapproved versions.
  Status approve(const std::string& model, std::int64_t version, const std::string& note);
  Status revoke_approval(const std::string& model, std::int64_t version);
  // Ground truth for `model`'s predictions, by the id its requests carry: each (id, label) stored,
  // a later label for an id replacing the earlier, in one transaction. NotFound for an unknown
  // model; InvalidArgument for an empty id. Returns how many were new.
  Result<std::size_t> record_labels(const std::string& model,
                                    const std::vector<std::pair<std::string, std::string>>& labels);
  // Every label of `model`, by id.
  Result<std::unordered_map<std::string, std::string>> labels(const std::string& model);
  // Alert states: stored as given (changed_ms kept where the state did not change), and every
  // model's listed, by model and subject.
  Status record_alerts(const std::vector<AlertState>& states);
  Result<std::vector<AlertState>> alerts();
  // Takes a version out of service, keeping it (and its bundle) for lineage: servers no longer
  // serve it, deploys refuse it, and NAME alone resolves to the newest version still in service.
  // FailedPrecondition, naming it, while an alias points to it or an endpoint routes, mirrors or
  // rolls out to it. An endpoint whose rollback target routes to it loses that target in the same
  // transaction (a rollback to a retired version would answer 409 to every client): their names
  // are returned, and named in the audit entry.
  Result<std::vector<std::string>> retire(const std::string& model, std::int64_t version);
  // Records a gate's result (created_ms and actor are filled in); both versions must exist and the
  // report must be in the artifact store.
  Status record_gate(const GateRecord& record);
  // The gate results of one version, as candidate, newest first.
  Result<std::vector<GateRecord>> gate_results(const std::string& model, std::int64_t version);
  // The bundle of every version.
  Result<std::vector<ArtifactReference>> artifact_references();

 private:
  friend class Registry;
  explicit ModelStore(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

// Serving configuration per model (`slipway serving-config`): key/value pairs that serve
// validates.
class ServingConfigStore {
 public:
  // `replace` drops the keys not given; otherwise the given keys are updated.
  Status set(const std::string& model, const std::map<std::string, std::string>& values, bool replace);
  // Empty when the model has none.
  Result<std::map<std::string, std::string>> get(const std::string& model);

 private:
  friend class Registry;
  explicit ServingConfigStore(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

// Retraining policies (key/value rows that pipeline::RetrainPolicy validates) and the record of
// each retraining. Errors as RunStore's.
class RetrainingStore {
 public:
  // Stores `model`'s policy: these keys and values, replacing what it had. NotFound for an unknown
  // model.
  Status set_policy(const std::string& model, const std::map<std::string, std::string>& values);
  // Empty when the model has none.
  Result<std::map<std::string, std::string>> policy(const std::string& model);
  // NotFound when the model has none.
  Status remove_policy(const std::string& model);
  // The models that have a policy, by name.
  Result<std::vector<std::string>> models_with_policies();
  // Records a retraining in state `running`; returns its id (started_ms and actor are filled in).
  Result<std::int64_t> start(const RetrainingRecord& record);
  // Stores the record's progress or outcome (state, baseline, data, run, candidate, gate report,
  // deployment, message); finished_ms is set once the state is no longer `running`. NotFound for
  // an unknown id.
  Status update(const RetrainingRecord& record);
  // `running` records of `model` become `interrupted`: the caller holds the model's retraining
  // lock, so no process is running them. Returns how many.
  Result<std::size_t> mark_interrupted(const std::string& model);
  // Newest first; every model's when `model` is empty.
  Result<std::vector<RetrainingRecord>> list(const std::string& model, std::size_t limit);
  // The gate reports and training data the records name.
  Result<std::vector<ArtifactReference>> artifact_references();

 private:
  friend class Registry;
  explicit RetrainingStore(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

// Hyperparameter studies and their trials. Several processes may work one study: a trial is
// claimed in one write transaction that reads the trials so far and numbers the new one after
// them, so none is lost or taken twice. Errors as RunStore's; NotFound for an unknown study or
// trial.
class StudyStore {
 public:
  // Records a new study; AlreadyExists when the name is taken. With `replace`, a study of that
  // name is redefined and its trials dropped (their runs stay).
  Status create(const StudyRecord& study, bool replace);
  Result<std::optional<StudyRecord>> get(const std::string& name);
  // Every study, by name.
  Result<std::vector<StudySummary>> list();
  // In one write transaction: the study's trials (by number) are passed to `choose`, which
  // returns the next trial's parameters, or nullopt when the study needs no more trials (then
  // nothing is written); the new trial is recorded `running`, owned by the calling process, and
  // returned. `choose` may be called more than once (a retried transaction): it must have no
  // effect outside its result.
  using TrialChooser = std::function<Result<std::optional<TrialClaim>>(const std::vector<StudyTrial>& trials)>;
  Result<std::optional<StudyTrial>> claim_trial(const std::string& study, const TrialChooser& choose);
  // A running trial's run, once it starts.
  Status set_trial_run(const std::string& study, std::int64_t number, const std::string& run_id);
  // A running trial's intermediate and rung values so far (replacing those stored).
  Status record_progress(const std::string& study, const StudyTrial& trial);
  // Ends a running trial: `state` complete, pruned or failed, with its measures, message and
  // intermediate values. FailedPrecondition when it is no longer running.
  Status finish_trial(const std::string& study, const StudyTrial& trial);
  // Every trial, by number.
  Result<std::vector<StudyTrial>> trials(const std::string& study);
  // Running trials whose process is gone (kill -9, a crash, a reboot) become failed, with a
  // message saying so; returns their numbers. Trials of live or unknown processes stay.
  Result<std::vector<std::int64_t>> fail_abandoned_trials(const std::string& study);

 private:
  friend class Registry;
  explicit StudyStore(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

// API tokens.
class TokenStore {
 public:
  Result<NewToken> create(const std::string& name, const std::string& role);
  // NotFound when no active token has this id.
  Status revoke(const std::string& id);
  // Oldest first.
  Result<std::vector<TokenRecord>> list();

 private:
  friend class Registry;
  explicit TokenStore(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

// An endpoint: a name clients call (/v2/models/{endpoint}/infer) that routes to pinned model
// versions by weight. Deploying keeps the configuration it replaces, so one rollback returns to it.
struct EndpointRoute {
  std::string model;
  std::int64_t version = 0;
  double percent = 0.0;  // of requests; an endpoint's routes sum to 100
  std::string reference() const { return model + "@" + std::to_string(version); }
};

struct Endpoint {
  std::string name;
  // The routes, the newest deployment first (a canary, then the version it is tested against):
  // routing gives each route a fixed slice of the key space in this order, so raising a canary's
  // share only moves keys onto it.
  std::vector<EndpointRoute> routes;
  std::vector<EndpointRoute> previous;  // what rollback returns to; empty when there is none
  std::string last_change;              // the audit action of the last routing change: endpoint.deploy, ...
  std::int64_t revision = 0;            // +1 per change
  std::string updated_by;
  std::int64_t updated_ms = 0;
  // What answers a request whose route fails or misses the deadline (marked degraded): "none"
  // (the failure is returned), "main" (the main route, for another route's failure), "previous"
  // (the main route of `previous`, the rollback target, else the main route), "cached" (the
  // last answer this endpoint gave to the same request bytes) or "constant:VALUE" (VALUE for
  // every row: a number, or a class label).
  std::string fallback = "none";
  // A route that has not answered within this many milliseconds is answered by the fallback (or
  // with 504 when there is none); 0: no deadline.
  std::int64_t deadline_ms = 0;
  std::string slo;  // the service-level objective, as `slipway optimize --slo` reads it; shown by describe
  // A version that sees a copy of shadow_percent of the requests; its answers are compared with
  // the live ones and never returned. Empty model: no shadow.
  EndpointRoute shadow;
  std::string owner;
  bool require_approval = false;  // deploys of unapproved versions are refused
  // Why the stored routes, rollback target or shadow cannot be read (empty when they can). A
  // damaged endpoint is listed with nothing to route, serves nothing, is reported by `verify`, and
  // takes only a full deploy, which replaces what it stored.
  std::string damage;
};

// Shares of an endpoint's traffic are kept to a hundredth of a percent: routing slices a key space
// of 10,000 points, so a canary, a shadow or a rollout step gets at least one of them.
inline constexpr double kSharePercentStep = 0.01;
// `percent` rounded to that resolution (99.999 -> 100, 33.333 -> 33.33, without float noise).
// InvalidArgument, naming `what` and the accepted range, unless it is finite and rounds to a share
// from 0.01 to 100 (`below_all`: to 99.99, so another route keeps a share).
Result<double> share_at_resolution(double percent, std::string_view what, bool below_all);
// 100 minus `percent` (a share at the resolution), without float noise.
double remaining_share(double percent);

// Settings of an endpoint that EndpointStore::configure changes: those given.
struct EndpointSettings {
  std::optional<std::string> owner;
  std::optional<bool> require_approval;
  std::optional<std::int64_t> deadline_ms;  // 0 removes the deadline; at most an hour
  std::optional<std::string> slo;           // checked by the caller (optimize::parse_slo); "" removes it
  std::optional<std::string> fallback;      // Endpoint::fallback's kinds
  // The version mirrored and its share (above 0, at most 100); an empty model stops mirroring.
  std::optional<EndpointRoute> shadow;
};

// InvalidArgument unless `fallback` is one of Endpoint::fallback's kinds.
Status validate_fallback(std::string_view fallback);

// When a canary step passes: each limit compares the canary with the stable version over the
// step's interval, once both have min_requests requests in it.
struct RolloutCriteria {
  double max_error_rate_increase = 0.01;  // canary's share of failed requests minus stable's
  double max_p99_ratio = 2.0;             // canary p99 / stable p99 (a difference under 1 ms passes)
  double max_divergence = 0.3;            // Jensen-Shannon distance of their score distributions
  std::int64_t min_requests = 50;
};
std::string format_criteria(const RolloutCriteria& criteria);
// "10,50,100": percentages at the share resolution, rising strictly from 0.01, ending at 100, with
// at least one step below 100 (a step of 100 alone would promote without analysis); each rounded
// to the resolution. InvalidArgument otherwise.
Result<std::vector<double>> parse_rollout_steps(std::string_view text);
// The same checks and rounding for steps given as numbers (the management API's).
Result<std::vector<double>> check_rollout_steps(std::vector<double> steps);
Result<RolloutCriteria> parse_criteria(std::string_view text);

// A canary rollout in steps: the canary's share goes through `steps` (ending at 100), one step
// an interval, while a server's analysis passes it; a failed check rolls back to the stable
// version. A server drives it (and picks it up again after a restart, from the stored step).
struct Rollout {
  std::string endpoint;
  EndpointRoute canary;  // percent: its share now
  EndpointRoute stable;
  std::vector<double> steps;
  std::int64_t interval_ms = 0;
  std::size_t step = 0;  // index into steps
  std::int64_t step_started_ms = 0;
  std::string state;       // running, promoted, rolled_back, stopped (a manual change ended it)
  std::string reason;      // why it ended
  std::string last_check;  // the last analysis, in words
  RolloutCriteria criteria;
  std::int64_t updated_ms = 0;
};

// Endpoint names: as model names (an endpoint may share its name with a model; the endpoint then
// answers that name's unversioned routes).
// Every change is one transaction, recorded in the audit log; errors as RunStore's, plus
// NotFound for an unknown endpoint or model version and FailedPrecondition for a change the
// endpoint's state does not allow.
class EndpointStore {
 public:
  // Sets each setting given, all or none (every one is checked first), in one transaction with
  // one audit entry. NotFound for an unknown endpoint or shadow version.
  Status configure(const std::string& endpoint, const EndpointSettings& settings);

  // Routes `endpoint` to `version` of `model`: all of its traffic, or with `canary_percent`
  // (0 < p < 100) that share, the rest staying on the endpoint's current main route (its largest
  // share). A canary needs the endpoint to exist; a plain deploy creates it.
  Result<Endpoint> deploy(const std::string& endpoint, const std::string& model, std::int64_t version,
                          std::optional<double> canary_percent = std::nullopt);
  // Sends all traffic to the canary (the first route). FailedPrecondition when there is none.
  Result<Endpoint> promote(const std::string& endpoint);
  // Returns to the configuration the last change replaced (which becomes the one to return to).
  // FailedPrecondition when there is none.
  Result<Endpoint> rollback(const std::string& endpoint);
  // deploy, promote and rollback stop a running rollout of the endpoint (state "stopped").

  // configure() with the fallback alone, or the shadow alone.
  Status set_fallback(const std::string& endpoint, const std::string& fallback);
  Status set_shadow(const std::string& endpoint, const std::string& model, std::int64_t version, double percent);

  // Starts a rollout of `version` of `model` on an existing endpoint: the canary at steps[0]
  // against the endpoint's main route. `steps` rise strictly and end at 100; the interval is at
  // least a second. Replaces an ended rollout; FailedPrecondition while one is running.
  Result<Rollout> start_rollout(const std::string& endpoint, const std::string& model, std::int64_t version,
                                const std::vector<double>& steps, std::int64_t interval_ms,
                                const RolloutCriteria& criteria);
  // The analysis of step `step` passed (`check` says how): the next step, or at the last the
  // canary takes all traffic (promoted). FailedPrecondition, changing nothing, unless the rollout
  // is running at that step (another server moved it first).
  Result<Rollout> advance_rollout(const std::string& endpoint, std::size_t step, const std::string& check);
  // The analysis of step `step` failed: all traffic back to the stable version (rolled_back),
  // with `reason`. FailedPrecondition as advance_rollout's.
  Result<Rollout> fail_rollout(const std::string& endpoint, std::size_t step, const std::string& reason);
  Result<std::optional<Rollout>> rollout(const std::string& endpoint);
  Result<std::vector<Rollout>> running_rollouts();
  Result<std::optional<Endpoint>> get(const std::string& endpoint);
  // By name.
  Result<std::vector<Endpoint>> list();

 private:
  friend class Registry;
  explicit EndpointStore(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

// {"name", "revision", "routes": [{"model", "version", "percent"}], "previous": [...], "updated_by",
// "updated_ms", "fallback", "shadow": {"model", "version", "percent"} or null}: what
// `slipway --json endpoints` and the management API print.
void write_endpoint_json(JsonWriter& json, const Endpoint& endpoint);
// A run as the CLI's `show --json` and GET /api/runs/{id} give it: {"run_id", "experiment",
// "status", "start_ms", "end_ms", "code_version", "data_fingerprint", "bundle_sha256", "spec",
// "owner": {"pid", "host"}, "params", "metrics" (latest value per key), "tags", "artifacts":
// [{"path", "sha256", "size_bytes", "created_ms"}]}.
void write_run_fields(JsonWriter& json, const RunRecord& run);  // the fields, inside an object the caller opened
// A version's fields: "version", "bundle_sha256", "run_id", "creator", "created_ms", "aliases",
// "retired_ms", "description", "tags" and, when approved, "approval": {"approver", "note", "approved_ms"}.
void write_model_version_fields(JsonWriter& json, const ModelVersion& version);
// {"name", "latest_version", "versions" (their count), "created_ms", "aliases": {ALIAS: VERSION},
// "description", "owner", "tags"}.
void write_model_summary_json(JsonWriter& json, const ModelSummary& model);

// {"endpoint", "canary", "stable", "steps", "step", "interval_ms", "canary_percent", "state",
// "reason", "last_check", "criteria", "step_started_ms", "updated_ms"}: what `slipway --json
// rollout status` and the management API print.
void write_rollout_json(JsonWriter& json, const Rollout& rollout);

// The route with the largest share: what the endpoint mostly serves, the one a canary is tested
// against. A tie goes to the older route (the later one: the newest deployment comes first), so a
// canary at 50% is still the canary.
const EndpointRoute& main_route(const std::vector<EndpointRoute>& routes);

// "churn@3=90,churn@4=10": how endpoint routes are stored and printed.
std::string format_routes(const std::vector<EndpointRoute>& routes);
Result<std::vector<EndpointRoute>> parse_routes(std::string_view text);

// The audit log: one entry per mutation, appended in the mutation's own transaction.
class AuditLog {
 public:
  // Oldest first: "time_ms actor action detail".
  Result<std::vector<std::string>> entries();
  // Oldest first.
  Result<std::vector<AuditEntry>> query(const AuditFilter& filter);

 private:
  friend class Registry;
  explicit AuditLog(StoreContext& context) : context_(&context) {}
  StoreContext* context_;
};

struct OpenOptions {
  // Create the workspace (folders, database, schema) when it is missing. Not with read_only.
  bool create = false;
  // Open without writing anything: the database is opened read-only (SQLite's
  // SQLITE_OPEN_READONLY plus `PRAGMA query_only`), no migration is applied, and every mutation
  // (and ArtifactStore::put) fails with FailedPrecondition. On a WAL database SQLite may create
  // the empty `-wal` and `-shm` files it reads through, when the folder allows; slipway.db
  // itself is never written. When the folder is not writable and no `-wal` file exists, the
  // database is read as immutable (no writer can be active then).
  bool read_only = false;
};

struct VerifyReport;
struct VerifyOptions;
struct GcReport;
struct GcOptions;

class Registry {
 public:
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Opens the workspace in `home` (slipway.db and artifacts/) and brings its schema up to date
  // (for writing) or checks that it is (read_only). Errors: NotFound for a missing workspace
  // without create, with a hint to run `slipway init`; FailedPrecondition for a workspace made by
  // a newer slipway (a schema version this binary does not know), or for a read_only open of a
  // workspace whose schema needs a migration (the message says which command upgrades it).
  static Result<std::unique_ptr<Registry>> open(const std::string& home, const OpenOptions& options);
  // The same as open(home, {.create = create}).
  static Result<std::unique_ptr<Registry>> open(const std::string& home, bool create);

  const std::string& home() const { return home_; }
  bool read_only() const;
  // Who the audit log names for this registry's changes (by default the OS user), e.g. the API
  // token a server acts for.
  void set_actor(std::string actor);
  // The schema version of the open workspace (the highest migration applied).
  std::int64_t schema_version() const { return schema_version_; }
  // The newest schema version this build knows.
  static std::int64_t latest_schema_version();

  ArtifactStore& artifacts();
  RunStore& runs() { return runs_; }
  ModelStore& models() { return models_; }
  ServingConfigStore& serving_configs() { return serving_configs_; }
  TokenStore& tokens() { return tokens_; }
  EndpointStore& endpoints() { return endpoints_; }
  RetrainingStore& retraining() { return retraining_; }
  StudyStore& studies() { return studies_; }
  AuditLog& audit() { return audit_; }

 private:
  friend Result<VerifyReport> verify_workspace(Registry& registry, const VerifyOptions& options);
  friend Result<GcReport> collect_garbage(Registry& registry, const GcOptions& options);
  Registry(std::string home, std::unique_ptr<StoreContext> context, std::int64_t schema_version);

  std::string home_;
  std::unique_ptr<StoreContext> context_;
  std::int64_t schema_version_ = 0;
  RunStore runs_;
  ModelStore models_;
  ServingConfigStore serving_configs_;
  TokenStore tokens_;
  EndpointStore endpoints_;
  RetrainingStore retraining_;
  StudyStore studies_;
  AuditLog audit_;
};

// ---------------------------------------------------------------------------------------------
// Workspace verification (`slipway verify`).

struct VerifyOptions {
  // Fix what can be fixed: mark runs whose process is gone INTERRUPTED, and move corrupt
  // artifacts to artifacts/quarantine/ (so the right bytes can be stored again). Needs a
  // registry opened for writing.
  bool repair = false;
};

struct VerifyReport {
  struct CorruptArtifact {
    std::string sha256;
    std::string actual_sha256;  // empty when the file could not be read
    std::string error;          // why it could not be read, when it could not
    std::vector<std::string> referrers;
    std::string quarantined_to;  // with repair: where the file went
  };
  struct MissingArtifact {
    std::string sha256;
    std::string referrer;
  };
  struct RunCheck {
    std::string run_id;
    std::string reason;   // e.g. "process 4242 on host 'ci-3' has exited"
    bool marked = false;  // with repair: now INTERRUPTED
  };

  std::int64_t schema_version = 0;
  std::size_t artifacts_checked = 0;
  std::size_t references_checked = 0;
  std::vector<std::string> metadata_problems;      // the database's own integrity check
  std::vector<CorruptArtifact> corrupt_artifacts;  // bytes that do not hash to their name
  std::vector<MissingArtifact> missing_artifacts;  // rows naming an artifact that is not stored
  std::vector<std::string> orphan_artifacts;  // stored, named by no row (harmless: a crash between store and commit)
  std::vector<RunCheck> interrupted_runs;     // RUNNING, but their process is gone
  std::vector<RunCheck> unchecked_runs;       // RUNNING, owner on another host or not recorded

  // Problems left: metadata problems, corrupt and missing artifacts, and interrupted runs not
  // marked. Orphans and unchecked runs are reported but are not problems.
  std::size_t problem_count() const;
};

// ---------------------------------------------------------------------------------------------
// Garbage collection (`slipway gc`): artifacts that no version, run, checkpoint or gate result
// names.

struct GcOptions {
  bool apply = false;  // delete them; otherwise only list them
  // Only artifacts at least this old: a training run stores its bundle before it registers it.
  std::int64_t min_age_ms = 3'600'000;
};

struct GcReport {
  struct Artifact {
    std::string sha256;
    std::uint64_t bytes = 0;
    std::int64_t age_ms = 0;
  };
  std::vector<Artifact> unreferenced;  // old enough to collect
  std::size_t too_young = 0;           // unreferenced, but younger than min_age_ms
  bool applied = false;
  std::uint64_t bytes_freed = 0;
};

// Lists (and with apply deletes, in a write transaction so that nothing registers meanwhile) the
// unreferenced artifacts. FailedPrecondition for apply on a read-only registry.
Result<GcReport> collect_garbage(Registry& registry, const GcOptions& options);

// Checks the workspace: the metadata store's integrity, every artifact's bytes against its
// name, every row's artifact present, orphan artifacts, and RUNNING runs whose process is gone
// (see RunOwner). With repair (FailedPrecondition on a read-only registry) fixes what it can, as
// VerifyOptions says. Errors only when the checks themselves cannot run.
Result<VerifyReport> verify_workspace(Registry& registry, const VerifyOptions& options);

}  // namespace slipway::registry
