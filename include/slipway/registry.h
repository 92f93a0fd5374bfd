// slipway/registry.h — the workspace: metadata (experiments, runs, params, metrics, model
// versions, aliases, audit log) in SQLite, bundles in a content-addressed artifact folder.
//
// Guarantees: every mutation is one transaction, also recorded in the audit log; artifacts are
// written to a temporary file, fsynced and renamed, and never rewritten. A crash at any point
// leaves no half-written row and no partial artifact; at worst an artifact that no row refers to.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "slipway/core.h"

namespace slipway::registry {

struct MetricRecord {
  std::string key;
  double value = 0.0;
  std::int64_t step = 0;
  std::int64_t timestamp_ms = 0;
};

struct RunRecord {
  std::string run_id;
  std::string experiment;
  std::string status;  // RUNNING, FINISHED, FAILED
  std::int64_t start_ms = 0;
  std::int64_t end_ms = 0;  // 0 while running
  std::string code_version;
  std::string data_fingerprint;
  std::string spec;           // the resolved spec, as YAML
  std::string bundle_sha256;  // empty when the run produced no bundle
  std::map<std::string, std::string> params;
  std::vector<MetricRecord> metrics;  // latest value per key (full history in the store)
};

struct CheckpointRecord {
  std::int64_t step = 0;  // e.g. boosting rounds done
  std::string bundle_sha256;
  std::int64_t created_ms = 0;
};

struct ModelVersion {
  std::string model;
  std::int64_t version = 0;
  std::string bundle_sha256;
  std::string run_id;
  std::string creator;
  std::int64_t created_ms = 0;
  std::vector<std::string> aliases;
};

struct ModelSummary {
  std::string name;
  std::int64_t created_ms = 0;
  std::int64_t latest_version = 0;
  std::int64_t version_count = 0;
  std::map<std::string, std::int64_t> aliases;
};

struct NewRun {
  std::string experiment = "default";
  std::string code_version;
  std::string data_fingerprint;
  std::string spec;
  std::map<std::string, std::string> params;
};

// Model and alias names: a letter or digit, then letters, digits, '_', '-', '.'; at most 128.
// Aliases also may not be all digits (that reads as a version) nor "latest".
Status validate_model_name(const std::string& name);
Status validate_alias_name(const std::string& alias);

// API tokens for `slipway serve --auth`. Only the sha256 of a token is stored; the secret is
// shown once, when it is created.
struct TokenRecord {
  std::string id;
  std::string name;
  std::string role;  // predict, deploy or admin
  std::string token_sha256;
  std::int64_t created_ms = 0;
  std::int64_t revoked_ms = 0;  // 0 while active
};
struct NewToken {
  std::string id;
  std::string secret;  // "slw_<id>_<64 hex>"
};
// InvalidArgument unless `role` is predict, deploy or admin.
Status validate_token_role(const std::string& role);

// What a model reference selects: an explicit version, an alias, or the latest version.
struct VersionSelector {
  std::optional<std::int64_t> version;
  std::string alias;  // when not a version; empty means latest
};
// Parses "NAME", "NAME@3", "NAME@production" into the name and selector.
Result<std::pair<std::string, VersionSelector>> parse_model_reference(const std::string& reference);

// Content-addressed bundle storage at <root>/sha256/<2 hex>/<62 hex>.
class ArtifactStore {
 public:
  explicit ArtifactStore(std::string root);
  // Stores `bytes` (no-op when already present) and returns their sha256.
  Result<std::string> put(std::span<const std::byte> bytes);
  std::string path_for(const std::string& sha256) const;
  bool contains(const std::string& sha256) const;
  // The hashes of every stored artifact (used by consistency checks).
  std::vector<std::string> list() const;

 private:
  std::string root_;
};

class Registry {
 public:
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Opens the workspace in `home` (slipway.db and artifacts/). With create=false a missing
  // workspace is NotFound with a hint to run `slipway init`. Thread-safe: one connection behind
  // a mutex.
  static Result<std::unique_ptr<Registry>> open(const std::string& home, bool create);

  const std::string& home() const { return home_; }
  ArtifactStore& artifacts() { return artifacts_; }

  // Runs.
  Result<std::string> start_run(const NewRun& run);
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
  // Marks an interrupted (RUNNING) or FAILED run RUNNING again, to resume it. FailedPrecondition
  // for a FINISHED run.
  Status reopen_run(const std::string& run_id);
  // Ends a run as FINISHED or FAILED, recording the bundle it produced (may be empty).
  Status finish_run(const std::string& run_id, bool succeeded, const std::string& bundle_sha256);
  Result<RunRecord> get_run(const std::string& run_id);
  // Most recent first.
  Result<std::vector<RunRecord>> list_runs(std::size_t limit);

  // Models. The bundle must already be in the artifact store.
  Result<ModelVersion> register_version(const std::string& model, const std::string& bundle_sha256,
                                        const std::string& run_id);
  Result<std::vector<ModelSummary>> list_models();
  // Ascending version order. NotFound for an unknown model.
  Result<std::vector<ModelVersion>> list_versions(const std::string& model);
  Result<ModelVersion> resolve(const std::string& model, const VersionSelector& selector);
  // Points `alias` at `version` (moving it if it pointed elsewhere).
  Status set_alias(const std::string& model, const std::string& alias, std::int64_t version);

  // Serving configuration per model (`slipway serving-config`): key/value pairs that serve
  // validates. `replace` drops the keys not given; otherwise the given keys are updated.
  Status set_serving_config(const std::string& model, const std::map<std::string, std::string>& values, bool replace);
  // Empty when the model has none.
  Result<std::map<std::string, std::string>> serving_config(const std::string& model);

  // API tokens.
  Result<NewToken> create_token(const std::string& name, const std::string& role);
  // NotFound when no active token has this id.
  Status revoke_token(const std::string& id);
  Result<std::vector<TokenRecord>> list_tokens();

  // Audit log entries, oldest first: "time actor action detail".
  Result<std::vector<std::string>> audit_log();

 private:
  struct State;
  Registry(std::string home, std::unique_ptr<State> state);

  std::string home_;
  ArtifactStore artifacts_;
  std::unique_ptr<State> state_;
};

}  // namespace slipway::registry
