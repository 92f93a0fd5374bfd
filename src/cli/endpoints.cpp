// slipway deploy, rollback and endpoints: names clients call, routed to pinned model versions.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/optimize.h"

namespace slipway::cli {
namespace {

std::string routes_text(const std::vector<registry::EndpointRoute>& routes) {
  if (routes.empty()) return "-";
  std::string text;
  for (const auto& route : routes) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}%", route.reference(), format_config_number(route.percent));
  }
  return text;
}

// What answers when a version fails or is late, in a sentence.
std::string fallback_text(const registry::Endpoint& endpoint) {
  const std::string& fallback = endpoint.fallback;
  std::string text;
  if (fallback == "main") {
    text = "a request another version fails is answered by the main version (marked degraded).";
  } else if (fallback == "previous") {
    text = "a failed request is answered by the rollback target (" +
           (endpoint.previous.empty() ? std::string("none yet") : registry::main_route(endpoint.previous).reference()) +
           "), else by the main version (marked degraded).";
  } else if (fallback == "cached") {
    text =
        "a failed request is answered with the endpoint's last answer to the same request, when it has one "
        "(marked degraded).";
  } else if (fallback.starts_with("constant:")) {
    text = "a failed request is answered with the constant " + fallback.substr(9) + " for every row (marked degraded).";
  } else {
    text = "none: a version's failure is returned to the client.";
  }
  if (endpoint.deadline_ms > 0) {
    text += " A version that has not answered within " + std::to_string(endpoint.deadline_ms) + " ms " +
            (fallback == "none" ? "is answered with 504." : "counts as failed.");
  }
  return text;
}

struct EndpointResult : CommandResult {
  registry::Endpoint endpoint;
  void write_json(JsonWriter& json) const override { registry::write_endpoint_json(json, endpoint); }
  void write_text(std::ostream& out) const override {
    out << "endpoint " << endpoint.name << " (revision " << endpoint.revision << "): " << routes_text(endpoint.routes)
        << (endpoint.fallback == "none" ? "" : "; fallback " + endpoint.fallback)
        << (endpoint.deadline_ms > 0 ? "; deadline " + std::to_string(endpoint.deadline_ms) + " ms" : "")
        << (endpoint.shadow.model.empty() ? ""
                                          : "; shadow " + endpoint.shadow.reference() + " on " +
                                                format_config_number(endpoint.shadow.percent) + "% of requests")
        << "\n";
    if (!endpoint.previous.empty()) {
      out << "was: " << routes_text(endpoint.previous) << "; `slipway rollback " << endpoint.name
          << "` returns to it\n";
    }
    out << "running servers route /v2/models/" << endpoint.name << "/infer this way within a second\n";
  }
};

struct EndpointListResult : CommandResult {
  std::vector<registry::Endpoint> endpoints;
  void write_json(JsonWriter& json) const override {
    json.begin_array();
    for (const auto& endpoint : endpoints) registry::write_endpoint_json(json, endpoint);
    json.end_array();
  }
  void write_text(std::ostream& out) const override {
    std::vector<std::vector<std::string>> rows;
    for (const auto& endpoint : endpoints) {
      std::string routes = endpoint.damage.empty() ? routes_text(endpoint.routes) : "DAMAGED (slipway verify)";
      rows.push_back({endpoint.name, routes, routes_text(endpoint.previous), endpoint.fallback,
                      std::to_string(endpoint.revision), endpoint.updated_by, format_time_ms(endpoint.updated_ms)});
    }
    print_table(out, {"endpoint", "routes", "rollback to", "fallback", "revision", "by", "updated"}, rows);
  }
};

std::string rollout_state(const registry::Rollout& rollout) {
  if (rollout.state == "running") {
    return fmt::format("running: step {} of {}, canary at {}%", rollout.step + 1, rollout.steps.size(),
                       format_config_number(rollout.steps[rollout.step]));
  }
  return rollout.state + (rollout.reason.empty() ? "" : ": " + rollout.reason);
}

struct RolloutResult : CommandResult {
  registry::Rollout rollout;
  void write_json(JsonWriter& json) const override { registry::write_rollout_json(json, rollout); }
  void write_text(std::ostream& out) const override {
    out << "rollout of " << rollout.canary.reference() << " on endpoint " << rollout.endpoint << " against "
        << rollout.stable.reference() << "\n";
    std::string steps;
    for (std::size_t index = 0; index < rollout.steps.size(); ++index) {
      std::string step = format_config_number(rollout.steps[index]) + "%";
      steps +=
          (index == 0 ? "" : " -> ") + (index == rollout.step && rollout.state == "running" ? "[" + step + "]" : step);
    }
    out << "steps      " << steps << ", " << rollout.interval_ms / 1000.0 << " s each\n";
    out << "state      " << rollout_state(rollout) << "\n";
    out << "criteria   " << registry::format_criteria(rollout.criteria) << "\n";
    if (!rollout.last_check.empty()) out << "last check " << rollout.last_check << "\n";
    if (rollout.state == "running") {
      out << "a running `slipway serve` on this workspace moves it on; `slipway rollback " << rollout.endpoint
          << "` stops it and returns to the routes before\n";
    }
  }
};

