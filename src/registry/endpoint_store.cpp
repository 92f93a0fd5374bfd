// Endpoints: names that route to pinned model versions by weight, with the configuration each
// change replaced kept for one-step rollback.
#include <charconv>
#include <cmath>
#include <functional>

#include "registry/store_context.h"

namespace slipway::registry {
namespace {

constexpr double kPointsPerPercent = 1.0 / kSharePercentStep;  // 100: a share in points is percent * 100
constexpr std::int64_t kAllPoints = 10'000;

bool routes_sum_to_100(const std::vector<EndpointRoute>& routes) {
  double total = 0.0;
  for (const auto& route : routes) total += route.percent;
  return std::abs(total - 100.0) < kSharePercentStep / 2;
}

Result<EndpointRoute> parse_reference(std::string_view text) {
  auto at = text.find('@');
  EndpointRoute route;
  route.model = std::string(text.substr(0, at));
  if (at == std::string_view::npos) return data_loss("stored version '" + std::string(text) + "' is not MODEL@VERSION");
  auto parsed = std::from_chars(text.data() + at + 1, text.data() + text.size(), route.version);
  if (parsed.ptr != text.data() + text.size() || route.version < 1) {
    return data_loss("stored version '" + std::string(text) + "' is not MODEL@VERSION");
  }
  return route;
}

Result<std::optional<Endpoint>> read_endpoint(SqlTransaction& sql, const std::string& name) {
  SLIPWAY_ASSIGN_OR_RETURN(auto row,
                           sql.query_row("SELECT routes, previous_routes, revision, updated_by, updated_ms, fallback, "
                                         "shadow, shadow_percent, owner, require_approval, deadline_ms, slo, "
                                         "last_change FROM endpoints WHERE name = ?",
                                         {name}));
  if (!row) return std::optional<Endpoint>();
  Endpoint endpoint;
  endpoint.name = name;
  // A stored value this build cannot read damages this endpoint alone: the others still list,
  // serve and change (one bad row must not take every endpoint down).
  auto damaged = [&endpoint](const Status& status) {
    if (endpoint.damage.empty()) endpoint.damage = status.message();
  };
  auto routes = parse_routes(row->text(0));
  auto previous = parse_routes(row->text(1));
  if (routes.ok() && routes->empty() == false && !routes_sum_to_100(*routes)) {
    routes = data_loss("endpoint routes '" + row->text(0) + "' do not sum to 100%");
  }
  if (routes.ok()) {
    endpoint.routes = std::move(*routes);
  } else {
    damaged(routes.status());
  }
  if (previous.ok()) {
    endpoint.previous = std::move(*previous);
  } else {
    damaged(previous.status());
  }
  endpoint.revision = row->integer(2);
  endpoint.updated_by = row->text(3);
  endpoint.updated_ms = row->integer(4);
  endpoint.fallback = row->text(5);
  if (!row->text(6).empty()) {
    auto shadow = parse_reference(row->text(6));
    if (shadow.ok()) {
      endpoint.shadow = std::move(*shadow);
      endpoint.shadow.percent = row->real(7);
    } else {
      damaged(shadow.status());
    }
  }
  if (!endpoint.damage.empty()) {
    endpoint.routes.clear();
    endpoint.previous.clear();
  }
  endpoint.owner = row->text(8);
  endpoint.require_approval = row->integer(9) != 0;
  endpoint.deadline_ms = row->integer(10);
  endpoint.slo = row->text(11);
  endpoint.last_change = row->text(12);
  return std::optional<Endpoint>(std::move(endpoint));
}

// Refuses an unapproved version for an endpoint that takes approved versions only.
Status check_approval(SqlTransaction& sql, const std::optional<Endpoint>& endpoint, const std::string& model,
                      std::int64_t version) {
  if (!endpoint || !endpoint->require_approval) return {};
  SLIPWAY_ASSIGN_OR_RETURN(auto row,
                           sql.query_row("SELECT 1 FROM approvals WHERE model = ? AND version = ?", {model, version}));
  if (row) return {};
  std::string reference = model + "@" + std::to_string(version);
  return failed_precondition("endpoint '" + endpoint->name + "' takes approved versions only, and " + reference +
                             " is not approved; `slipway approve " + reference + " --note ...` records an approval");
}

Status check_version_exists(SqlTransaction& sql, const std::string& model, std::int64_t version) {
  SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT retired_ms FROM model_versions WHERE model = ? AND "
                                                   "version = ?",
                                                   {model, version}));
  if (!row) {
    return not_found("no version " + std::to_string(version) + " of model '" + model + "'; `slipway versions " + model +
                     "` lists them");
  }
  if (row->integer(0) > 0) return failed_precondition(model + "@" + std::to_string(version) + " is retired");
  return {};
}

}  // namespace

