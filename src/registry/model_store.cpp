// Models, their numbered versions (each naming a bundle in the artifact store) and aliases.
#include <algorithm>

#include "registry/store_context.h"

namespace slipway::registry {

Status check_model_exists(SqlTransaction& sql, const std::string& model) {
  SLIPWAY_ASSIGN_OR_RETURN(auto exists, sql.query_row("SELECT 1 FROM models WHERE name = ?", {model}));
  if (!exists) return not_found("no model named '" + model + "'; `slipway models` lists them");
  return {};
}

namespace {

// Ascending version order, each with its aliases. NotFound for an unknown model.
Result<std::vector<ModelVersion>> read_versions(SqlTransaction& sql, const std::string& model) {
  SLIPWAY_RETURN_IF_ERROR(check_model_exists(sql, model));
  SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT version, bundle_sha256, COALESCE(run_id, ''), creator, "
                                                "created_ms, description, retired_ms FROM model_versions WHERE "
                                                "model = ? "
                                                "ORDER BY version",
                                                {model}));
  std::vector<ModelVersion> versions;
  versions.reserve(rows.size());
  for (const auto& row : rows) {
    ModelVersion version{model, row.integer(0), row.text(1), row.text(2), row.text(3), row.integer(4), {}};
    version.description = row.text(5);
    version.retired_ms = row.integer(6);
    versions.push_back(std::move(version));
  }
  auto find = [&versions](std::int64_t number) -> ModelVersion* {
    for (auto& version : versions) {
      if (version.version == number) return &version;
    }
    return nullptr;
  };
  SLIPWAY_ASSIGN_OR_RETURN(auto tags, sql.query("SELECT version, key, value FROM model_tags WHERE model = ? AND "
                                                "version > 0 ORDER BY version, key",
                                                {model}));
  for (const auto& row : tags) {
    if (ModelVersion* version = find(row.integer(0))) version->tags[row.text(1)] = row.text(2);
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto approvals, sql.query("SELECT version, approver, note, approved_ms FROM approvals "
                                                     "WHERE model = ?",
                                                     {model}));
  for (const auto& row : approvals) {
    if (ModelVersion* version = find(row.integer(0)))
      version->approval = Approval{row.text(1), row.text(2), row.integer(3)};
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto aliases,
                           sql.query("SELECT alias, version FROM aliases WHERE model = ? ORDER BY alias", {model}));
  for (const auto& row : aliases) {
    for (auto& version : versions) {
      if (version.version == row.integer(1)) version.aliases.push_back(row.text(0));
    }
  }
  return versions;
}

}  // namespace

Result<ModelVersion> ModelStore::register_version(const std::string& model, const std::string& bundle_sha256,
                                                  const std::string& run_id) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(model));
  if (!context_->artifacts.contains(bundle_sha256)) {
    return failed_precondition("bundle " + bundle_sha256 +
                               " is not in the artifact store; store it before registering");
  }
  ModelVersion version;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    std::int64_t now = unix_time_ms();
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO models(name, created_ms) VALUES (?, ?) ON CONFLICT(name) DO NOTHING", {model, now})
            .status());
    // Writers are serialized, so no other registration takes this number before the commit.
    SLIPWAY_ASSIGN_OR_RETURN(
        auto next, sql.query_row("SELECT COALESCE(MAX(version), 0) + 1 FROM model_versions WHERE model = ?", {model}));
    if (!next) return internal_error("could not compute the next version number");
    version = {model, next->integer(0), bundle_sha256, run_id, context_->actor, now, {}};
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO model_versions(model, version, bundle_sha256, run_id, creator, "
                    "created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                    {model, version.version, bundle_sha256, SqlValue::text_or_null(run_id), version.creator, now})
            .status());
    SLIPWAY_RETURN_IF_ERROR(append_audit(sql, *context_, "model.register",
                                         model + "@" + std::to_string(version.version) + " sha256=" + bundle_sha256));
    crash_point("registry.before_commit");
    return {};
  }));
  return version;
}

