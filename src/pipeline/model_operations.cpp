// Operations on registered models that every front door shares (pipeline.h): aliases, and a
// bundle file's bytes registered as a version.
#include <span>

#include "slipway/pipeline.h"

namespace slipway::pipeline {

Status set_alias(registry::Registry& registry, const std::string& model, const std::string& alias, std::int64_t version,
                 const Caller& caller) {
  if (!caller.actor.empty()) registry.set_actor(caller.actor);
  return registry.models().set_alias(model, alias, version);
}

Result<RegisteredFile> register_bundle_bytes(registry::Registry& registry, const std::string& model,
                                             std::string_view bytes, const std::string& expected_sha256,
                                             const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  std::string actual = sha256_hex(bytes);
  if (expected_sha256 != actual) {
    return invalid_argument("the file's bytes hash to sha256 " + actual + ", not the " +
                            (expected_sha256.empty() ? std::string("(missing)") : expected_sha256.substr(0, 64)) +
                            " sent with them: it was truncated or changed on the way, and nothing was stored");
  }
  auto span = std::as_bytes(std::span(bytes.data(), bytes.size()));
  // Loaded before anything is stored: bytes that do not load as a bundle are refused with why.
  auto bundle = model::Bundle::parse(span);
  if (!bundle.ok())
    return invalid_argument("the file is not a bundle this slipway can serve: " + bundle.status().message());
  // The same bytes again (a retried upload) are the version they made.
  auto versions = registry.models().list_versions(model);
  if (versions.ok()) {
    for (const auto& version : *versions) {
      if (version.bundle_sha256 == actual) return RegisteredFile{version, false};
    }
  } else if (versions.status().code() != StatusCode::kNotFound) {
    return versions.status();
  }
  if (!caller.actor.empty()) registry.set_actor(caller.actor);
  registry::NewRun run;
  run.experiment = "imports";
  run.code_version = std::string(slipway_code_version());
  run.spec = "import: bundle\nsource: upload\n";
  run.params = (*bundle)->manifest().params;
  run.remote = true;
  SLIPWAY_ASSIGN_OR_RETURN(auto run_id, registry.runs().start(run));
  auto stored = registry.artifacts().put(span);
  if (!stored.ok()) {
    (void)registry.runs().finish(run_id, false, "");
    return stored.status();
  }
  SLIPWAY_RETURN_IF_ERROR(registry.runs().finish(run_id, true, *stored));
  SLIPWAY_ASSIGN_OR_RETURN(auto version, registry.models().register_version(model, *stored, run_id));
  return RegisteredFile{std::move(version), true};
}

}  // namespace slipway::pipeline
