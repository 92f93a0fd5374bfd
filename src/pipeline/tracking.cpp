// Tracking for training code that runs elsewhere (pipeline.h): what a client sends is checked
// whole before anything is stored, bounded per call, and every call can be retried.
#include <cmath>
#include <span>

#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

Status check_key(std::string_view key, std::string_view what) {
  bool valid = !key.empty() && key.size() <= kTrackingLimits.key_bytes;
  for (char c : key) {
    valid = valid && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '-' || c == '.' || c == '/' || c == ' ');
  }
  if (valid) return {};
  return invalid_argument(std::string(what) + " name '" + std::string(key.substr(0, 64)) + "' must be 1 to " +
                          std::to_string(kTrackingLimits.key_bytes) + " letters, digits, spaces or _ - . / characters");
}

Status check_values(const std::map<std::string, std::string>& values, std::string_view what, std::size_t max_count,
                    std::size_t max_value_bytes) {
  if (values.size() > max_count) {
    return invalid_argument("at most " + std::to_string(max_count) + " " + std::string(what) + "s a call, not " +
                            std::to_string(values.size()));
  }
  for (const auto& [key, value] : values) {
    SLIPWAY_RETURN_IF_ERROR(check_key(key, what));
    if (value.size() > max_value_bytes || !is_valid_utf8(value)) {
      return invalid_argument(std::string(what) + " '" + key + "' must be UTF-8 text of at most " +
                              std::to_string(max_value_bytes) + " bytes");
    }
  }
  return {};
}

Status check_batch(const TrackingBatch& batch) {
  SLIPWAY_RETURN_IF_ERROR(
      check_values(batch.params, "param", kTrackingLimits.params_per_call, kTrackingLimits.param_value_bytes));
  SLIPWAY_RETURN_IF_ERROR(
      check_values(batch.tags, "tag", kTrackingLimits.tags_per_call, kTrackingLimits.tag_value_bytes));
  if (batch.metrics.size() > kTrackingLimits.metrics_per_call) {
    return invalid_argument("at most " + std::to_string(kTrackingLimits.metrics_per_call) +
                            " metric values a call, not " + std::to_string(batch.metrics.size()));
  }
  constexpr std::int64_t kMaxStep = std::int64_t{1} << 53;  // what a JSON number carries exactly
  for (const auto& metric : batch.metrics) {
    SLIPWAY_RETURN_IF_ERROR(check_key(metric.key, "metric"));
    if (!std::isfinite(metric.value)) {
      return invalid_argument("metric '" + metric.key + "' must be a finite number");
    }
    if (metric.step < 0 || metric.step > kMaxStep) {
      return invalid_argument("metric '" + metric.key + "''s step must be from 0 to 2^53");
    }
    if (metric.timestamp_ms < 0) return invalid_argument("metric '" + metric.key + "''s timestamp must be 0 or more");
  }
  return {};
}

// A file's name inside its run: relative, no ".." part, no control characters.
Status check_file_path(std::string_view path) {
  bool valid = !path.empty() && path.size() <= kTrackingLimits.file_path_bytes && path.front() != '/' &&
               path.back() != '/' && is_valid_utf8(path);
  std::size_t start = 0;
  while (valid && start <= path.size()) {
    std::size_t slash = std::min(path.find('/', start), path.size());
    std::string_view part = path.substr(start, slash - start);
    valid = !part.empty() && part != "." && part != "..";
    start = slash + 1;
  }
  for (char c : path) valid = valid && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f && c != '\\';
  if (valid) return {};
  return invalid_argument("a run's file path is relative, at most " + std::to_string(kTrackingLimits.file_path_bytes) +
                          " bytes, without '.', '..' or empty parts, backslashes or control characters, not '" +
                          std::string(path.substr(0, 64)) + "'");
}

// The code version a tracked run records: what tells it from a run Slipway trained itself.
constexpr std::string_view kTrackedCodeVersion = "external";