Result<std::vector<ModelSummary>> ModelStore::list() {
  std::vector<ModelSummary> models;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT m.name, m.created_ms, COALESCE(MAX(v.version), 0), "
                                                  "COUNT(v.version), m.description, m.owner FROM models m "
                                                  "LEFT JOIN model_versions v ON v.model = m.name "
                                                  "GROUP BY m.name, m.created_ms, m.description, m.owner "
                                                  "ORDER BY m.name"));
    for (const auto& row : rows) {
      ModelSummary summary{row.text(0), row.integer(1), row.integer(2), row.integer(3), {}};
      summary.description = row.text(4);
      summary.owner = row.text(5);
      models.push_back(std::move(summary));
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto tags, sql.query("SELECT model, key, value FROM model_tags WHERE version = 0"));
    for (const auto& row : tags) {
      for (auto& summary : models) {
        if (summary.name == row.text(0)) summary.tags[row.text(1)] = row.text(2);
      }
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto aliases,
                             sql.query("SELECT model, alias, version FROM aliases ORDER BY model, alias"));
    for (const auto& row : aliases) {
      for (auto& summary : models) {
        if (summary.name == row.text(0)) summary.aliases[row.text(1)] = row.integer(2);
      }
    }
    return {};
  }));
  return models;
}

Result<std::vector<ModelVersion>> ModelStore::list_versions(const std::string& model) {
  std::vector<ModelVersion> versions;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(versions, read_versions(sql, model));
    return {};
  }));
  return versions;
}

Result<ModelVersion> ModelStore::resolve(const std::string& model, const VersionSelector& selector) {
  SLIPWAY_ASSIGN_OR_RETURN(auto versions, list_versions(model));
  if (versions.empty()) return not_found("model '" + model + "' has no versions");
  if (const ModelVersion* selected = select_version(versions, selector)) return *selected;
  if (selector.version) {
    return not_found("model '" + model + "' has no version " + std::to_string(*selector.version) + " (latest is " +
                     std::to_string(versions.back().version) + ")");
  }
  if (!selector.alias.empty()) return not_found("model '" + model + "' has no alias '" + selector.alias + "'");
  return failed_precondition("every version of model '" + model + "' is retired; name one as " + model + "@N");
}

Status ModelStore::set_alias(const std::string& model, const std::string& alias, std::int64_t version) {
  SLIPWAY_RETURN_IF_ERROR(validate_alias_name(alias));
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto exists, sql.query_row("SELECT retired_ms FROM model_versions WHERE model = ? AND "
                                                        "version = ?",
                                                        {model, version}));
    if (!exists) return not_found("model '" + model + "' has no version " + std::to_string(version));
    if (exists->integer(0) > 0) return failed_precondition(model + "@" + std::to_string(version) + " is retired");
    SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO aliases(model, alias, version) VALUES (?, ?, ?) "
                                        "ON CONFLICT(model, alias) DO UPDATE SET version = excluded.version",
                                        {model, alias, version})
                                .status());
    return append_audit(sql, *context_, "alias.set", model + "@" + alias + " -> " + std::to_string(version));
  });
}

Result<std::vector<ArtifactReference>> ModelStore::artifact_references() {
  std::vector<ArtifactReference> references;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(
        auto rows, sql.query("SELECT model, version, bundle_sha256 FROM model_versions ORDER BY model, version"));
    for (const auto& row : rows) {
      references.push_back({row.text(2), "model " + row.text(0) + "@" + std::to_string(row.integer(1))});
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto gates,
                             sql.query("SELECT model, version, report_sha256 FROM gate_results ORDER BY id"));
    for (const auto& row : gates) {
      references.push_back({row.text(2), "gate report of " + row.text(0) + "@" + std::to_string(row.integer(1))});
    }
    return {};
  }));
  return references;
}

void write_model_version_fields(JsonWriter& json, const ModelVersion& version) {
  json.key("version").value(version.version).key("bundle_sha256").value(version.bundle_sha256);
  json.key("run_id").value(version.run_id).key("creator").value(version.creator);
  json.key("created_ms").value(version.created_ms);
  json.key("aliases").begin_array();
  for (const auto& alias : version.aliases) json.value(alias);
  json.end_array();
  json.key("retired_ms").value(version.retired_ms);
  json.key("description").value(version.description).key("tags").begin_object();
  for (const auto& [key, value] : version.tags) json.key(key).value(value);
  json.end_object();
  if (version.approval) {
    json.key("approval").begin_object().key("approver").value(version.approval->approver);
    json.key("note").value(version.approval->note).key("approved_ms").value(version.approval->approved_ms);
    json.end_object();
  }
}

void write_model_summary_json(JsonWriter& json, const ModelSummary& model) {
  json.begin_object().key("name").value(model.name).key("latest_version").value(model.latest_version);
  json.key("versions").value(model.version_count).key("created_ms").value(model.created_ms);
  json.key("aliases").begin_object();
  for (const auto& [alias, version] : model.aliases) json.key(alias).value(version);
  json.end_object().key("description").value(model.description).key("owner").value(model.owner);
  json.key("tags").begin_object();
  for (const auto& [key, value] : model.tags) json.key(key).value(value);
  json.end_object().end_object();
}

}  // namespace slipway::registry