Result<double> share_at_resolution(double percent, std::string_view what, bool below_all) {
  std::string range = below_all ? "from 0.01 to 99.99" : "from 0.01 to 100";
  std::string rule =
      std::string(what) + " must be a percentage " + range + " (shares are kept to a hundredth of a percent)";
  if (!std::isfinite(percent)) return invalid_argument(rule);
  double points = std::round(percent * kPointsPerPercent);
  if (points < 1 || points > static_cast<double>(below_all ? kAllPoints - 1 : kAllPoints)) {
    return invalid_argument(rule + "; " + format_config_number(percent) + " rounds to " +
                            format_config_number(points / kPointsPerPercent));
  }
  // Dividing the whole number of points gives the closest double to the share (99.99, not
  // 99.99000000000001 as multiplying by 0.01 does).
  return points / kPointsPerPercent;
}

double remaining_share(double percent) {
  return static_cast<double>(kAllPoints - std::llround(percent * kPointsPerPercent)) / kPointsPerPercent;
}

const EndpointRoute& main_route(const std::vector<EndpointRoute>& routes) {
  const EndpointRoute* main = &routes.front();
  for (const auto& route : routes) {
    if (route.percent >= main->percent) main = &route;
  }
  return *main;
}

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
  json.key("updated_by").value(endpoint.updated_by).key("updated_ms").value(endpoint.updated_ms);
  json.key("last_change").value(endpoint.last_change);
  json.key("owner").value(endpoint.owner).key("require_approval").value(endpoint.require_approval);
  json.key("fallback").value(endpoint.fallback).key("deadline_ms").value(endpoint.deadline_ms);
  json.key("slo").value(endpoint.slo).key("shadow");
  if (endpoint.shadow.model.empty()) {
    json.null();
  } else {
    json.begin_object().key("model").value(endpoint.shadow.model).key("version").value(endpoint.shadow.version);
    json.key("percent").value(endpoint.shadow.percent).end_object();
  }
  if (!endpoint.damage.empty()) json.key("damage").value(endpoint.damage);
  json.end_object();
}

