// Endpoints: names that route to pinned model versions by weight, with the configuration each
// change replaced kept for one-step rollback.
#include <charconv>
#include <cmath>
#include <functional>

#include "registry/store_context.h"

namespace slipway::registry {
namespace {

// Shares are kept to a hundredth of a percent: routing slices a key space of 10,000.
constexpr double kPercentStep = 0.01;

bool routes_sum_to_100(const std::vector<EndpointRoute>& routes) {
  double total = 0.0;
  for (const auto& route : routes) total += route.percent;
  return std::abs(total - 100.0) < kPercentStep / 2;
}

Result<std::optional<Endpoint>> read_endpoint(SqlTransaction& sql, const std::string& name) {
  SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT routes, previous_routes, revision, updated_by, updated_ms "
                                                   "FROM endpoints WHERE name = ?",
                                                   {name}));
  if (!row) return std::optional<Endpoint>();
  Endpoint endpoint;
  endpoint.name = name;
  SLIPWAY_ASSIGN_OR_RETURN(endpoint.routes, parse_routes(row->text(0)));
  SLIPWAY_ASSIGN_OR_RETURN(endpoint.previous, parse_routes(row->text(1)));
  endpoint.revision = row->integer(2);
  endpoint.updated_by = row->text(3);
  endpoint.updated_ms = row->integer(4);
  return std::optional<Endpoint>(std::move(endpoint));
}

Status check_version_exists(SqlTransaction& sql, const std::string& model, std::int64_t version) {
  SLIPWAY_ASSIGN_OR_RETURN(
      auto row, sql.query_row("SELECT 1 FROM model_versions WHERE model = ? AND version = ?", {model, version}));
  if (!row) {
    return not_found("no version " + std::to_string(version) + " of model '" + model + "'; `slipway versions " + model +
                     "` lists them");
  }
  return {};
}

}  // namespace

std::string format_routes(const std::vector<EndpointRoute>& routes) {
  std::string text;
  for (const auto& route : routes) {
    if (!text.empty()) text += ",";
    text += route.reference() + "=" + format_config_number(route.percent);
  }
  return text;
}

void write_endpoint_json(JsonWriter& json, const Endpoint& endpoint) {
  auto write_routes = [&json](const std::vector<EndpointRoute>& routes) {
    json.begin_array();
    for (const auto& route : routes) {
      json.begin_object().key("model").value(route.model).key("version").value(route.version);
      json.key("percent").value(route.percent).end_object();
    }
    json.end_array();
  };
  json.begin_object().key("name").value(endpoint.name).key("revision").value(endpoint.revision);
  json.key("routes");
  write_routes(endpoint.routes);
  json.key("previous");
  write_routes(endpoint.previous);
  json.key("updated_by").value(endpoint.updated_by).key("updated_ms").value(endpoint.updated_ms).end_object();
}

Result<std::vector<EndpointRoute>> parse_routes(std::string_view text) {
  std::vector<EndpointRoute> routes;
  if (text.empty()) return routes;
  for (const std::string& item : config_detail::split_list(std::string(text))) {
    auto at = item.find('@');
    auto equals = item.find('=', at == std::string::npos ? 0 : at);
    if (at == std::string::npos || equals == std::string::npos) {
      return data_loss("endpoint route '" + item + "' is not MODEL@VERSION=PERCENT");
    }
    EndpointRoute route;
    route.model = item.substr(0, at);
    const char* version_begin = item.data() + at + 1;
    const char* version_end = item.data() + equals;
    const char* percent_end = item.data() + item.size();
    auto version = std::from_chars(version_begin, version_end, route.version);
    auto percent = std::from_chars(version_end + 1, percent_end, route.percent);
    if (version.ptr != version_end || percent.ptr != percent_end || route.version < 1 ||
        !(route.percent > 0 && route.percent <= 100)) {
      return data_loss("endpoint route '" + item + "' is not MODEL@VERSION=PERCENT");
    }
    routes.push_back(std::move(route));
  }
  return routes;
}

