// The operations on endpoints, versions and approvals that every front door shares (pipeline.h):
// the CLI's deploy, rollback, approve, retire and gate, and the management API's routes for them.
// The store enforces what must hold inside a transaction (an approval requirement, the shares at
// routing resolution); what needs more than the store (the gate, a constant fallback against the
// bundle it answers for, the caller's rights) is checked here, once.
#include <span>

#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

// Text a person typed that is stored and printed back (an owner, an approval note): UTF-8 with
// no control characters, which would reach terminals and logs raw.
Status check_plain_text(std::string_view text, std::string_view what, std::size_t max_bytes, bool may_be_empty) {
  if (text.empty() && !may_be_empty) return invalid_argument(std::string(what) + " must not be empty");
  if (text.size() > max_bytes || !is_valid_utf8(text)) {
    return invalid_argument(std::string(what) + " must be UTF-8 text of at most " + std::to_string(max_bytes) +
                            " bytes");
  }
  if (has_control_characters(text)) {
    return invalid_argument(std::string(what) + " must not hold control characters (such as NUL, ESC or newlines)");
  }
  return {};
}

Result<registry::ModelVersion> resolve_version(registry::Registry& registry, const std::string& reference) {
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
  return registry.models().resolve(parsed.first, parsed.second);
}

Result<registry::Endpoint> endpoint_named(registry::Registry& registry, const std::string& endpoint) {
  SLIPWAY_ASSIGN_OR_RETURN(auto found, registry.endpoints().get(endpoint));
  if (!found) return not_found("no endpoint named '" + endpoint + "'; `slipway endpoints` lists them");
  return std::move(*found);
}

// The settings to store: the shadow resolved to a pinned version, the values checked.
Result<registry::EndpointSettings> settings_to_store(registry::Registry& registry,
                                                     const EndpointSettingsRequest& request) {
  registry::EndpointSettings settings = request.settings;
  if (settings.owner) SLIPWAY_RETURN_IF_ERROR(check_plain_text(*settings.owner, "the owner", 256, true));
  if (!request.shadow_reference.empty() && request.remove_shadow) {
    return invalid_argument("a shadow to set and the shadow removed do not go together");
  }
  settings.shadow.reset();
  if (request.remove_shadow) settings.shadow = registry::EndpointRoute{};
  if (!request.shadow_reference.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto shadow, resolve_version(registry, request.shadow_reference));
    settings.shadow = registry::EndpointRoute{shadow.model, shadow.version, request.shadow_percent};
  }
  if (settings.fallback) SLIPWAY_RETURN_IF_ERROR(registry::validate_fallback(*settings.fallback));
  return settings;
}

// Checks what the store cannot (a constant fallback against the main version's bundle, the
// right to change the approval requirement), then stores the settings.
Status apply_settings(registry::Registry& registry, const std::string& endpoint,
                      const registry::EndpointSettings& settings, const Caller& caller) {
  SLIPWAY_ASSIGN_OR_RETURN(auto current, endpoint_named(registry, endpoint));
  if (settings.require_approval && !*settings.require_approval && current.require_approval && !caller.may_administer) {
    // Lifting the requirement would let a deploy token ship an unapproved version, then set it
    // back: as much an admin act as approving. Requiring approval only narrows what may ship.
    return permission_denied("lifting endpoint '" + endpoint +
                             "''s approval requirement is an admin act; this caller may deploy, not approve");
  }
  if (settings.fallback && settings.fallback->starts_with("constant:") && !current.routes.empty()) {
    // The constant must fit what the endpoint serves: checked against its main version.
    SLIPWAY_ASSIGN_OR_RETURN(auto main, resolve_reference(&registry, registry::main_route(current.routes).reference()));
    SLIPWAY_RETURN_IF_ERROR(
        model::constant_fallback_scores(*main.bundle, std::string_view(*settings.fallback).substr(9)).status());
  }
  return registry.endpoints().configure(endpoint, settings);
}

bool has_settings(const registry::EndpointSettings& settings) {
  return settings.owner || settings.require_approval || settings.deadline_ms || settings.slo || settings.fallback ||
         settings.shadow;
}

