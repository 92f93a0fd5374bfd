// What people add to models and versions: descriptions, owners, tags, approvals.
#include "registry/store_context.h"

namespace slipway::registry {
namespace {

constexpr std::size_t kMaxText = 8192;

Status check_tag_key(const std::string& key) {
  bool valid = !key.empty() && key.size() <= 128;
  for (char c : key) {
    valid = valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/');
  }
  if (!valid)
    return invalid_argument("invalid tag key '" + key + "': use 1 to 128 letters, digits, '_', '-', '.', '/'");
  return {};
}

Status check_text(std::string_view what, const std::string& text) {
  if (text.size() > kMaxText) return invalid_argument(std::string(what) + " is over 8 KiB");
  if (!is_valid_utf8(text)) return invalid_argument(std::string(what) + " is not UTF-8 text");
  return {};
}

Status check_exists(SqlTransaction& sql, const std::string& model, std::optional<std::int64_t> version) {
  if (!version) return check_model_exists(sql, model);
  SLIPWAY_ASSIGN_OR_RETURN(
      auto row, sql.query_row("SELECT 1 FROM model_versions WHERE model = ? AND version = ?", {model, *version}));
  if (!row) return not_found("model '" + model + "' has no version " + std::to_string(*version));
  return {};
}

}  // namespace

Status ModelStore::annotate(const std::string& model, std::optional<std::int64_t> version,
                            const Annotations& annotations) {
  if (annotations.owner && version) return invalid_argument("an owner is set on a model, not on one version");
  if (annotations.description) SLIPWAY_RETURN_IF_ERROR(check_text("the description", *annotations.description));
  if (annotations.owner) SLIPWAY_RETURN_IF_ERROR(check_text("the owner", *annotations.owner));
  for (const auto& [key, value] : annotations.set_tags) {
    SLIPWAY_RETURN_IF_ERROR(check_tag_key(key));
    SLIPWAY_RETURN_IF_ERROR(check_text("tag '" + key + "'", value));
  }
  std::string target = version ? model + "@" + std::to_string(*version) : model;
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(check_exists(sql, model, version));
    std::string detail = target;
    if (annotations.description) {
      SLIPWAY_RETURN_IF_ERROR(
          (version ? sql.execute("UPDATE model_versions SET description = ? WHERE model = ? AND "
                                 "version = ?",
                                 {*annotations.description, model, *version})
                   : sql.execute("UPDATE models SET description = ? WHERE name = ?", {*annotations.description, model}))
              .status());
      detail += " description";
    }
    if (annotations.owner) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("UPDATE models SET owner = ? WHERE name = ?", {*annotations.owner, model}).status());
      detail += " owner=" + *annotations.owner;
    }
    std::int64_t tag_version = version.value_or(0);
    for (const auto& [key, value] : annotations.set_tags) {
      SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO model_tags(model, version, key, value) VALUES (?, ?, ?, ?) "
                                          "ON CONFLICT(model, version, key) DO UPDATE SET value = excluded.value",
                                          {model, tag_version, key, value})
                                  .status());
      detail += " " + key + "=" + value;
    }
    for (const auto& key : annotations.remove_tags) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("DELETE FROM model_tags WHERE model = ? AND version = ? AND key = ?", {model, tag_version, key})
              .status());
      detail += " -" + key;
    }
    return append_audit(sql, *context_, "model.annotate", detail);
  });
}

Status ModelStore::approve(const std::string& model, std::int64_t version, const std::string& note) {
  SLIPWAY_RETURN_IF_ERROR(check_text("the note", note));
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(check_exists(sql, model, version));
    SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO approvals(model, version, approver, note, approved_ms) VALUES "
                                        "(?, ?, ?, ?, ?) ON CONFLICT(model, version) DO UPDATE SET approver = "
                                        "excluded.approver, note = excluded.note, approved_ms = excluded.approved_ms",
                                        {model, version, context_->actor, note, unix_time_ms()})
                                .status());
    return append_audit(sql, *context_, "model.approve", model + "@" + std::to_string(version) + " " + note);
  });
}

