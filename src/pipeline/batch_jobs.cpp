// Batch jobs recorded for lineage, optimization records, and serving configs: the operations
// `slipway batch`, `versions`/`optimize` and `serving-config` share with /api.
#include <filesystem>

#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"
#include "slipway/serve.h"

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
    manifest.reason = "no process runs it; the same job started again resumes it";
  }
  return manifest;
}

std::vector<std::map<std::string, std::string>> optimization_records(
    registry::Registry& registry, const std::string& model, const std::vector<registry::ModelVersion>& versions) {
  std::vector<std::map<std::string, std::string>> records;
  for (const auto& version : versions) {
    auto loaded = resolve_reference(&registry, model + "@" + std::to_string(version.version));
    records.push_back(loaded.ok() ? loaded->bundle->manifest().optimization : std::map<std::string, std::string>());
  }
  return records;
}

Result<ServingConfigView> serving_config(registry::Registry& registry, const std::string& model) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  SLIPWAY_RETURN_IF_ERROR(registry.models().list_versions(model).status());
  ServingConfigView view;
  SLIPWAY_ASSIGN_OR_RETURN(view.stored, registry.serving_configs().get(model));
  SLIPWAY_ASSIGN_OR_RETURN(auto effective, serve::apply_serving_config({}, view.stored));
  view.effective = serve::serving_config_values(effective);
  return view;
}

Result<ServingConfigView> set_serving_config(registry::Registry& registry, const std::string& model,
                                             const std::map<std::string, std::string>& given, bool reset,
                                             const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  SLIPWAY_RETURN_IF_ERROR(registry.models().list_versions(model).status());
  SLIPWAY_ASSIGN_OR_RETURN(auto stored, registry.serving_configs().get(model));
  std::map<std::string, std::string> merged = reset ? given : stored;
  for (const auto& [key, value] : given) merged[key] = value;
  // Checked whole, so that a stored config always applies.
  SLIPWAY_RETURN_IF_ERROR(serve::apply_serving_config({}, merged).status());
  act_as(registry, caller);
  SLIPWAY_RETURN_IF_ERROR(registry.serving_configs().set(model, given, reset));
  return serving_config(registry, model);
}

}  // namespace slipway::pipeline