Status check_deploy_shape(const DeployRequest& request) {
  bool settings_only = request.reference.empty() && !request.promote && !request.settings.empty();
  if (!settings_only && request.promote != request.reference.empty()) {
    return invalid_argument(
        "give the version to deploy (NAME@VERSION), promote to promote the canary, or settings alone (fallback, "
        "deadline, slo, shadow, owner, require_approval)");
  }
  if (request.canary && request.promote) return invalid_argument("a canary and a promotion do not go together");
  if (!request.steps.empty() && (request.canary || request.promote)) {
    return invalid_argument("steps start a rollout of the version; they do not go with a canary or a promotion");
  }
  if (request.gate && request.reference.empty()) {
    return invalid_argument("a gate checks the version being deployed: give it (a promotion is not gated)");
  }
  if (request.gate && request.gate->criteria.metric.empty()) {
    return invalid_argument("a gate needs a metric (auc, log_loss, rmse, ...) and a threshold");
  }
  if (request.canary) {
    SLIPWAY_RETURN_IF_ERROR(registry::share_at_resolution(*request.canary, "a canary's share", true).status());
  }
  if (!request.steps.empty()) SLIPWAY_RETURN_IF_ERROR(registry::check_rollout_steps(request.steps).status());
  return {};
}

}  // namespace

bool EndpointSettingsRequest::empty() const {
  return !has_settings(settings) && shadow_reference.empty() && !remove_shadow;
}

void write_gate_outcome_json(JsonWriter& json, const GateOutcome& outcome) {
  json.begin_object().key("candidate").value(outcome.candidate).key("baseline").value(outcome.baseline);
  json.key("data").value(outcome.data_path);
  eval::write_gate_report_fields(json, outcome.report);
  if (!outcome.report_sha256.empty()) json.key("report_sha256").value(outcome.report_sha256);
  json.end_object();
}

Result<GateOutcome> run_gate(registry::Registry* registry, const GateRequest& request, const Caller& caller) {
  if (request.baseline.empty()) return invalid_argument("a gate needs a baseline (a model reference)");
  if (request.data_path.empty()) return invalid_argument("a gate needs labelled rows (a data file)");
  if (request.criteria.metric.empty()) return invalid_argument("a gate needs a metric (auc, log_loss, rmse, ...)");
  // Results of registered versions are recorded with them; bundle files are only checked.
  bool registered = !names_bundle_file(request.candidate) && !names_bundle_file(request.baseline);
  if (registered && registry == nullptr) {
    return failed_precondition("a gate of registered versions needs the workspace that holds them");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto candidate, resolve_reference(registry, request.candidate));
  SLIPWAY_ASSIGN_OR_RETURN(auto baseline, resolve_reference(registry, request.baseline));
  SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(request.data_path));
  GateOutcome outcome;
  outcome.candidate = candidate.description;
  outcome.baseline = baseline.description;
  outcome.data_path = request.data_path;
  SLIPWAY_ASSIGN_OR_RETURN(outcome.report,
                           eval::gate(*baseline.bundle, *candidate.bundle, table, request.criteria, request.slice));
  if (!registered) return outcome;
  act_as(*registry, caller);
  JsonWriter json;
  write_gate_outcome_json(json, outcome);
  std::string report = json.take();
  SLIPWAY_ASSIGN_OR_RETURN(outcome.report_sha256, registry->artifacts().put(std::as_bytes(std::span(report))));
  SLIPWAY_ASSIGN_OR_RETURN(auto candidate_version, registry::parse_model_reference(candidate.description));
  SLIPWAY_ASSIGN_OR_RETURN(auto baseline_version, registry::parse_model_reference(baseline.description));
  registry::GateRecord record;
  record.model = candidate_version.first;
  record.version = candidate_version.second.version.value_or(0);
  record.baseline_model = baseline_version.first;
  record.baseline_version = baseline_version.second.version.value_or(0);
  record.data_fingerprint = data::fingerprint(table);
  record.metric = request.criteria.metric;
  record.criteria = eval::format_gate_thresholds(request.criteria);
  record.passed = outcome.passed();
  record.report_sha256 = outcome.report_sha256;
  SLIPWAY_RETURN_IF_ERROR(registry->models().record_gate(record));
  return outcome;
}

Result<registry::Endpoint> configure_endpoint(registry::Registry& registry, const std::string& endpoint,
                                              const EndpointSettingsRequest& request, const Caller& caller) {
  act_as(registry, caller);
  SLIPWAY_ASSIGN_OR_RETURN(auto settings, settings_to_store(registry, request));
  SLIPWAY_RETURN_IF_ERROR(apply_settings(registry, endpoint, settings, caller));
  return endpoint_named(registry, endpoint);
}

