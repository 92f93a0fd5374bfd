// collect_garbage: artifacts that nothing in the workspace names any more.
#include <filesystem>
#include <set>

#include "registry/store_context.h"

namespace slipway::registry {
namespace {

// Every artifact a row names: versions' bundles, runs' bundles and checkpoints, gate reports, and
// the gate reports and training data of retrainings.
Result<std::set<std::string>> referenced(SqlTransaction& sql) {
  std::set<std::string> names;
  for (std::string_view query :
       {"SELECT bundle_sha256 FROM model_versions", "SELECT bundle_sha256 FROM runs WHERE bundle_sha256 IS NOT NULL",
        "SELECT bundle_sha256 FROM checkpoints", "SELECT report_sha256 FROM gate_results",
        "SELECT gate_report_sha256 FROM retrainings WHERE gate_report_sha256 <> ''",
        "SELECT data_sha256 FROM retrainings WHERE data_sha256 <> ''"}) {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query(query));
    for (const auto& row : rows) names.insert(row.text(0));
  }
  return names;
}

}  // namespace

Result<GcReport> collect_garbage(Registry& registry, const GcOptions& options) {
  if (options.apply && registry.read_only()) {
    return failed_precondition("gc --apply needs the workspace opened for writing, not read-only");
  }
  GcReport report;
  ArtifactStore& artifacts = registry.artifacts();
  // In one transaction with the deletion (a write one for --apply, which keeps every writer out):
  // no version or run can start naming an artifact between the check and the deletion. Deleting a
  // file twice, should the body run again, deletes nothing more.
  auto body = [&](SqlTransaction& sql) -> Status {
    report = GcReport{};
    SLIPWAY_ASSIGN_OR_RETURN(std::set<std::string> names, referenced(sql));
    auto now = std::filesystem::file_time_type::clock::now();
    for (const auto& sha256 : artifacts.list()) {
      if (names.count(sha256) != 0) continue;
      std::error_code error;
      std::string path = artifacts.path_for(sha256);
      auto modified = std::filesystem::last_write_time(path, error);
      if (error) continue;  // gone meanwhile
      auto bytes = std::filesystem::file_size(path, error);
      if (error) continue;
      auto age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - modified).count();
      if (age_ms < options.min_age_ms) {
        ++report.too_young;
        continue;
      }
      report.unreferenced.push_back({sha256, static_cast<std::uint64_t>(bytes), age_ms});
    }
    if (!options.apply) return {};
    for (const auto& artifact : report.unreferenced) {
      std::error_code error;
      if (std::filesystem::remove(artifacts.path_for(artifact.sha256), error)) report.bytes_freed += artifact.bytes;
      if (error) return io_error("cannot delete " + artifacts.path_for(artifact.sha256) + ": " + error.message());
    }
    report.applied = true;
    return append_audit(
        sql, *registry.context_, "artifact.gc",
        std::to_string(report.unreferenced.size()) + " artifacts, " + std::to_string(report.bytes_freed) + " bytes");
  };
  SLIPWAY_RETURN_IF_ERROR(options.apply ? registry.context_->backend->write(body)
                                        : registry.context_->backend->read(body));
  return report;
}

}  // namespace slipway::registry