Status ModelStore::revoke_approval(const std::string& model, std::int64_t version) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(std::int64_t removed,
                             sql.execute("DELETE FROM approvals WHERE model = ? AND version = ?", {model, version}));
    if (removed == 0) return not_found(model + "@" + std::to_string(version) + " is not approved");
    return append_audit(sql, *context_, "model.revoke_approval", model + "@" + std::to_string(version));
  });
}

Result<std::size_t> ModelStore::record_labels(const std::string& model,
                                              const std::vector<std::pair<std::string, std::string>>& labels) {
  std::size_t added = 0;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(check_model_exists(sql, model));
    std::int64_t now = unix_time_ms();
    for (const auto& [id, label] : labels) {
      if (id.empty()) return invalid_argument("a label needs an id");
      SLIPWAY_ASSIGN_OR_RETURN(auto existing,
                               sql.query_row("SELECT 1 FROM labels WHERE model = ? AND id = ?", {model, id}));
      if (!existing) ++added;
      SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO labels(model, id, label, ingested_ms) VALUES (?, ?, ?, ?) "
                                          "ON CONFLICT(model, id) DO UPDATE SET label = excluded.label, "
                                          "ingested_ms = excluded.ingested_ms",
                                          {model, id, label, now})
                                  .status());
    }
    return append_audit(sql, *context_, "labels.ingest",
                        model + " " + std::to_string(labels.size()) + " labels (" + std::to_string(added) + " new)");
  }));
  return added;
}

Result<std::unordered_map<std::string, std::string>> ModelStore::labels(const std::string& model) {
  std::unordered_map<std::string, std::string> found;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(bool exists, sql.table_exists("labels"));
    if (!exists) return {};
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT id, label FROM labels WHERE model = ?", {model}));
    for (const auto& row : rows) found.emplace(row.text(0), row.text(1));
    return {};
  }));
  return found;
}

Status ModelStore::record_alerts(const std::vector<AlertState>& states) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    for (const auto& state : states) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("INSERT INTO monitor_alerts(model, subject, firing, value, changed_ms) VALUES (?, ?, ?, ?, ?) "
                      "ON CONFLICT(model, subject) DO UPDATE SET value = excluded.value, "
                      "changed_ms = CASE WHEN firing = excluded.firing THEN changed_ms ELSE excluded.changed_ms END, "
                      "firing = excluded.firing",
                      {state.model, state.subject, state.firing ? 1 : 0, SqlValue::real_or_null(state.value),
                       state.changed_ms})
              .status());
    }
    return {};
  });
}

Result<std::vector<AlertState>> ModelStore::alerts() {
  std::vector<AlertState> states;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(bool exists, sql.table_exists("monitor_alerts"));
    if (!exists) return {};
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT model, subject, firing, value, changed_ms FROM "
                                                  "monitor_alerts ORDER BY model, subject"));
    for (const auto& row : rows) {
      states.push_back({row.text(0), row.text(1), row.integer(2) != 0, row.real(3), row.integer(4)});
    }
    return {};
  }));
  return states;
}

Status ModelStore::record_gate(const GateRecord& record) {
  if (!context_->artifacts.contains(record.report_sha256)) {
    return failed_precondition("the gate report " + record.report_sha256 + " is not in the artifact store");
  }
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(check_exists(sql, record.model, record.version));
    SLIPWAY_RETURN_IF_ERROR(check_exists(sql, record.baseline_model, record.baseline_version));
    SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO gate_results(model, version, baseline_model, baseline_version, "
                                        "data_fingerprint, metric, criteria, passed, report_sha256, created_ms, actor) "
                                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                        {record.model, record.version, record.baseline_model, record.baseline_version,
                                         record.data_fingerprint, record.metric, record.criteria, record.passed ? 1 : 0,
                                         record.report_sha256, unix_time_ms(), context_->actor})
                                .status());
    return append_audit(sql, *context_, record.passed ? "gate.pass" : "gate.fail",
                        record.model + "@" + std::to_string(record.version) + " against " + record.baseline_model +
                            "@" + std::to_string(record.baseline_version) + " " + record.metric + " " +
                            record.criteria);
  });
}

