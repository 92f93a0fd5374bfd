// Model references: a bundle file, or NAME@VERSION, NAME@ALIAS, NAME@latest or NAME (the production
// alias, else the newest version) in a registry.
#include <filesystem>

#include <fmt/format.h>

#include "pipeline/step_cache.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {

bool names_bundle_file(const std::string& reference) {
  std::error_code error;
  return reference.find('/') != std::string::npos || reference.ends_with(".slip") ||
         std::filesystem::is_regular_file(reference, error);
}

Result<LoadedReference> resolve_reference(registry::Registry* registry, const std::string& reference) {
  if (names_bundle_file(reference)) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(reference, error)) return not_found("no bundle file at '" + reference + "'");
    // One read: the identity is hashed from the same mapping the bundle is parsed from.
    SLIPWAY_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(reference));
    std::string sha256 = sha256_hex(mapped.bytes());
    auto bundle = model::Bundle::parse(mapped.bytes(), sha256);
    if (!bundle.ok()) return Status(bundle.status().code(), reference + ": " + bundle.status().message());
    return LoadedReference{*bundle, reference, sha256};
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
  if (registry == nullptr) {
    return failed_precondition("model reference '" + reference + "' needs a workspace to resolve it in");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto version, registry->models().resolve(parsed.first, parsed.second));
  SLIPWAY_ASSIGN_OR_RETURN(
      auto bundle, model::Bundle::load(registry->artifacts().path_for(version.bundle_sha256), version.bundle_sha256));
  return LoadedReference{bundle, version.model + "@" + std::to_string(version.version), version.bundle_sha256};
}

namespace {

// The CSV `text` read from `path`, logging its size and the time taken since `started`.
Result<data::Table> parse_table(std::string_view text, const std::string& path, std::int64_t started) {
  SLIPWAY_ASSIGN_OR_RETURN(auto table, data::parse_csv(text, path));
  log_info(fmt::format("read {}: {} rows x {} columns in {:.2f} s", path, table.row_count(), table.column_count(),
                       static_cast<double>(monotonic_ns() - started) * 1e-9));
  return table;
}

}  // namespace

Result<data::Table> read_table(const std::string& path) {
  std::int64_t started = monotonic_ns();
  // Read, not mapped: a file truncated by another program mid-parse is an error, not SIGBUS.
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_table(text, path, started);
}

Result<EvaluationOutcome> evaluate_file(const LoadedReference& reference, const std::string& data_path,
                                        const std::string& slice, registry::Registry* cache) {
  EvaluationOutcome outcome{reference.description, reference.sha256, data_path, {}, false};
  std::string key;
  // A build that does not know its code cannot tell its results from another build's: no cache.
  if (slipway_code_version() == "unknown") cache = nullptr;
  // Read once: hashed for the cache key and parsed from the same bytes.
  std::int64_t started = monotonic_ns();
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(data_path));
  if (cache != nullptr) {
    // The file's bytes, not its path: the same file edited is another evaluation.
    key = sha256_hex(std::string(slipway_code_version()) + "\n" + reference.sha256 + "\n" + sha256_hex(text) + "\n" +
                     slice);
    SLIPWAY_ASSIGN_OR_RETURN(auto cached, cache->runs().cached_step("eval", key));
    if (cached) {
      auto evaluation = read_evaluation_record(cached->result);
      if (evaluation.ok()) {
        log_info("reused the evaluation of " + reference.description + " on these bytes of " + data_path +
                 " (--no-cache evaluates again)");
        outcome.evaluation = std::move(evaluation).value();
        outcome.cached = true;
        return outcome;
      }
      log_warn(evaluation.status().message() + "; evaluating again");
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto table, parse_table(text, data_path, started));
  SLIPWAY_ASSIGN_OR_RETURN(outcome.evaluation, eval::evaluate(*reference.bundle, table, slice));
  if (outcome.evaluation.rows_missing_target > 0) {
    log_warn(fmt::format("skipped {} rows whose target '{}' is empty", outcome.evaluation.rows_missing_target,
                         reference.bundle->manifest().target));
  }
  if (cache != nullptr) {
    Status recorded = cache->runs().record_cached_step({"eval", key, "", evaluation_record(outcome.evaluation), 0});
    if (!recorded.ok()) log_warn("the evaluation is not in the step cache: " + recorded.message());
  }
  return outcome;
}

}  // namespace slipway::pipeline
