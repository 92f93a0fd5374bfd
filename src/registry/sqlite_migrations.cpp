// The SQLite schema, as numbered migrations. Append a migration to change the schema; never edit
// one that has shipped (workspaces record each by version and name).
#include <array>

#include "registry/metadata_backend.h"

namespace slipway::registry {
namespace {

// The schema as it was before migrations were recorded, unchanged (`IF NOT EXISTS`: see
// migrations.h for why), less the `PRAGMA user_version = 1` those releases wrote on every open.
constexpr std::string_view kInitialSchema = R"sql(
CREATE TABLE IF NOT EXISTS experiments(
  id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  run_id TEXT PRIMARY KEY, experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  status TEXT NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER,
  code_version TEXT NOT NULL, data_fingerprint TEXT NOT NULL, spec TEXT NOT NULL, bundle_sha256 TEXT);
CREATE TABLE IF NOT EXISTS params(
  run_id TEXT NOT NULL REFERENCES runs(run_id), key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(run_id, key));
CREATE TABLE IF NOT EXISTS metrics(
  run_id TEXT NOT NULL REFERENCES runs(run_id), key TEXT NOT NULL, value REAL,
  step INTEGER NOT NULL, timestamp_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_by_run ON metrics(run_id, key);
CREATE TABLE IF NOT EXISTS models(name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS model_versions(
  model TEXT NOT NULL REFERENCES models(name), version INTEGER NOT NULL,
  bundle_sha256 TEXT NOT NULL, run_id TEXT REFERENCES runs(run_id), creator TEXT NOT NULL,
  created_ms INTEGER NOT NULL, PRIMARY KEY(model, version));
CREATE TABLE IF NOT EXISTS aliases(
  model TEXT NOT NULL, alias TEXT NOT NULL, version INTEGER NOT NULL,
  PRIMARY KEY(model, alias), FOREIGN KEY(model, version) REFERENCES model_versions(model, version));
CREATE TABLE IF NOT EXISTS checkpoints(
  run_id TEXT NOT NULL REFERENCES runs(run_id), step INTEGER NOT NULL, bundle_sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL, PRIMARY KEY(run_id, step));
CREATE TABLE IF NOT EXISTS audit_log(
  id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, actor TEXT NOT NULL,
  action TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS serving_configs(
  model TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(model, key));
CREATE TABLE IF NOT EXISTS api_tokens(
  id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL, token_sha256 TEXT UNIQUE NOT NULL,
  created_ms INTEGER NOT NULL, revoked_ms INTEGER);
)sql";

// The process that owns a run (RunOwner), so `slipway verify` can find runs left RUNNING by a
// process that died. NULL in rows written before.
constexpr std::string_view kRunOwner = R"sql(
ALTER TABLE runs ADD COLUMN owner_pid INTEGER;
ALTER TABLE runs ADD COLUMN owner_start_ticks INTEGER;
ALTER TABLE runs ADD COLUMN owner_host TEXT;
ALTER TABLE runs ADD COLUMN owner_boot_id TEXT;
ALTER TABLE runs ADD COLUMN owner_pid_namespace TEXT;
)sql";

// Endpoints and their routes ("model@version=percent,..."), with the configuration the last
// change replaced, for one-step rollback.
constexpr std::string_view kEndpoints = R"sql(
CREATE TABLE endpoints(
  name TEXT PRIMARY KEY, routes TEXT NOT NULL, previous_routes TEXT NOT NULL,
  revision INTEGER NOT NULL, updated_by TEXT NOT NULL, updated_ms INTEGER NOT NULL);
)sql";

// Canary rollouts in steps, driven by a server, and each endpoint's fallback.
constexpr std::string_view kRollouts = R"sql(
CREATE TABLE rollouts(
  endpoint TEXT PRIMARY KEY, canary TEXT NOT NULL, stable TEXT NOT NULL, steps TEXT NOT NULL,
  interval_ms INTEGER NOT NULL, step INTEGER NOT NULL, step_started_ms INTEGER NOT NULL,
  state TEXT NOT NULL, reason TEXT NOT NULL, last_check TEXT NOT NULL, criteria TEXT NOT NULL,
  updated_ms INTEGER NOT NULL);
ALTER TABLE endpoints ADD COLUMN fallback TEXT NOT NULL DEFAULT 'none';
)sql";

// The version an endpoint mirrors requests to, and the share mirrored.
constexpr std::string_view kEndpointShadow = R"sql(
ALTER TABLE endpoints ADD COLUMN shadow TEXT NOT NULL DEFAULT '';
ALTER TABLE endpoints ADD COLUMN shadow_percent REAL NOT NULL DEFAULT 0;
)sql";

