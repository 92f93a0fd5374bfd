// verify_workspace: the metadata store's own integrity check, every artifact's bytes against its
// name, every row's artifact present, orphans, and RUNNING runs whose process is gone.
#include <algorithm>
#include <map>
#include <set>

#include "registry/run_owner.h"
#include "registry/store_context.h"

namespace slipway::registry {

std::size_t VerifyReport::problem_count() const {
  std::size_t unmarked = static_cast<std::size_t>(
      std::count_if(interrupted_runs.begin(), interrupted_runs.end(), [](const RunCheck& run) { return !run.marked; }));
  return metadata_problems.size() + corrupt_artifacts.size() + missing_artifacts.size() + unmarked;
}

Result<VerifyReport> verify_workspace(Registry& registry, const VerifyOptions& options) {
  if (options.repair && registry.read_only()) {
    return failed_precondition("verify --repair needs the workspace opened for writing, not read-only");
  }
  VerifyReport report;
  report.schema_version = registry.schema_version();
  SLIPWAY_ASSIGN_OR_RETURN(report.metadata_problems, registry.context_->backend->check_integrity());
  // Rows the store holds but cannot read back (an endpoint's routes).
  SLIPWAY_ASSIGN_OR_RETURN(auto endpoints, registry.endpoints().list());
  for (const auto& endpoint : endpoints) {
    if (endpoint.damage.empty()) continue;
    report.metadata_problems.push_back("endpoint '" + endpoint.name + "' is damaged: " + endpoint.damage +
                                       "; `slipway deploy " + endpoint.name + " NAME@VERSION` replaces its routes");
  }

  // Which rows name which artifact.
  SLIPWAY_ASSIGN_OR_RETURN(auto references, registry.models().artifact_references());
  SLIPWAY_ASSIGN_OR_RETURN(auto run_references, registry.runs().artifact_references());
  references.insert(references.end(), run_references.begin(), run_references.end());
  SLIPWAY_ASSIGN_OR_RETURN(auto retraining_references, registry.retraining().artifact_references());
  references.insert(references.end(), retraining_references.begin(), retraining_references.end());
  report.references_checked = references.size();
  std::map<std::string, std::vector<std::string>> referrers;
  for (const auto& reference : references) referrers[reference.sha256].push_back(reference.referrer);

  // Every stored artifact hashes to its name.
  ArtifactStore& artifacts = registry.artifacts();
  std::vector<std::string> stored = artifacts.list();
  report.artifacts_checked = stored.size();
  for (const auto& sha256 : stored) {
    auto actual = sha256_file(artifacts.path_for(sha256));
    if (actual.ok() && *actual == sha256) {
      if (referrers.count(sha256) == 0) report.orphan_artifacts.push_back(sha256);
      continue;
    }
    VerifyReport::CorruptArtifact corrupt;
    corrupt.sha256 = sha256;
    if (actual.ok()) {
      corrupt.actual_sha256 = *actual;
    } else {
      corrupt.error = actual.status().message();
    }
    if (auto found = referrers.find(sha256); found != referrers.end()) corrupt.referrers = found->second;
    // Moved aside only when its bytes are wrong, not when it could not be read (that may pass).
    if (options.repair && actual.ok()) {
      SLIPWAY_ASSIGN_OR_RETURN(corrupt.quarantined_to, artifacts.quarantine(sha256));
      SLIPWAY_RETURN_IF_ERROR(registry.context_->backend->write([&](SqlTransaction& sql) {
        return append_audit(
            sql, *registry.context_, "artifact.quarantine",
            sha256 + " bytes hash to " + corrupt.actual_sha256 + "; moved to " + corrupt.quarantined_to);
      }));
    }
    report.corrupt_artifacts.push_back(std::move(corrupt));
  }

  // Every row's artifact is stored (a corrupt one is reported once, above).
  std::set<std::string> present(stored.begin(), stored.end());
  for (const auto& reference : references) {
    if (present.count(reference.sha256) == 0)
      report.missing_artifacts.push_back({reference.sha256, reference.referrer});
  }

  // RUNNING runs whose process is gone.
  SLIPWAY_ASSIGN_OR_RETURN(auto running, registry.runs().list_running());
  for (const auto& run : running) {
    OwnerCheck check = check_owner(run.owner);
    if (check.state == OwnerState::kAlive) continue;
    if (check.state == OwnerState::kUnknown) {
      report.unchecked_runs.push_back({run.run_id, check.reason, false});
      continue;
    }
    VerifyReport::RunCheck interrupted{run.run_id, check.reason, false};
    if (options.repair) {
      Status marked = registry.runs().mark_interrupted(run.run_id, run.owner, check.reason);
      // A run resumed or finished since it was listed is no longer this report's business.
      if (marked.code() == StatusCode::kFailedPrecondition) continue;
      SLIPWAY_RETURN_IF_ERROR(marked);
      interrupted.marked = true;
    }
    report.interrupted_runs.push_back(std::move(interrupted));
  }
  return report;
}

}  // namespace slipway::registry