void write_rollout_json(JsonWriter& json, const Rollout& rollout) {
  json.begin_object().key("endpoint").value(rollout.endpoint);
  json.key("canary").value(rollout.canary.reference()).key("stable").value(rollout.stable.reference());
  json.key("steps").begin_array();
  for (double step : rollout.steps) json.value(step);
  json.end_array();
  json.key("step").value(static_cast<std::uint64_t>(rollout.step)).key("interval_ms").value(rollout.interval_ms);
  json.key("canary_percent").value(rollout.canary.percent).key("state").value(rollout.state);
  json.key("reason").value(rollout.reason).key("last_check").value(rollout.last_check);
  json.key("criteria").value(format_criteria(rollout.criteria));
  json.key("step_started_ms").value(rollout.step_started_ms).key("updated_ms").value(rollout.updated_ms);
  json.end_object();
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
// the previous ones, the revision goes up. A change made by hand stops a running rollout.
Result<Endpoint> change_endpoint(StoreContext& context, const std::string& endpoint, std::string_view action,
                                 const NextRoutes& next, bool stops_rollout = true) {
  if (Status valid = validate_model_name(endpoint); !valid.ok()) {
    return invalid_argument("invalid endpoint name '" + endpoint + "': endpoint names follow the rules of model names");
  }
  Endpoint changed;
  SLIPWAY_RETURN_IF_ERROR(context.backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(std::optional<Endpoint> current, read_endpoint(sql, endpoint));
    if (current && !current->damage.empty()) {
      if (action != "endpoint.deploy") {
        return data_loss("endpoint '" + endpoint + "' is damaged (" + current->damage +
                         "); a full deploy (`slipway deploy " + endpoint + " NAME@VERSION`) replaces its routes");
      }
      current->routes.clear();  // a full deploy replaces what could not be read; nothing to roll back to
    }
    SLIPWAY_ASSIGN_OR_RETURN(std::vector<EndpointRoute> routes, next(sql, current));
    if (routes.empty() || !routes_sum_to_100(routes)) {
      return internal_error("endpoint routes must sum to 100%: " + format_routes(routes));
    }
    // A version that takes traffic it did not have must be approved where the endpoint says so
    // (a promotion, a rollout's next step; a rollback returns to what was served).
    if (action != "endpoint.rollback" && action != "rollout.rollback") {
      for (const auto& route : routes) {
        bool served = false;
        for (const auto& old : current ? current->routes : std::vector<EndpointRoute>{}) {
          served = served || (old.model == route.model && old.version == route.version && old.percent >= route.percent);
        }
        if (!served) SLIPWAY_RETURN_IF_ERROR(check_approval(sql, current, route.model, route.version));
      }
    }
    // The same routes again by hand change nothing (the rollback target stays, a rollout runs on).
    // A rollout's own writes always land, with their audit entry.
    if (stops_rollout && current && format_routes(routes) == format_routes(current->routes)) {
      changed = *current;
      return {};
    }
    if (stops_rollout) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("UPDATE rollouts SET state = 'stopped', reason = ?, updated_ms = ? "
                      "WHERE endpoint = ? AND state = 'running'",
                      {"stopped by " + std::string(action) + " (" + context.actor + ")", unix_time_ms(), endpoint})
              .status());
    }
    if (current) changed = *current;  // the settings stay
    changed.name = endpoint;
    changed.previous = current ? current->routes : std::vector<EndpointRoute>{};
    changed.last_change = std::string(action);
    changed.routes = std::move(routes);
    changed.revision = current ? current->revision + 1 : 1;
    changed.updated_by = context.actor;
    changed.updated_ms = unix_time_ms();
    std::string routes_text = format_routes(changed.routes);
    std::string previous_text = format_routes(changed.previous);
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO endpoints(name, routes, previous_routes, revision, updated_by, "
                    "updated_ms, last_change) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                    "routes = excluded.routes, previous_routes = excluded.previous_routes, "
                    "revision = excluded.revision, updated_by = excluded.updated_by, "
                    "updated_ms = excluded.updated_ms, last_change = excluded.last_change",
                    {endpoint, routes_text, previous_text, changed.revision, changed.updated_by, changed.updated_ms,
                     changed.last_change})
            .status());
    SLIPWAY_RETURN_IF_ERROR(
        append_audit(sql, context, action,
                     endpoint + " " + routes_text + (previous_text.empty() ? "" : " (was " + previous_text + ")")));
    crash_point("registry.before_commit");
    return {};
  }));
  return changed;
}

std::string format_steps(const std::vector<double>& steps) {
  std::string text;
  for (double step : steps) text += (text.empty() ? "" : ",") + format_config_number(step);
  return text;
}

Result<std::vector<double>> parse_steps(std::string_view text) {
  std::vector<double> steps;
  for (const std::string& item : config_detail::split_list(std::string(text))) {
    double value = 0.0;
    auto parsed = std::from_chars(item.data(), item.data() + item.size(), value);
    if (parsed.ptr != item.data() + item.size()) return invalid_argument("rollout step '" + item + "' is not a number");
    steps.push_back(value);
  }
  return steps;
}

// What a stored rollout must satisfy to be read back (rollouts stored before steps were held to
// the share resolution included).
Status check_steps(const std::vector<double>& steps) {
  if (steps.empty() || steps.back() != 100.0) return invalid_argument("rollout steps must end at 100 (e.g. 10,50,100)");
  double before = 0.0;
  for (double step : steps) {
    if (!(step > before && step <= 100)) {
      return invalid_argument("rollout steps must rise strictly from above 0 to 100, e.g. 10,50,100; got " +
                              format_steps(steps));
    }
    before = step;
  }
  return {};
}

}  // namespace

