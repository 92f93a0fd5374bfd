// Batch jobs: run and recorded for lineage, and their state read back; what `slipway batch` and
// /api/batch-jobs share.
#include <filesystem>

#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {

Result<batch::JobOutcome> run_batch_job(registry::Registry* registry, const LoadedReference& model,
                                        const batch::JobSpec& spec, const batch::JobProgress& progress,
                                        const Caller& caller) {
  SLIPWAY_ASSIGN_OR_RETURN(auto outcome,
                           batch::run_job({model.bundle, model.description, model.sha256}, spec, progress));
  // A job that ran is recorded, failed or not; one refused before it started is not.
  if (registry == nullptr || outcome.already_finished) return outcome;
  const batch::JobManifest& manifest = outcome.manifest;
  std::error_code error;
  std::filesystem::path out = std::filesystem::absolute(spec.out, error);
  registry::BatchJobRecord record{manifest.key,
                                  manifest.model,
                                  manifest.bundle_sha256,
                                  manifest.input,
                                  manifest.input_sha256,
                                  error ? spec.out : out.lexically_normal().string(),
                                  manifest.state,
                                  static_cast<std::int64_t>(manifest.rows),
                                  static_cast<std::int64_t>(manifest.scored),
                                  static_cast<std::int64_t>(manifest.bad),
                                  manifest.started_ms,
                                  0,
                                  ""};
  act_as(*registry, caller);
  if (Status recorded = registry->runs().record_batch_job(record); !recorded.ok()) {
    log_warn("the batch job is not in the workspace's lineage: " + recorded.message());
  }
  return outcome;
}

Result<batch::JobManifest> batch_job_status(const std::string& out) {
  SLIPWAY_ASSIGN_OR_RETURN(auto manifest, batch::read_job(out));
  if (manifest.state == "running" && !batch::job_running(out)) {
    manifest.state = "interrupted";
    manifest.reason = "no process runs it; running the same job again resumes it";
  }
  return manifest;
}

}  // namespace slipway::pipeline
