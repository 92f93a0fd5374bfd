#include <algorithm>

#include "registry/migrations.h"

namespace slipway::registry {
namespace {

constexpr std::string_view kMigrationsTable =
    "CREATE TABLE IF NOT EXISTS schema_migrations("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms INTEGER NOT NULL)";

}  // namespace

Result<std::int64_t> applied_schema_version(MetadataBackend& backend, const std::string& where) {
  std::span<const Migration> known = backend.migrations();
  std::int64_t latest = known.empty() ? 0 : known.back().version;
  std::int64_t applied = 0;
  Status status = backend.read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(bool recorded, sql.table_exists("schema_migrations"));
    if (!recorded) return {};
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT version, name FROM schema_migrations ORDER BY version"));
    for (const auto& row : rows) applied = std::max(applied, row.integer(0));
    if (applied > latest) {
      return failed_precondition("the workspace at '" + where + "' was made by a newer slipway (schema version " +
                                 std::to_string(applied) + "; this slipway knows versions up to " +
                                 std::to_string(latest) + "); use that slipway or a later one");
    }
    for (const auto& row : rows) {
      auto same = std::find_if(known.begin(), known.end(), [&](const Migration& migration) {
        return migration.version == row.integer(0) && migration.name == row.text(1);
      });
      if (same == known.end()) {
        return failed_precondition("the workspace at '" + where + "' records schema version " +
                                   std::to_string(row.integer(0)) + " as '" + row.text(1) +
                                   "', which this slipway does not know; it was made by another build");
      }
    }
    return {};
  });
  if (!status.ok()) return status;
  return applied;
}

Result<std::int64_t> apply_migrations(MetadataBackend& backend, const std::string& where) {
  SLIPWAY_ASSIGN_OR_RETURN(std::int64_t version, applied_schema_version(backend, where));
  for (const Migration& migration : backend.migrations()) {
    if (migration.version <= version) continue;
    Status status = backend.write([&](SqlTransaction& sql) -> Status {
      SLIPWAY_RETURN_IF_ERROR(sql.execute_script(kMigrationsTable));
      SLIPWAY_ASSIGN_OR_RETURN(auto current, sql.query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
      if (current && current->integer(0) >= migration.version) return {};  // another process applied it
      SLIPWAY_RETURN_IF_ERROR(sql.execute_script(migration.sql));
      return sql
          .execute("INSERT INTO schema_migrations(version, name, applied_ms) VALUES (?, ?, ?)",
                   {migration.version, migration.name, unix_time_ms()})
          .status();
    });
    if (!status.ok()) {
      return Status(status.code(), "upgrading the workspace at '" + where + "' to schema version " +
                                       std::to_string(migration.version) + " (" + std::string(migration.name) +
                                       ") failed: " + status.message());
    }
  }
  // Read back: a newer slipway may have upgraded the workspace past us meanwhile.
  return applied_schema_version(backend, where);
}

}  // namespace slipway::registry