Result<std::vector<double>> check_rollout_steps(std::vector<double> steps) {
  for (double& step : steps) {
    SLIPWAY_ASSIGN_OR_RETURN(step, share_at_resolution(step, "a rollout step", false));
  }
  SLIPWAY_RETURN_IF_ERROR(check_steps(steps));
  if (steps.size() < 2) {
    return invalid_argument(
        "a rollout needs a canary step below 100 to analyse before it promotes (e.g. 10,50,100); to send all traffic "
        "at once, deploy without steps");
  }
  return steps;
}

Result<std::vector<double>> parse_rollout_steps(std::string_view text) {
  SLIPWAY_ASSIGN_OR_RETURN(auto steps, parse_steps(text));
  return check_rollout_steps(std::move(steps));
}

namespace {

// The canary's and the stable version's shares, from the rollout's state and step.
void set_shares(Rollout& rollout) {
  bool promoted = rollout.state == "promoted";
  bool rolled_back = rollout.state == "rolled_back";
  rollout.canary.percent = rolled_back ? 0.0 : promoted ? 100.0 : rollout.steps[rollout.step];
  rollout.stable.percent = remaining_share(rollout.canary.percent);
}

Result<std::optional<Rollout>> read_rollout(SqlTransaction& sql, const std::string& endpoint) {
  SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT canary, stable, steps, interval_ms, step, step_started_ms, "
                                                   "state, reason, last_check, criteria, updated_ms FROM rollouts "
                                                   "WHERE endpoint = ?",
                                                   {endpoint}));
  if (!row) return std::optional<Rollout>();
  Rollout rollout;
  rollout.endpoint = endpoint;
  SLIPWAY_ASSIGN_OR_RETURN(rollout.canary, parse_reference(row->text(0)));
  SLIPWAY_ASSIGN_OR_RETURN(rollout.stable, parse_reference(row->text(1)));
  SLIPWAY_ASSIGN_OR_RETURN(rollout.steps, parse_steps(row->text(2)));
  rollout.interval_ms = row->integer(3);
  rollout.step = static_cast<std::size_t>(row->integer(4));
  if (!check_steps(rollout.steps).ok() || rollout.step >= rollout.steps.size()) {
    return data_loss("the rollout of endpoint '" + endpoint + "' is damaged (steps " + row->text(2) + ")");
  }
  rollout.step_started_ms = row->integer(5);
  rollout.state = row->text(6);
  rollout.reason = row->text(7);
  rollout.last_check = row->text(8);
  SLIPWAY_ASSIGN_OR_RETURN(rollout.criteria, parse_criteria(row->text(9)));
  rollout.updated_ms = row->integer(10);
  set_shares(rollout);
  return std::optional<Rollout>(std::move(rollout));
}

// The routes at a canary share: the canary first, the stable version with the rest.
std::vector<EndpointRoute> split(const Rollout& rollout, double canary_percent) {
  EndpointRoute canary = rollout.canary;
  EndpointRoute stable = rollout.stable;
  canary.percent = canary_percent;
  stable.percent = remaining_share(canary_percent);
  if (canary_percent >= 100.0) return {canary};
  if (canary_percent <= 0.0) return {stable};
  return {canary, stable};
}

// The running rollout of `endpoint` at `step`; FailedPrecondition otherwise.
Result<Rollout> running_at(SqlTransaction& sql, const std::string& endpoint, std::size_t step) {
  SLIPWAY_ASSIGN_OR_RETURN(std::optional<Rollout> rollout, read_rollout(sql, endpoint));
  if (!rollout || rollout->state != "running" || rollout->step != step) {
    return failed_precondition("endpoint '" + endpoint + "' has no rollout running at step " + std::to_string(step));
  }
  return std::move(*rollout);
}

