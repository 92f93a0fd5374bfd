// Retraining policies and the record of each retraining.
#include <algorithm>
#include <limits>

#include "registry/store_context.h"

namespace slipway::registry {
namespace {

constexpr std::string_view kRecordColumns =
    "id, model, reason, state, baseline_version, data_fingerprint, data_sha256, run_id, candidate_version, "
    "gate_report_sha256, deployed, message, started_ms, finished_ms, actor";

RetrainingRecord record_of(const SqlRow& row) {
  RetrainingRecord record;
  record.id = row.integer(0);
  record.model = row.text(1);
  record.reason = row.text(2);
  record.state = row.text(3);
  record.baseline_version = row.integer(4);
  record.data_fingerprint = row.text(5);
  record.data_sha256 = row.text(6);
  record.run_id = row.text(7);
  record.candidate_version = row.integer(8);
  record.gate_report_sha256 = row.text(9);
  record.deployed = row.text(10);
  record.message = row.text(11);
  record.started_ms = row.integer(12);
  record.finished_ms = row.integer(13);
  record.actor = row.text(14);
  return record;
}

}  // namespace

Status RetrainingStore::set_policy(const std::string& model, const std::map<std::string, std::string>& values) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(check_model_exists(sql, model));
    SLIPWAY_RETURN_IF_ERROR(sql.execute("DELETE FROM retrain_policies WHERE model = ?", {model}).status());
    std::string detail = model;
    for (const auto& [key, value] : values) {
      SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO retrain_policies(model, key, value) VALUES (?, ?, ?) "
                                          "ON CONFLICT(model, key) DO UPDATE SET value = excluded.value",
                                          {model, key, value})
                                  .status());
      // A stored spec is YAML text: the audit line names it without its lines.
      detail.append(" ").append(key).append("=").append(key == "spec" ? "(" + std::to_string(value.size()) + " bytes)"
                                                                      : value);
    }
    return append_audit(sql, *context_, "retrain.policy", detail);
  });
}

Result<std::map<std::string, std::string>> RetrainingStore::policy(const std::string& model) {
  std::map<std::string, std::string> values;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(bool exists, sql.table_exists("retrain_policies"));
    if (!exists) return {};  // a workspace opened read-only before this slipway migrated it
    SLIPWAY_ASSIGN_OR_RETURN(
        auto rows, sql.query("SELECT key, value FROM retrain_policies WHERE model = ? ORDER BY key", {model}));
    for (const auto& row : rows) values[row.text(0)] = row.text(1);
    return {};
  }));
  return values;
}

Status RetrainingStore::remove_policy(const std::string& model) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto removed, sql.execute("DELETE FROM retrain_policies WHERE model = ?", {model}));
    if (removed == 0) return not_found("model '" + model + "' has no retraining policy");
    return append_audit(sql, *context_, "retrain.policy_removed", model);
  });
}

Result<std::vector<std::string>> RetrainingStore::models_with_policies() {
  std::vector<std::string> models;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(bool exists, sql.table_exists("retrain_policies"));
    if (!exists) return {};
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT DISTINCT model FROM retrain_policies ORDER BY model"));
    for (const auto& row : rows) models.push_back(row.text(0));
    return {};
  }));
  return models;
}

Result<std::int64_t> RetrainingStore::start(const RetrainingRecord& record) {
  std::int64_t id = 0;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(check_model_exists(sql, record.model));
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO retrainings(model, reason, state, baseline_version, data_fingerprint, data_sha256, "
                    "run_id, candidate_version, gate_report_sha256, deployed, message, started_ms, finished_ms, "
                    "actor) VALUES (?, ?, 'running', ?, ?, ?, '', 0, '', '', '', ?, 0, ?)",
                    {record.model, record.reason, record.baseline_version, record.data_fingerprint, record.data_sha256,
                     unix_time_ms(), context_->actor})
            .status());
    SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT max(id) FROM retrainings"));
    id = row->integer(0);
    return append_audit(sql, *context_, "retrain.start",
                        record.model + " #" + std::to_string(id) + " (" + record.reason + ")");
  }));
  return id;
}

