// Workspace upkeep (pipeline.h): verification and garbage collection, as `slipway verify` and
// `slipway gc` and the management API's /api/workspace routes do them, with the JSON both print.
#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {

Result<registry::VerifyReport> verify_workspace(registry::Registry& registry, bool repair, const Caller& caller) {
  if (repair && !caller.may_administer) return permission_denied("repairing the workspace is an admin act");
  act_as(registry, caller);
  return registry::verify_workspace(registry, {.repair = repair});
}

void write_verify_report_json(JsonWriter& json, std::string_view home, const registry::VerifyReport& report,
                              bool repair) {
  json.begin_object();
  if (!home.empty()) json.key("home").value(home);
  json.key("schema_version").value(report.schema_version).key("repair").value(repair);
  json.key("artifacts_checked").value(static_cast<std::uint64_t>(report.artifacts_checked));
  json.key("references_checked").value(static_cast<std::uint64_t>(report.references_checked));
  json.key("metadata_problems").begin_array();
  for (const auto& problem : report.metadata_problems) json.value(problem);
  json.end_array().key("corrupt_artifacts").begin_array();
  for (const auto& corrupt : report.corrupt_artifacts) {
    json.begin_object().key("sha256").value(corrupt.sha256).key("actual_sha256").value(corrupt.actual_sha256);
    json.key("error").value(corrupt.error).key("referrers").begin_array();
    for (const auto& referrer : corrupt.referrers) json.value(referrer);
    json.end_array().key("quarantined_to").value(corrupt.quarantined_to).end_object();
  }
  json.end_array().key("missing_artifacts").begin_array();
  for (const auto& missing : report.missing_artifacts) {
    json.begin_object().key("sha256").value(missing.sha256).key("referrer").value(missing.referrer).end_object();
  }
  json.end_array().key("orphan_artifacts").begin_array();
  for (const auto& orphan : report.orphan_artifacts) json.value(orphan);
  json.end_array();
  auto runs = [&](std::string_view key, const std::vector<registry::VerifyReport::RunCheck>& checks) {
    json.key(key).begin_array();
    for (const auto& run : checks) {
      json.begin_object().key("run_id").value(run.run_id).key("reason").value(run.reason);
      json.key("marked").value(run.marked).end_object();
    }
    json.end_array();
  };
  runs("interrupted_runs", report.interrupted_runs);
  runs("unchecked_runs", report.unchecked_runs);
  json.key("problems").value(static_cast<std::uint64_t>(report.problem_count())).end_object();
}

Result<registry::GcReport> collect_garbage(registry::Registry& registry, bool apply, std::int64_t min_age_ms,
                                           const Caller& caller) {
  if (apply && !caller.may_administer) return permission_denied("deleting artifacts is an admin act");
  if (min_age_ms < 0) return invalid_argument("the minimum age of an artifact to collect cannot be negative");
  act_as(registry, caller);
  registry::GcOptions options;
  options.apply = apply;
  options.min_age_ms = min_age_ms;
  return registry::collect_garbage(registry, options);
}

void write_gc_report_json(JsonWriter& json, const registry::GcReport& report) {
  json.begin_object().key("applied").value(report.applied).key("artifacts").begin_array();
  for (const auto& artifact : report.unreferenced) {
    json.begin_object().key("sha256").value(artifact.sha256).key("bytes").value(artifact.bytes);
    json.key("age_ms").value(artifact.age_ms).end_object();
  }
  json.end_array().key("too_young").value(static_cast<std::uint64_t>(report.too_young));
  json.key("bytes_freed").value(report.bytes_freed).end_object();
}

}  // namespace slipway::pipeline