// Stores `rollout` and sets its shares to what its state and step now say.
Status write_rollout(SqlTransaction& sql, Rollout& rollout) {
  set_shares(rollout);
  return sql
      .execute(
          "INSERT INTO rollouts(endpoint, canary, stable, steps, interval_ms, step, step_started_ms, state, "
          "reason, last_check, criteria, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
          "ON CONFLICT(endpoint) DO UPDATE SET canary = excluded.canary, stable = excluded.stable, "
          "steps = excluded.steps, interval_ms = excluded.interval_ms, step = excluded.step, "
          "step_started_ms = excluded.step_started_ms, state = excluded.state, reason = excluded.reason, "
          "last_check = excluded.last_check, criteria = excluded.criteria, updated_ms = excluded.updated_ms",
          {rollout.endpoint, rollout.canary.reference(), rollout.stable.reference(), format_steps(rollout.steps),
           rollout.interval_ms, static_cast<std::int64_t>(rollout.step), rollout.step_started_ms, rollout.state,
           rollout.reason, rollout.last_check, format_criteria(rollout.criteria), rollout.updated_ms})
      .status();
}

Status no_endpoint(const std::string& endpoint) {
  return not_found("no endpoint named '" + endpoint + "'; `slipway endpoints` lists them");
}

}  // namespace

Result<Endpoint> EndpointStore::deploy(const std::string& endpoint, const std::string& model, std::int64_t version,
                                       std::optional<double> canary_percent) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(model));
  if (canary_percent) {
    // Held to the resolution routing serves, on the value stored: 99.999 would store the stable
    // version at 0%, a route no reader accepts.
    SLIPWAY_ASSIGN_OR_RETURN(canary_percent, share_at_resolution(*canary_percent, "a canary's share", true));
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
    const EndpointRoute* main = &main_route(current->routes);
    if (main->model == model && main->version == version) {
      return failed_precondition("endpoint '" + endpoint + "' already sends most of its traffic to " +
                                 main->reference());
    }
    fresh.percent = *canary_percent;
    EndpointRoute stable = *main;
    stable.percent = remaining_share(fresh.percent);
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

std::string format_criteria(const RolloutCriteria& criteria) {
  return "max_error_rate_increase=" + format_config_number(criteria.max_error_rate_increase) +
         ",max_p99_ratio=" + format_config_number(criteria.max_p99_ratio) +
         ",max_divergence=" + format_config_number(criteria.max_divergence) +
         ",min_requests=" + std::to_string(criteria.min_requests);
}

Result<RolloutCriteria> parse_criteria(std::string_view text) {
  RolloutCriteria criteria;
  for (const std::string& item : config_detail::split_list(std::string(text))) {
    auto equals = item.find('=');
    std::string key = item.substr(0, equals);
    double value = 0.0;
    const char* end = item.data() + item.size();
    if (equals == std::string::npos || std::from_chars(item.data() + equals + 1, end, value).ptr != end ||
        !std::isfinite(value) || value < 0 || value > 1e9) {
      return invalid_argument("rollout criterion '" + item + "' is not NAME=NUMBER (a number from 0 to 1e9)");
    }
    if (key == "max_error_rate_increase") {
      criteria.max_error_rate_increase = value;
    } else if (key == "max_p99_ratio") {
      criteria.max_p99_ratio = value;
    } else if (key == "max_divergence") {
      criteria.max_divergence = value;
    } else if (key == "min_requests") {
      criteria.min_requests = static_cast<std::int64_t>(value);
    } else {
      return invalid_argument("unknown rollout criterion '" + key +
                              "'; there are max_error_rate_increase, max_p99_ratio, max_divergence, min_requests");
    }
  }
  return criteria;
}

Status EndpointStore::configure(const std::string& endpoint, const EndpointSettings& settings) {
  auto short_text = [](const std::optional<std::string>& text) {
    return !text || (text->size() <= 256 && is_valid_utf8(*text));
  };
  if (!short_text(settings.owner)) return invalid_argument("the owner must be UTF-8 text of at most 256 bytes");
  if (!short_text(settings.slo)) return invalid_argument("the SLO must be UTF-8 text of at most 256 bytes");
  constexpr std::int64_t kHourMs = 3'600'000;
  if (settings.deadline_ms && (*settings.deadline_ms < 0 || *settings.deadline_ms > kHourMs)) {
    return invalid_argument("the deadline must be between 0 (none) and an hour");
  }
  if (settings.fallback) SLIPWAY_RETURN_IF_ERROR(validate_fallback(*settings.fallback));
  std::optional<EndpointRoute> shadow = settings.shadow;
  if (shadow && !shadow->model.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(shadow->percent, share_at_resolution(shadow->percent, "a shadow's share", false));
  }
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(std::optional<Endpoint> current, read_endpoint(sql, endpoint));
    if (!current) return no_endpoint(endpoint);
    if (shadow && !shadow->model.empty())
      SLIPWAY_RETURN_IF_ERROR(check_version_exists(sql, shadow->model, shadow->version));
    std::string detail = endpoint;
    auto set = [&](const char* column, SqlValue value, const std::string& shown) -> Status {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute(std::string("UPDATE endpoints SET ") + column + " = ? WHERE name = ?", {value, endpoint})
              .status());
      detail += std::string(" ") + column + "=" + shown;
      return {};
    };
    if (settings.owner) SLIPWAY_RETURN_IF_ERROR(set("owner", *settings.owner, *settings.owner));
    if (settings.require_approval) {
      SLIPWAY_RETURN_IF_ERROR(
          set("require_approval", *settings.require_approval ? 1 : 0, *settings.require_approval ? "yes" : "no"));
    }
    if (settings.deadline_ms) {
      SLIPWAY_RETURN_IF_ERROR(set("deadline_ms", *settings.deadline_ms, std::to_string(*settings.deadline_ms)));
    }
    if (settings.slo) SLIPWAY_RETURN_IF_ERROR(set("slo", *settings.slo, *settings.slo));
    if (settings.fallback) SLIPWAY_RETURN_IF_ERROR(set("fallback", *settings.fallback, *settings.fallback));
    if (shadow) {
      std::string reference = shadow->model.empty() ? "" : shadow->reference();
      SLIPWAY_RETURN_IF_ERROR(set("shadow", reference, reference.empty() ? "off" : reference));
      SLIPWAY_RETURN_IF_ERROR(set("shadow_percent", shadow->model.empty() ? 0.0 : shadow->percent,
                                  format_config_number(shadow->percent) + "%"));
    }
    return append_audit(sql, *context_, "endpoint.configure", detail);
  });
}

