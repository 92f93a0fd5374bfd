// Operations on registered models that every front door shares (pipeline.h): aliases, and a
// bundle file's bytes registered as a version.
#include <span>

#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {

Status set_alias(registry::Registry& registry, const std::string& model, const std::string& alias, std::int64_t version,
                 const Caller& caller) {
  act_as(registry, caller);
  return registry.models().set_alias(model, alias, version);
}

Result<RegisteredFile> register_bundle_bytes(registry::Registry& registry, const std::string& model,
                                             std::string_view bytes, const std::string& expected_sha256,
                                             const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  SLIPWAY_RETURN_IF_ERROR(check_upload_sha256(bytes, expected_sha256));
  auto span = std::as_bytes(std::span(bytes.data(), bytes.size()));
  // Loaded before anything is stored: bytes that do not load as a bundle are refused with why.
  auto bundle = model::Bundle::parse(span);
  if (!bundle.ok())
    return invalid_argument("the file is not a bundle this slipway can serve: " + bundle.status().message());
  // The same bytes again (a retried upload) are the version they made.
  auto versions = registry.models().list_versions(model);
  if (versions.ok()) {
    for (const auto& version : *versions) {
      if (version.bundle_sha256 == expected_sha256) return RegisteredFile{version, false};
    }
  } else if (versions.status().code() != StatusCode::kNotFound) {
    return versions.status();
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto version,
                           register_imported_bytes(registry, model, span, "import: bundle\nsource: upload\n",
                                                   (*bundle)->manifest().params, true, caller));
  return RegisteredFile{std::move(version), true};
}

Result<registry::ModelVersion> register_bundle(registry::Registry& registry, const std::string& model,
                                               const model::Bundle& bundle, const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  act_as(registry, caller);
  SLIPWAY_ASSIGN_OR_RETURN(std::string sha256, registry.artifacts().put(bundle.serialize()));
  return registry.models().register_version(model, sha256, "");
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

}  // namespace slipway::pipeline