Result<DeployOutcome> deploy(registry::Registry& registry, const DeployRequest& request, const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(check_deploy_shape(request));
  act_as(registry, caller);
  SLIPWAY_ASSIGN_OR_RETURN(auto settings, settings_to_store(registry, request.settings));
  bool changes_settings = has_settings(settings);
  SLIPWAY_ASSIGN_OR_RETURN(auto existing, registry.endpoints().get(request.endpoint));
  // Settings go first on an endpoint that exists (so a new approval requirement holds for this
  // deploy), and after the deploy that creates one.
  bool settings_applied = false;
  if (changes_settings && (existing.has_value() || (request.reference.empty() && !request.promote))) {
    SLIPWAY_RETURN_IF_ERROR(apply_settings(registry, request.endpoint, settings, caller));
    settings_applied = true;
  }
  DeployOutcome outcome;
  auto finish = [&]() -> Result<DeployOutcome> {
    if (changes_settings && !settings_applied) {
      SLIPWAY_RETURN_IF_ERROR(apply_settings(registry, request.endpoint, settings, caller));
    }
    SLIPWAY_ASSIGN_OR_RETURN(outcome.endpoint, endpoint_named(registry, request.endpoint));
    return std::move(outcome);
  };
  if (request.reference.empty() && !request.promote) return finish();
  if (request.promote) {
    SLIPWAY_RETURN_IF_ERROR(registry.endpoints().promote(request.endpoint).status());
    return finish();
  }
  // Aliases and "latest" are resolved now: an endpoint routes to pinned versions, so moving an
  // alias later does not change what it serves.
  SLIPWAY_ASSIGN_OR_RETURN(auto version, resolve_version(registry, request.reference));
  std::string pinned = version.model + "@" + std::to_string(version.version);
  bool beside_main = request.canary.has_value() || !request.steps.empty();
  if (beside_main && existing && !existing->routes.empty() && request.reference.find('@') == std::string::npos &&
      registry::main_route(existing->routes).reference() == pinned) {
    // The store refuses it too; this says why a bare NAME landed on the version already served.
    return failed_precondition("endpoint '" + request.endpoint + "' already serves " + pinned + ", which a bare " +
                               request.reference + " names (its production alias); name the version to try: " +
                               request.reference + "@VERSION or " + request.reference + "@latest");
  }
  if (request.gate) {
    // The gate first, against what the endpoint mostly serves now.
    if (!existing || existing->routes.empty()) {
      return failed_precondition("a gate compares with the version endpoint '" + request.endpoint +
                                 "' serves, and it serves none yet");
    }
    GateRequest gate = *request.gate;
    gate.candidate = pinned;
    gate.baseline = registry::main_route(existing->routes).reference();
    SLIPWAY_ASSIGN_OR_RETURN(outcome.gate, run_gate(&registry, gate, caller));
    if (!outcome.gate->passed()) {
      return failed_precondition("the gate failed, so " + gate.candidate + " was not deployed (report sha256:" +
                                 outcome.gate->report_sha256 + "); `slipway gate " + gate.candidate + " --baseline " +
                                 gate.baseline + " --data ... --metric " + gate.criteria.metric + "` shows each check");
    }
    log_info("gate passed: " + gate.candidate + " against " + gate.baseline);
  }
  if (!request.steps.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(outcome.rollout,
                             registry.endpoints().start_rollout(request.endpoint, version.model, version.version,
                                                                request.steps, request.interval_ms, request.criteria));
    return finish();
  }
  SLIPWAY_RETURN_IF_ERROR(
      registry.endpoints().deploy(request.endpoint, version.model, version.version, request.canary).status());
  return finish();
}

Result<registry::Endpoint> rollback(registry::Registry& registry, const std::string& endpoint, const Caller& caller) {
  act_as(registry, caller);
  return registry.endpoints().rollback(endpoint);
}

Result<registry::ModelVersion> set_approval(registry::Registry& registry, const ApprovalRequest& request,
                                            const Caller& caller) {
  if (!caller.may_administer) {
    return permission_denied("approving a version is an admin act; a caller who may deploy cannot approve");
  }
  act_as(registry, caller);
  if (request.revoke) {
    SLIPWAY_RETURN_IF_ERROR(registry.models().revoke_approval(request.model, request.version));
  } else {
    SLIPWAY_RETURN_IF_ERROR(
        check_plain_text(request.note, "an approval's note (why the version is approved)", 1000, false));
    SLIPWAY_RETURN_IF_ERROR(registry.models().approve(request.model, request.version, request.note));
  }
  return registry.models().resolve(request.model, {request.version, ""});
}

Result<RetireOutcome> retire(registry::Registry& registry, const std::string& model, std::int64_t version,
                             const Caller& caller) {
  act_as(registry, caller);
  RetireOutcome outcome;
  outcome.reference = model + "@" + std::to_string(version);
  SLIPWAY_ASSIGN_OR_RETURN(outcome.rollback_targets_dropped, registry.models().retire(model, version));
  return outcome;
}

}  // namespace slipway::pipeline
