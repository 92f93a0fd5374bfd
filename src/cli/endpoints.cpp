// slipway deploy, rollback and endpoints: names clients call, routed to pinned model versions.
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"

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

struct EndpointResult : CommandResult {
  registry::Endpoint endpoint;
  void write_json(JsonWriter& json) const override { registry::write_endpoint_json(json, endpoint); }
  void write_text(std::ostream& out) const override {
    out << "endpoint " << endpoint.name << " (revision " << endpoint.revision << "): " << routes_text(endpoint.routes)
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
      rows.push_back({endpoint.name, routes_text(endpoint.routes), routes_text(endpoint.previous),
                      std::to_string(endpoint.revision), endpoint.updated_by, format_time_ms(endpoint.updated_ms)});
    }
    print_table(out, {"endpoint", "routes", "rollback to", "revision", "by", "updated"}, rows);
  }
};

Result<EndpointResult> deploy(const GlobalOptions& global, const DeployFlags& flags) {
  if (flags.promote != flags.reference.empty()) {
    return invalid_argument("give the version to deploy (NAME@VERSION), or --promote to promote the canary");
  }
  if (flags.canary && flags.promote) return invalid_argument("--canary and --promote do not go together");
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  EndpointResult result;
  if (flags.promote) {
    SLIPWAY_ASSIGN_OR_RETURN(result.endpoint, store->endpoints().promote(flags.endpoint));
    return result;
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(flags.reference));
  // Aliases and "latest" are resolved now: an endpoint routes to pinned versions, so moving an
  // alias later does not change what it serves.
  SLIPWAY_ASSIGN_OR_RETURN(auto version, store->models().resolve(parsed.first, parsed.second));
  SLIPWAY_ASSIGN_OR_RETURN(result.endpoint,
                           store->endpoints().deploy(flags.endpoint, version.model, version.version, flags.canary));
  return result;
}

Result<EndpointResult> rollback(const GlobalOptions& global, const std::string& endpoint) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  EndpointResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.endpoint, store->endpoints().rollback(endpoint));
  return result;
}

Result<EndpointListResult> list_endpoints(const GlobalOptions& global) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  EndpointListResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.endpoints, store->endpoints().list());
  return result;
}

}  // namespace

int run_deploy(const GlobalOptions& global, const DeployFlags& flags) { return render(global, deploy(global, flags)); }

int run_rollback(const GlobalOptions& global, const std::string& endpoint) {
  return render(global, rollback(global, endpoint));
}

int run_endpoints(const GlobalOptions& global) { return render(global, list_endpoints(global)); }

}  // namespace slipway::cli