Status validate_fallback(std::string_view fallback) {
  if (fallback == "none" || fallback == "main" || fallback == "previous" || fallback == "cached") return {};
  if (fallback.starts_with("constant:")) {
    std::string_view value = fallback.substr(9);
    if (!value.empty() && value.size() <= 256 && is_valid_utf8(value)) return {};
    return invalid_argument("a constant fallback needs a value of at most 256 bytes: constant:0.5, constant:LABEL");
  }
  return invalid_argument(
      "fallback must be none, main (the main route answers another route's failure), previous "
      "(the rollback target answers), cached (the last answer to the same request) or "
      "constant:VALUE, not '" +
      std::string(fallback.substr(0, 64)) + "'");
}

Status EndpointStore::set_fallback(const std::string& endpoint, const std::string& fallback) {
  return configure(endpoint, {.fallback = fallback});
}

Status EndpointStore::set_shadow(const std::string& endpoint, const std::string& model, std::int64_t version,
                                 double percent) {
  return configure(endpoint, {.shadow = EndpointRoute{model, version, percent}});
}

Result<Rollout> EndpointStore::start_rollout(const std::string& endpoint, const std::string& model,
                                             std::int64_t version, const std::vector<double>& steps,
                                             std::int64_t interval_ms, const RolloutCriteria& criteria) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(model));
  SLIPWAY_ASSIGN_OR_RETURN(auto checked_steps, check_rollout_steps(steps));
  if (interval_ms < 1000) return invalid_argument("the rollout interval must be at least 1s");
  // Checked as they are read back, so a rollout never stores what it cannot read.
  SLIPWAY_RETURN_IF_ERROR(parse_criteria(format_criteria(criteria)).status());
  if (criteria.min_requests < 1 || criteria.min_requests > 1'000'000'000) {
    return invalid_argument("--min-requests must be from 1 to 1e9");
  }
  Rollout started;
  auto next = [&](SqlTransaction& sql, const std::optional<Endpoint>& current) -> Result<std::vector<EndpointRoute>> {
    SLIPWAY_RETURN_IF_ERROR(check_version_exists(sql, model, version));
    if (!current) {
      return failed_precondition("endpoint '" + endpoint + "' does not exist yet: deploy a version to it first, to " +
                                 "have something to roll the canary out against");
    }
    SLIPWAY_ASSIGN_OR_RETURN(std::optional<Rollout> earlier, read_rollout(sql, endpoint));
    if (earlier && earlier->state == "running") {
      return failed_precondition("endpoint '" + endpoint + "' has a rollout running (of " +
                                 earlier->canary.reference() + "); stop it with deploy, promote or rollback first");
    }
    const EndpointRoute* main = &main_route(current->routes);
    if (main->model == model && main->version == version) {
      return failed_precondition("endpoint '" + endpoint + "' already sends most of its traffic to " +
                                 main->reference());
    }
    started = Rollout{
        endpoint, {model, version, 0.0}, *main, checked_steps, interval_ms, 0, unix_time_ms(), "running", "", "",
        criteria, unix_time_ms()};
    SLIPWAY_RETURN_IF_ERROR(write_rollout(sql, started));
    return split(started, checked_steps.front());
  };
  SLIPWAY_RETURN_IF_ERROR(change_endpoint(*context_, endpoint, "endpoint.rollout", next, false).status());
  return started;
}