// Descriptions, owners and tags on models and versions; approvals of versions; endpoints that
// take approved versions only, and their owners.
constexpr std::string_view kAnnotations = R"sql(
ALTER TABLE models ADD COLUMN description TEXT NOT NULL DEFAULT '';
ALTER TABLE models ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE model_versions ADD COLUMN description TEXT NOT NULL DEFAULT '';
CREATE TABLE model_tags(
  model TEXT NOT NULL, version INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(model, version, key));
CREATE TABLE approvals(
  model TEXT NOT NULL, version INTEGER NOT NULL, approver TEXT NOT NULL, note TEXT NOT NULL,
  approved_ms INTEGER NOT NULL, PRIMARY KEY(model, version));
ALTER TABLE endpoints ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE endpoints ADD COLUMN require_approval INTEGER NOT NULL DEFAULT 0;
)sql";

// Evaluation gates' results, each linking a candidate version to its baseline, with the report
// kept as an artifact.
constexpr std::string_view kGateResults = R"sql(
CREATE TABLE gate_results(
  id INTEGER PRIMARY KEY AUTOINCREMENT, model TEXT NOT NULL, version INTEGER NOT NULL,
  baseline_model TEXT NOT NULL, baseline_version INTEGER NOT NULL, data_fingerprint TEXT NOT NULL,
  metric TEXT NOT NULL, criteria TEXT NOT NULL, passed INTEGER NOT NULL, report_sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL, actor TEXT NOT NULL);
CREATE INDEX gate_results_by_version ON gate_results(model, version);
)sql";

// Versions taken out of service (kept for lineage).
constexpr std::string_view kRetiredVersions = R"sql(
ALTER TABLE model_versions ADD COLUMN retired_ms INTEGER NOT NULL DEFAULT 0;
)sql";

// Endpoint deadlines, service-level objectives and what their last routing change was; the step cache (train and eval
// results reused when their inputs match an earlier successful one).
constexpr std::string_view kDeadlinesAndStepCache = R"sql(
ALTER TABLE endpoints ADD COLUMN deadline_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE endpoints ADD COLUMN slo TEXT NOT NULL DEFAULT '';
ALTER TABLE endpoints ADD COLUMN last_change TEXT NOT NULL DEFAULT '';
CREATE TABLE step_cache(
  kind TEXT NOT NULL, key TEXT NOT NULL, run_id TEXT NOT NULL, result TEXT NOT NULL,
  created_ms INTEGER NOT NULL, PRIMARY KEY(kind, key));
)sql";

// Batch scoring jobs, for lineage: what scored which input into which folder.
constexpr std::string_view kBatchJobs = R"sql(
CREATE TABLE batch_jobs(
  key TEXT PRIMARY KEY, model TEXT NOT NULL, bundle_sha256 TEXT NOT NULL, input TEXT NOT NULL,
  input_sha256 TEXT NOT NULL, out TEXT NOT NULL, state TEXT NOT NULL, rows INTEGER NOT NULL,
  scored INTEGER NOT NULL, bad INTEGER NOT NULL, started_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
  actor TEXT NOT NULL);
)sql";

// Ground truth that arrives after the predictions, joined to logged requests by an id.
constexpr std::string_view kLabels = R"sql(
CREATE TABLE labels(
  model TEXT NOT NULL, id TEXT NOT NULL, label TEXT NOT NULL, ingested_ms INTEGER NOT NULL,
  PRIMARY KEY(model, id));
)sql";

// Monitoring alerts: the last state of each alert, so one fires (or resolves) once per change.
constexpr std::string_view kMonitorAlerts = R"sql(
CREATE TABLE monitor_alerts(
  model TEXT NOT NULL, subject TEXT NOT NULL, firing INTEGER NOT NULL, value REAL,
  changed_ms INTEGER NOT NULL, PRIMARY KEY(model, subject));
)sql";

