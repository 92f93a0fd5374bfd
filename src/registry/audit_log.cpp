// The audit log: who changed what, when; one entry per mutation, in the mutation's transaction.
#include "registry/store_context.h"

namespace slipway::registry {

Status append_audit(SqlTransaction& sql, const StoreContext& context, std::string_view action,
                    std::string_view detail) {
  return sql
      .execute("INSERT INTO audit_log(time_ms, actor, action, detail) VALUES (?, ?, ?, ?)",
               {unix_time_ms(), context.actor, action, detail})
      .status();
}

Result<std::vector<std::string>> AuditLog::entries() {
  std::vector<std::string> entries;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT time_ms, actor, action, detail FROM audit_log ORDER BY id"));
    for (const auto& row : rows) {
      entries.push_back(std::to_string(row.integer(0)) + " " + row.text(1) + " " + row.text(2) + " " + row.text(3));
    }
    return {};
  }));
  return entries;
}

}  // namespace slipway::registry