Result<Rollout> EndpointStore::advance_rollout(const std::string& endpoint, std::size_t step,
                                               const std::string& check) {
  Rollout rollout;
  auto next = [&](SqlTransaction& sql, const std::optional<Endpoint>&) -> Result<std::vector<EndpointRoute>> {
    SLIPWAY_ASSIGN_OR_RETURN(rollout, running_at(sql, endpoint, step));
    rollout.step = step + 1;
    rollout.step_started_ms = unix_time_ms();
    rollout.updated_ms = rollout.step_started_ms;
    rollout.last_check = check;
    if (rollout.steps[rollout.step] >= 100.0) {
      rollout.state = "promoted";
      rollout.reason = "every step passed its analysis";
    }
    SLIPWAY_RETURN_IF_ERROR(write_rollout(sql, rollout));
    return split(rollout, rollout.steps[rollout.step]);
  };
  SLIPWAY_RETURN_IF_ERROR(change_endpoint(*context_, endpoint, "rollout.advance", next, false).status());
  return rollout;
}

Result<Rollout> EndpointStore::fail_rollout(const std::string& endpoint, std::size_t step, const std::string& reason) {
  Rollout rollout;
  auto next = [&](SqlTransaction& sql, const std::optional<Endpoint>&) -> Result<std::vector<EndpointRoute>> {
    SLIPWAY_ASSIGN_OR_RETURN(rollout, running_at(sql, endpoint, step));
    rollout.state = "rolled_back";
    rollout.reason = reason;
    rollout.last_check = reason;
    rollout.updated_ms = unix_time_ms();
    SLIPWAY_RETURN_IF_ERROR(write_rollout(sql, rollout));
    return split(rollout, 0.0);
  };
  SLIPWAY_RETURN_IF_ERROR(change_endpoint(*context_, endpoint, "rollout.rollback", next, false).status());
  return rollout;
}

Result<std::optional<Rollout>> EndpointStore::rollout(const std::string& endpoint) {
  std::optional<Rollout> found;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(found, read_rollout(sql, endpoint));
    return {};
  }));
  return found;
}

Result<std::vector<Rollout>> EndpointStore::running_rollouts() {
  std::vector<Rollout> running;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT endpoint FROM rollouts WHERE state = 'running' "
                                                  "ORDER BY endpoint"));
    for (const auto& row : rows) {
      // One damaged row must not stop every other rollout.
      auto rollout = read_rollout(sql, row.text(0));
      if (!rollout.ok()) {
        log_warn("skipping the rollout of endpoint '" + row.text(0) + "': " + rollout.status().message());
        continue;
      }
      if (*rollout) running.push_back(std::move(**rollout));
    }
    return {};
  }));
  return running;
}

}  // namespace slipway::registry