namespace {

// The routes an endpoint changes to, given what it has (nullopt: it does not exist yet).
using NextRoutes = std::function<Result<std::vector<EndpointRoute>>(SqlTransaction&, const std::optional<Endpoint>&)>;

// One change of an endpoint, in one transaction with its audit entry: the current routes become
// the previous ones, the revision goes up.
Result<Endpoint> change_endpoint(StoreContext& context, const std::string& endpoint, std::string_view action,
                                 const NextRoutes& next) {
  if (Status valid = validate_model_name(endpoint); !valid.ok()) {
    return invalid_argument("invalid endpoint name '" + endpoint + "': endpoint names follow the rules of model names");
  }
  Endpoint changed;
  SLIPWAY_RETURN_IF_ERROR(context.backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(std::optional<Endpoint> current, read_endpoint(sql, endpoint));
    SLIPWAY_ASSIGN_OR_RETURN(std::vector<EndpointRoute> routes, next(sql, current));
    if (routes.empty() || !routes_sum_to_100(routes)) {
      return internal_error("endpoint routes must sum to 100%: " + format_routes(routes));
    }
    if (current && format_routes(routes) == format_routes(current->routes)) {
      // The same routes again: no change, so the rollback target stays what it was.
      changed = *current;
      return {};
    }
    changed.name = endpoint;
    changed.previous = current ? current->routes : std::vector<EndpointRoute>{};
    changed.routes = std::move(routes);
    changed.revision = current ? current->revision + 1 : 1;
    changed.updated_by = context.actor;
    changed.updated_ms = unix_time_ms();
    std::string routes_text = format_routes(changed.routes);
    std::string previous_text = format_routes(changed.previous);
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO endpoints(name, routes, previous_routes, revision, updated_by, "
                    "updated_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                    "routes = excluded.routes, previous_routes = excluded.previous_routes, "
                    "revision = excluded.revision, updated_by = excluded.updated_by, "
                    "updated_ms = excluded.updated_ms",
                    {endpoint, routes_text, previous_text, changed.revision, changed.updated_by, changed.updated_ms})
            .status());
    SLIPWAY_RETURN_IF_ERROR(
        append_audit(sql, context, action,
                     endpoint + " " + routes_text + (previous_text.empty() ? "" : " (was " + previous_text + ")")));
    crash_point("registry.before_commit");
    return {};
  }));
  return changed;
}

Status no_endpoint(const std::string& endpoint) {
  return not_found("no endpoint named '" + endpoint + "'; `slipway endpoints` lists them");
}

}  // namespace

Result<Endpoint> EndpointStore::deploy(const std::string& endpoint, const std::string& model, std::int64_t version,
                                       std::optional<double> canary_percent) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(model));
  if (canary_percent && !(*canary_percent >= kPercentStep && *canary_percent < 100)) {
    return invalid_argument("a canary's share must be from 0.01 to below 100 percent");
  }
  EndpointRoute fresh{model, version, 100.0};
  auto next = [&](SqlTransaction& sql, const std::optional<Endpoint>& current) -> Result<std::vector<EndpointRoute>> {
    // Inside the transaction, so the version cannot vanish between the check and the write.
    SLIPWAY_RETURN_IF_ERROR(check_version_exists(sql, model, version));
    if (!canary_percent) return std::vector<EndpointRoute>{fresh};
    if (!current) {
      return failed_precondition("endpoint '" + endpoint + "' does not exist yet: deploy a version to it without " +
                                 "--canary first, to have something to test the canary against");
    }
    // Against the main route: the one with the largest share.
    const EndpointRoute* main = &current->routes.front();
    for (const auto& route : current->routes) {
      if (route.percent > main->percent) main = &route;
    }
    if (main->model == model && main->version == version) {
      return failed_precondition("endpoint '" + endpoint + "' already sends most of its traffic to " +
                                 main->reference());
    }
    fresh.percent = std::round(*canary_percent / kPercentStep) * kPercentStep;
    EndpointRoute stable = *main;
    stable.percent = 100.0 - fresh.percent;
    return std::vector<EndpointRoute>{fresh, stable};
  };
  return change_endpoint(*context_, endpoint, canary_percent ? "endpoint.canary" : "endpoint.deploy", next);
}

Result<Endpoint> EndpointStore::promote(const std::string& endpoint) {
  return change_endpoint(
      *context_, endpoint, "endpoint.promote",
      [&](SqlTransaction&, const std::optional<Endpoint>& current) -> Result<std::vector<EndpointRoute>> {
        if (!current) return no_endpoint(endpoint);
        if (current->routes.size() < 2) {
          return failed_precondition("endpoint '" + endpoint + "' has no canary to promote; it sends everything to " +
                                     current->routes.front().reference());
        }
        EndpointRoute canary = current->routes.front();
        canary.percent = 100.0;
        return std::vector<EndpointRoute>{canary};
      });
}

Result<Endpoint> EndpointStore::rollback(const std::string& endpoint) {
  return change_endpoint(
      *context_, endpoint, "endpoint.rollback",
      [&](SqlTransaction&, const std::optional<Endpoint>& current) -> Result<std::vector<EndpointRoute>> {
        if (!current) return no_endpoint(endpoint);
        if (current->previous.empty()) {
          return failed_precondition("endpoint '" + endpoint + "' has no earlier configuration to roll back to");
        }
        return current->previous;
      });
}

Result<std::optional<Endpoint>> EndpointStore::get(const std::string& endpoint) {
  std::optional<Endpoint> found;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(found, read_endpoint(sql, endpoint));
    return {};
  }));
  return found;
}

Result<std::vector<Endpoint>> EndpointStore::list() {
  std::vector<Endpoint> endpoints;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto names, sql.query("SELECT name FROM endpoints ORDER BY name"));
    for (const auto& row : names) {
      SLIPWAY_ASSIGN_OR_RETURN(std::optional<Endpoint> endpoint, read_endpoint(sql, row.text(0)));
      if (endpoint) endpoints.push_back(std::move(*endpoint));
    }
    return {};
  }));
  return endpoints;
}

}  // namespace slipway::registry