Result<std::vector<GateRecord>> ModelStore::gate_results(const std::string& model, std::int64_t version) {
  std::vector<GateRecord> records;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT baseline_model, baseline_version, data_fingerprint, metric, "
                                                  "criteria, passed, report_sha256, created_ms, actor FROM "
                                                  "gate_results WHERE model = ? AND version = ? ORDER BY id DESC",
                                                  {model, version}));
    for (const auto& row : rows) {
      records.push_back({model, version, row.text(0), row.integer(1), row.text(2), row.text(3), row.text(4),
                         row.integer(5) != 0, row.text(6), row.integer(7), row.text(8)});
    }
    return {};
  }));
  return records;
}

Result<std::vector<std::string>> ModelStore::retire(const std::string& model, std::int64_t version) {
  std::string reference = model + "@" + std::to_string(version);
  std::vector<std::string> rollback_targets_dropped;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    rollback_targets_dropped.clear();
    SLIPWAY_RETURN_IF_ERROR(check_exists(sql, model, version));
    SLIPWAY_ASSIGN_OR_RETURN(auto retired, sql.query_row("SELECT retired_ms FROM model_versions WHERE model = ? AND "
                                                         "version = ?",
                                                         {model, version}));
    if (retired && retired->integer(0) > 0) return failed_precondition(reference + " is retired already");
    SLIPWAY_ASSIGN_OR_RETURN(auto aliases,
                             sql.query("SELECT alias FROM aliases WHERE model = ? AND version = ?", {model, version}));
    if (!aliases.empty()) {
      return failed_precondition("alias " + model + "@" + aliases.front().text(0) + " points to " + reference +
                                 "; move it first (slipway alias)");
    }
    // Endpoints: a route, the shadow, or a running rollout's two versions.
    SLIPWAY_ASSIGN_OR_RETURN(auto endpoints, sql.query("SELECT name, routes, shadow, previous_routes FROM endpoints"));
    for (const auto& row : endpoints) {
      // A damaged row's routes cannot be read: compared as text, so a damaged endpoint neither
      // blocks every retirement nor lets one through that it names.
      auto routes = parse_routes(row.text(1));
      bool routed = row.text(2) == reference;
      if (routes.ok()) {
        for (const auto& route : *routes) routed = routed || route.reference() == reference;
      } else {
        routed = routed || row.text(1).find(reference + "=") != std::string::npos;
      }
      if (routed) {
        return failed_precondition("endpoint '" + row.text(0) + "' routes to " + reference +
                                   "; deploy another version to it first");
      }
      auto previous = parse_routes(row.text(3));
      bool rollback_target = false;
      for (const auto& route : previous.ok() ? *previous : std::vector<EndpointRoute>{}) {
        rollback_target = rollback_target || route.reference() == reference;
      }
      if (rollback_target) rollback_targets_dropped.push_back(row.text(0));
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto rollouts, sql.query("SELECT endpoint FROM rollouts WHERE state = 'running' AND "
                                                      "(canary = ? OR stable = ?)",
                                                      {reference, reference}));
    if (!rollouts.empty()) {
      return failed_precondition("a rollout on endpoint '" + rollouts.front().text(0) + "' uses " + reference);
    }
    SLIPWAY_RETURN_IF_ERROR(sql.execute("UPDATE model_versions SET retired_ms = ? WHERE model = ? AND version = ?",
                                        {unix_time_ms(), model, version})
                                .status());
    std::string detail = reference;
    for (const auto& endpoint : rollback_targets_dropped) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("UPDATE endpoints SET previous_routes = '' WHERE name = ?", {endpoint}).status());
      detail += "; endpoint " + endpoint + " no longer rolls back to it";
    }
    return append_audit(sql, *context_, "model.retire", detail);
  }));
  return rollback_targets_dropped;
}

}  // namespace slipway::registry