// The flags as the operation's request: durations, the SLO and the gate's flags parsed here.
Result<pipeline::DeployRequest> deploy_request(const DeployFlags& flags) {
  if (!flags.shadow.empty() && flags.no_shadow) return invalid_argument("--shadow and --no-shadow do not go together");
  if (!flags.gate.data_path.empty() && flags.reference.empty()) {
    return invalid_argument("--gate-data checks the version being deployed: give REF (a promotion is not gated)");
  }
  if (!flags.gate.data_path.empty() && flags.gate.criteria.metric.empty()) {
    return invalid_argument("--gate-data needs --gate-metric (auc, log_loss, rmse, ...) and a threshold");
  }
  pipeline::DeployRequest request;
  request.endpoint = flags.endpoint;
  request.reference = flags.reference;
  request.promote = flags.promote;
  request.canary = flags.canary;
  if (!flags.steps.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(request.steps, registry::parse_rollout_steps(flags.steps));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto interval, parse_duration("--interval", flags.interval));
  request.interval_ms = interval.count();
  request.criteria = flags.criteria;
  registry::EndpointSettings& settings = request.settings.settings;
  settings.owner = flags.owner;
  if (!flags.require_approval.empty()) settings.require_approval = flags.require_approval == "yes";
  if (!flags.deadline.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto deadline, parse_duration("--deadline", flags.deadline));
    settings.deadline_ms = deadline.count();
  }
  if (flags.slo && !flags.slo->empty()) SLIPWAY_RETURN_IF_ERROR(optimize::parse_slo(*flags.slo).status());
  settings.slo = flags.slo;
  if (!flags.fallback.empty()) settings.fallback = flags.fallback;
  request.settings.shadow_reference = flags.shadow;
  request.settings.shadow_percent = flags.shadow_percent;
  request.settings.remove_shadow = flags.no_shadow;
  if (!flags.gate.data_path.empty()) {
    pipeline::GateRequest gate;
    gate.data_path = flags.gate.data_path;
    gate.criteria = flags.gate.criteria;
    gate.slice = flags.gate.slice;
    request.gate = std::move(gate);
  }
  return request;
}

Result<std::unique_ptr<CommandResult>> deploy(const GlobalOptions& global, const DeployFlags& flags) {
  SLIPWAY_ASSIGN_OR_RETURN(auto request, deploy_request(flags));
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  SLIPWAY_ASSIGN_OR_RETURN(auto outcome, pipeline::deploy(*store, request, pipeline::Caller{}));
  if (outcome.rollout) {
    auto result = std::make_unique<RolloutResult>();
    result->rollout = std::move(*outcome.rollout);
    return std::unique_ptr<CommandResult>(std::move(result));
  }
  auto result = std::make_unique<EndpointResult>();
  result->endpoint = std::move(outcome.endpoint);
  return std::unique_ptr<CommandResult>(std::move(result));
}

Result<RolloutResult> rollout_status(const GlobalOptions& global, const std::string& endpoint) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  SLIPWAY_ASSIGN_OR_RETURN(auto rollout, store->endpoints().rollout(endpoint));
  if (!rollout) return not_found("endpoint '" + endpoint + "' has had no rollout; start one with deploy --steps");
  RolloutResult result;
  result.rollout = std::move(*rollout);
  return result;
}

Result<EndpointResult> rollback(const GlobalOptions& global, const std::string& endpoint) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  EndpointResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.endpoint, pipeline::rollback(*store, endpoint, pipeline::Caller{}));
  return result;
}

Result<EndpointListResult> list_endpoints(const GlobalOptions& global) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  EndpointListResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.endpoints, store->endpoints().list());
  return result;
}

// What an on-call engineer needs about an endpoint, as a Markdown page (which reads as text too).
struct DescribeResult : CommandResult {
  pipeline::EndpointDescription described;