Status RetrainingStore::update(const RetrainingRecord& record) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    std::int64_t finished_ms = record.state == "running" ? 0 : unix_time_ms();
    SLIPWAY_ASSIGN_OR_RETURN(
        auto updated,
        sql.execute("UPDATE retrainings SET state = ?, baseline_version = ?, data_fingerprint = ?, data_sha256 = ?, "
                    "run_id = ?, candidate_version = ?, gate_report_sha256 = ?, deployed = ?, message = ?, "
                    "finished_ms = ? WHERE id = ?",
                    {record.state, record.baseline_version, record.data_fingerprint, record.data_sha256, record.run_id,
                     record.candidate_version, record.gate_report_sha256, record.deployed, record.message, finished_ms,
                     record.id}));
    if (updated == 0) return not_found("no retraining #" + std::to_string(record.id));
    if (record.state == "running") return {};  // progress, not an outcome
    std::string detail = record.model + " #" + std::to_string(record.id) + " " + record.state;
    if (record.candidate_version > 0) detail += " " + record.model + "@" + std::to_string(record.candidate_version);
    if (!record.deployed.empty()) detail += " to " + record.deployed;
    return append_audit(sql, *context_, "retrain.finish", detail);
  });
}

Result<std::size_t> RetrainingStore::mark_interrupted(const std::string& model) {
  std::size_t marked = 0;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    // A candidate its run registered before the record said so is still its candidate.
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("UPDATE retrainings SET candidate_version = (SELECT MAX(version) FROM model_versions v WHERE "
                    "v.model = retrainings.model AND v.run_id = retrainings.run_id) WHERE model = ? AND state = "
                    "'running' AND candidate_version = 0 AND run_id <> '' AND EXISTS (SELECT 1 FROM model_versions "
                    "v WHERE v.model = retrainings.model AND v.run_id = retrainings.run_id)",
                    {model})
            .status());
    // One killed after registering its candidate did register it: that is its outcome.
    SLIPWAY_ASSIGN_OR_RETURN(
        auto changed,
        sql.execute("UPDATE retrainings SET state = CASE WHEN candidate_version > 0 THEN 'registered' ELSE "
                    "'interrupted' END, message = CASE WHEN deployed <> '' THEN 'its process ended while deploying "
                    "the candidate; `slipway endpoints` shows whether it was' WHEN candidate_version > 0 THEN 'its "
                    "process ended after registering the candidate, before any deploy' ELSE 'its process ended "
                    "before it finished' END, deployed = '', finished_ms = ? WHERE model = ? AND state = 'running'",
                    {unix_time_ms(), model}));
    marked = static_cast<std::size_t>(changed);
    return {};
  }));
  return marked;
}

Result<std::vector<RetrainingRecord>> RetrainingStore::list(const std::string& model, std::size_t limit) {
  std::vector<RetrainingRecord> records;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(bool exists, sql.table_exists("retrainings"));
    if (!exists) return {};
    auto capped = static_cast<std::int64_t>(std::min<std::size_t>(limit, std::numeric_limits<std::int64_t>::max()));
    std::string query = "SELECT " + std::string(kRecordColumns) + " FROM retrainings";
    SLIPWAY_ASSIGN_OR_RETURN(
        auto rows, model.empty() ? sql.query(query + " ORDER BY id DESC LIMIT ?", {capped})
                                 : sql.query(query + " WHERE model = ? ORDER BY id DESC LIMIT ?", {model, capped}));
    for (const auto& row : rows) records.push_back(record_of(row));
    return {};
  }));
  return records;
}

Result<std::vector<ArtifactReference>> RetrainingStore::artifact_references() {
  std::vector<ArtifactReference> references;
  SLIPWAY_ASSIGN_OR_RETURN(auto records, list("", std::numeric_limits<std::size_t>::max()));
  for (const auto& record : records) {
    std::string referrer = "retraining #" + std::to_string(record.id) + " of " + record.model;
    if (!record.gate_report_sha256.empty())
      references.push_back({record.gate_report_sha256, referrer + " gate report"});
    if (!record.data_sha256.empty()) references.push_back({record.data_sha256, referrer + " data"});
  }
  return references;
}

}  // namespace slipway::registry
