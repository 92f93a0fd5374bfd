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

Result<std::vector<AuditEntry>> AuditLog::query(const AuditFilter& filter) {
  std::vector<AuditEntry> entries;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows,
                             sql.query(std::string("SELECT id, time_ms, actor, action, detail FROM audit_log "
                                                   "WHERE time_ms >= ? AND (? = 0 OR id < ?) ORDER BY id") +
                                           (filter.newest_first ? " DESC" : ""),
                                       {filter.since_ms, filter.before_id, filter.before_id}));
    for (auto& row : rows) {
      if (filter.newest_first && filter.limit > 0 && entries.size() == filter.limit) break;
      AuditEntry entry{row.integer(0), row.integer(1), row.text(2), row.text(3), row.text(4)};
      if (!filter.model.empty()) {
        // About the model: it names the model (NAME, NAME@..., "NAME "), or routes to it.
        const std::string& detail = entry.detail;
        bool about =
            detail == filter.model || detail.starts_with(filter.model + "@") || detail.starts_with(filter.model + " ");
        for (std::size_t at = detail.find(filter.model + "@"); !about && at != std::string::npos;
             at = detail.find(filter.model + "@", at + 1)) {
          char before = at == 0 ? ' ' : detail[at - 1];
          about = before == ' ' || before == ',' || before == '(';
        }
        if (!about) continue;
      }
      entries.push_back(std::move(entry));
    }
    return {};
  }));
  if (filter.limit > 0 && entries.size() > filter.limit) {
    entries.erase(entries.begin(), entries.end() - static_cast<std::ptrdiff_t>(filter.limit));
  }
  return entries;
}

}  // namespace slipway::registry