// `run_id` as a run this API started: a run Slipway trains or imports itself takes no logs, files
// or end from a client (a token that may record runs must not rewrite another's history).
Result<registry::RunRecord> tracked_run(registry::Registry& registry, const std::string& run_id) {
  SLIPWAY_ASSIGN_OR_RETURN(auto run, registry.runs().get(run_id));
  if (run.code_version != kTrackedCodeVersion) {
    return failed_precondition("run '" + run_id +
                               "' was recorded by Slipway itself, not through the tracking API: it takes no logs, "
                               "files or end from a client");
  }
  return run;
}

}  // namespace

Result<TrackedRun> start_tracked_run(registry::Registry& registry, const TrackedRunStart& start, const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_experiment_name(start.experiment));
  TrackingBatch batch;
  batch.params = start.params;
  batch.tags = start.tags;
  SLIPWAY_RETURN_IF_ERROR(check_batch(batch));
  act_as(registry, caller);
  registry::NewRun run;
  run.experiment = start.experiment;
  run.params = start.params;
  run.tags = start.tags;
  run.run_id = start.run_id;
  run.remote = true;
  run.code_version = std::string(kTrackedCodeVersion);
  auto started = registry.runs().start(run);
  TrackedRun tracked;
  if (!started.ok() && started.status().code() == StatusCode::kAlreadyExists) {
    // A retried start: the run it made, when it is the same experiment's.
    SLIPWAY_ASSIGN_OR_RETURN(tracked.run, registry.runs().get(start.run_id));
    if (tracked.run.experiment != start.experiment) {
      return already_exists("run '" + start.run_id + "' exists in experiment '" + tracked.run.experiment + "'");
    }
    tracked.created = false;
    return tracked;
  }
  if (!started.ok()) return started.status();
  SLIPWAY_ASSIGN_OR_RETURN(tracked.run, registry.runs().get(*started));
  return tracked;
}

Status log_to_run(registry::Registry& registry, const std::string& run_id, const TrackingBatch& batch,
                  const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(check_batch(batch));
  SLIPWAY_RETURN_IF_ERROR(tracked_run(registry, run_id).status());
  act_as(registry, caller);
  if (!batch.params.empty()) SLIPWAY_RETURN_IF_ERROR(registry.runs().log_params(run_id, batch.params));
  if (!batch.metrics.empty()) SLIPWAY_RETURN_IF_ERROR(registry.runs().log_metric_steps(run_id, batch.metrics));
  if (!batch.tags.empty()) SLIPWAY_RETURN_IF_ERROR(registry.runs().set_tags(run_id, batch.tags));
  return {};
}

Result<registry::RunArtifact> store_run_file(registry::Registry& registry, const std::string& run_id,
                                             const std::string& path, std::string_view bytes,
                                             const std::string& expected_sha256, const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(check_file_path(path));
  SLIPWAY_RETURN_IF_ERROR(check_upload_sha256(bytes, expected_sha256));
  SLIPWAY_ASSIGN_OR_RETURN(auto run, tracked_run(registry, run_id));
  if (run.status != "RUNNING") {
    return failed_precondition("run '" + run_id + "' has ended; files cannot be added");
  }
  act_as(registry, caller);
  registry::RunArtifact artifact;
  artifact.path = path;
  SLIPWAY_ASSIGN_OR_RETURN(artifact.sha256,
                           registry.artifacts().put(std::as_bytes(std::span(bytes.data(), bytes.size()))));
  artifact.size_bytes = static_cast<std::int64_t>(bytes.size());
  SLIPWAY_RETURN_IF_ERROR(registry.runs().add_artifact(run_id, artifact));
  return artifact;
}

Result<registry::RunRecord> end_tracked_run(registry::Registry& registry, const std::string& run_id, bool succeeded,
                                            const Caller& caller) {
  SLIPWAY_ASSIGN_OR_RETURN(auto run, tracked_run(registry, run_id));
  std::string wanted = succeeded ? "FINISHED" : "FAILED";
  if (run.status == wanted) return run;  // a retried end
  if (run.status != "RUNNING") {
    return failed_precondition("run '" + run_id + "' is " + run.status + " already, not RUNNING");
  }
  act_as(registry, caller);
  SLIPWAY_RETURN_IF_ERROR(registry.runs().finish(run_id, succeeded, ""));
  return registry.runs().get(run_id);
}

}  // namespace slipway::pipeline