  std::string markdown() const {
    const registry::Endpoint& endpoint = described.endpoint;
    const auto& rollout = described.rollout;
    const auto& versions = described.versions;
    std::string out = "# Endpoint " + endpoint.name + "\n\n";
    out += "Clients call `POST /v2/models/" + endpoint.name + "/infer`. Revision " + std::to_string(endpoint.revision) +
           ", changed by " + endpoint.updated_by + " at " + format_time_ms(endpoint.updated_ms) + ".\n";
    out += "Owner: " +
           (endpoint.owner.empty() ? std::string("not set (slipway deploy ... --owner NAME)") : endpoint.owner) + ". " +
           (endpoint.require_approval ? "Takes approved versions only." : "Takes any version (no approval required).") +
           "\n\n";
    out += "## Traffic\n\n| version | share | task | target | registered | by | run |\n|---|---|---|---|---|---|---|\n";
    for (const auto& version : versions) {
      std::string task = version.bundle ? std::string(model::task_name(version.bundle->task())) : "-";
      std::string target = version.bundle ? version.bundle->manifest().target : "-";
      out += "| " + version.route.reference() + " | " + format_config_number(version.route.percent) + "% | " + task +
             " | " + target + " | " + format_time_ms(version.record.created_ms) + " | " + version.record.creator +
             " | " + (version.record.run_id.empty() ? "-" : version.record.run_id.substr(0, 8)) + " |\n";
    }
    out += "\nFallback: " + fallback_text(endpoint) + "\n";
    out +=
        "SLO: " +
        (endpoint.slo.empty() ? std::string("not set (slipway deploy " + endpoint.name + " --slo \"p99<=20ms@500rps\")")
                              : endpoint.slo) +
        "\n";
    if (!endpoint.shadow.model.empty()) {
      out += "Shadow: " + endpoint.shadow.reference() + " sees a copy of " +
             format_config_number(endpoint.shadow.percent) +
             "% of requests; its answers are compared with the live ones (slipway_shadow_* in /metrics) and never "
             "returned.\n";
    }
    if (rollout) {
      out += "\n## Rollout\n\n" + rollout->canary.reference() + " against " + rollout->stable.reference() + ": " +
             rollout_state(*rollout) + ".\n";
      if (!rollout->last_check.empty()) out += "Last analysis: " + rollout->last_check + "\n";
    }
    for (const auto& version : versions) {
      out += "\n## " + version.route.reference() + "\n\n";
      if (!version.bundle) {
        out += "The bundle could not be loaded: " + version.load_error + "\n";
        continue;
      }
      out += version.record.approval ? "Approved by " + version.record.approval->approver + " at " +
                                           format_time_ms(version.record.approval->approved_ms) + ": " +
                                           version.record.approval->note + "\n"
                                     : std::string("Not approved.\n");
      if (!version.record.description.empty()) out += version.record.description + "\n";
      for (std::size_t index = 0; index < std::min<std::size_t>(version.gates.size(), 3); ++index) {
        const registry::GateRecord& gate = version.gates[index];
        out += "Gate " + std::string(gate.passed ? "passed" : "FAILED") + " against " + gate.baseline_model + "@" +
               std::to_string(gate.baseline_version) + " (" + gate.metric + " " + gate.criteria + ", " +
               format_time_ms(gate.created_ms) + ")\n";
      }
      const model::Manifest& manifest = version.bundle->manifest();
      out += "Bundle `sha256:" + version.record.bundle_sha256 + "`, code " + manifest.code_version + ", data " +
             (manifest.data_fingerprint.empty() ? "-" : manifest.data_fingerprint.substr(0, 16)) + ".\n\n";
      if (!manifest.metrics.empty()) {
        out += "Evaluation:";
        for (const auto& [metric, value] : manifest.metrics) out += " " + metric + " " + format_metric(value) + ";";
        out.back() = '\n';
      }
      out += "Inputs:";
      for (const auto& feature : version.bundle->preprocessor().features()) {
        out += " " + feature.name + (feature.type == data::ColumnType::kNumeric ? "" : " (text)") + ",";
      }
      out.back() = '\n';
    }
    out += "\n## Rolling back\n\n";
    if (endpoint.previous.empty()) {
      out += "No earlier configuration: deploy a version to change what it serves.\n";
    } else {
      out += "`slipway rollback " + endpoint.name + "` returns, in one step, to: " + routes_text(endpoint.previous) +
             ". Running servers follow within a second; `slipway endpoints` shows the result.\n";
    }
    return out;
  }

  void write_json(JsonWriter& json) const override { pipeline::write_endpoint_description_json(json, described); }
  void write_text(std::ostream& out) const override { out << markdown(); }
};

Result<DescribeResult> describe(const GlobalOptions& global, const std::string& name,
                                const std::string& markdown_path) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  DescribeResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.described, pipeline::describe_endpoint(*store, name));
  if (!markdown_path.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(markdown_path, result.markdown()));
  return result;
}

}  // namespace

int run_deploy(const GlobalOptions& global, const DeployFlags& flags) {
  auto result = deploy(global, flags);
  if (!result.ok()) return fail(result.status());
  return render(global, **result);
}

int run_describe(const GlobalOptions& global, const std::string& endpoint, const std::string& markdown_path) {
  return render(global, describe(global, endpoint, markdown_path));
}

int run_rollout_status(const GlobalOptions& global, const std::string& endpoint) {
  return render(global, rollout_status(global, endpoint));
}

int run_rollback(const GlobalOptions& global, const std::string& endpoint) {
  return render(global, rollback(global, endpoint));
}

int run_endpoints(const GlobalOptions& global) { return render(global, list_endpoints(global)); }

}  // namespace slipway::cli