// Retraining policies and the record of each retraining.
constexpr std::string_view kRetraining = R"sql(
CREATE TABLE retrain_policies(
  model TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(model, key));
CREATE TABLE retrainings(
  id INTEGER PRIMARY KEY AUTOINCREMENT, model TEXT NOT NULL, reason TEXT NOT NULL, state TEXT NOT NULL,
  baseline_version INTEGER NOT NULL, data_fingerprint TEXT NOT NULL, data_sha256 TEXT NOT NULL,
  run_id TEXT NOT NULL, candidate_version INTEGER NOT NULL, gate_report_sha256 TEXT NOT NULL,
  deployed TEXT NOT NULL, message TEXT NOT NULL, started_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL,
  actor TEXT NOT NULL);
CREATE INDEX retrainings_by_model ON retrainings(model, id);
)sql";

// Runs recorded by training code that runs elsewhere (the tracking API): tags, and artifacts by
// path (the bytes in the artifact store, so `verify` checks them and `gc` keeps them).
constexpr std::string_view kRunTagsAndArtifacts = R"sql(
CREATE TABLE run_tags(
  run_id TEXT NOT NULL REFERENCES runs(run_id), key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(run_id, key));
CREATE TABLE run_artifacts(
  run_id TEXT NOT NULL REFERENCES runs(run_id), path TEXT NOT NULL, sha256 TEXT NOT NULL,
  size_bytes INTEGER NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY(run_id, path));
CREATE INDEX runs_by_start ON runs(start_ms);
)sql";

// Hyperparameter studies (`slipway tune`) and their trials; a trial's parameters and measures
// are rows of their own, its intermediate values text ("STEP VALUE" lines).
constexpr std::string_view kStudies = R"sql(
CREATE TABLE studies(
  name TEXT PRIMARY KEY, definition TEXT NOT NULL, definition_sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL, actor TEXT NOT NULL);
CREATE TABLE study_trials(
  study TEXT NOT NULL REFERENCES studies(name), number INTEGER NOT NULL, state TEXT NOT NULL,
  run_id TEXT NOT NULL, message TEXT NOT NULL, retry_of INTEGER NOT NULL,
  intermediate TEXT NOT NULL, rung_values TEXT NOT NULL,
  owner_pid INTEGER NOT NULL, owner_start_ticks INTEGER NOT NULL, owner_host TEXT NOT NULL,
  owner_boot_id TEXT NOT NULL, owner_pid_namespace TEXT NOT NULL,
  started_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL, PRIMARY KEY(study, number));
CREATE TABLE study_trial_params(
  study TEXT NOT NULL, number INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(study, number, key), FOREIGN KEY(study, number) REFERENCES study_trials(study, number));
CREATE TABLE study_trial_measures(
  study TEXT NOT NULL, number INTEGER NOT NULL, key TEXT NOT NULL, value REAL,
  PRIMARY KEY(study, number, key), FOREIGN KEY(study, number) REFERENCES study_trials(study, number));
)sql";

constexpr std::array kMigrations = {
    Migration{1, "initial_schema", kInitialSchema},
    Migration{2, "run_owner", kRunOwner},
    Migration{3, "endpoints", kEndpoints},
    Migration{4, "rollouts", kRollouts},
    Migration{5, "endpoint_shadow", kEndpointShadow},
    Migration{6, "annotations_and_approvals", kAnnotations},
    Migration{7, "gate_results", kGateResults},
    Migration{8, "retired_versions", kRetiredVersions},
    Migration{9, "deadlines_and_step_cache", kDeadlinesAndStepCache},
    Migration{10, "batch_jobs", kBatchJobs},
    Migration{11, "labels", kLabels},
    Migration{12, "monitor_alerts", kMonitorAlerts},
    Migration{13, "retraining", kRetraining},
    Migration{14, "run_tags_and_artifacts", kRunTagsAndArtifacts},
    Migration{15, "studies", kStudies},
};

}  // namespace

std::span<const Migration> sqlite_migrations() { return kMigrations; }

}  // namespace slipway::registry
