// Retraining policies: when a registered model is trained again, on which rows, how the candidate
// is gated against the version it would replace, and whether it is deployed.
#include <algorithm>
#include <cmath>
#include <map>

#include <filesystem>

#include <fmt/format.h>

#include "pipeline/operation_support.h"
#include "slipway/monitor.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

constexpr std::int64_t kDay = 86400;

// "3d 4h", "2h 5m", "40s": a duration as an operator reads it.
std::string format_duration_s(std::int64_t seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds >= kDay) return fmt::format("{}d {}h", seconds / kDay, seconds % kDay / 3600);
  if (seconds >= 3600) return fmt::format("{}h {}m", seconds / 3600, seconds % 3600 / 60);
  if (seconds >= 60) return fmt::format("{}m {}s", seconds / 60, seconds % 60);
  return fmt::format("{}s", seconds);
}

const std::vector<std::string>& trigger_names() {
  static const std::vector<std::string> kNames = {"alert", "drift", "performance", "schedule"};
  return kNames;
}

// Whether an alert on `subject` is one `trigger` acts on.
bool trigger_covers(const std::string& trigger, const std::string& subject) {
  if (trigger == "alert") return true;
  if (trigger == "drift") return subject.starts_with("input:") || subject == "prediction";
  if (trigger == "performance") return subject.starts_with("metric");
  return false;
}

bool finished_with_candidate(const registry::RetrainingRecord& record) {
  return record.state == "registered" || record.state == "deployed";
}

// The shares of "rollout:10,50,100", or the one of "canary:10"; none for none and full.
Result<std::vector<double>> deploy_shares(const std::string& deploy) {
  auto colon = deploy.find(':');
  std::string mode = deploy.substr(0, colon);
  std::string_view shares =
      colon == std::string::npos ? std::string_view() : std::string_view(deploy).substr(colon + 1);
  if ((mode == "none" || mode == "full") && colon == std::string::npos) return std::vector<double>{};
  if (mode == "rollout" && colon != std::string::npos) return registry::parse_rollout_steps(shares);
  if (mode == "canary" && colon != std::string::npos) {
    auto share = parse_finite_number(shares);
    if (!share) return invalid_argument("deploy canary:PERCENT takes a number, not '" + deploy + "'");
    // The policy is stored and run later: held now to what a deploy will accept.
    SLIPWAY_ASSIGN_OR_RETURN(auto canary, registry::share_at_resolution(*share, "deploy canary:PERCENT", true));
    return std::vector<double>{canary};
  }
  return invalid_argument("deploy is none, full, canary:PERCENT or rollout:STEPS (such as rollout:10,50,100), not '" +
                          deploy + "'");
}

// The model's retraining lock (a file in the workspace); null while another process holds it.
Result<std::unique_ptr<FileLock>> retraining_lock(const std::string& home, const std::string& model) {
  // The name becomes a file name: only a valid model name may.
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  std::string folder = home + "/retrain";
  SLIPWAY_RETURN_IF_ERROR(make_directories(folder));
  return FileLock::try_acquire(folder + "/" + model + ".lock");
}

// The longest request id joined to a label: ids come from clients, and each row keeps a copy.
constexpr std::size_t kMaxRequestIdBytes = 256;

// The baseline's labelled traffic as a CSV artifact: the inputs it logged and, as the target, the
// label ingested for each row's id (a row whose id came before is left out: a client's retry).
// Returns the artifact's sha256 and how many rows it holds.
Result<std::pair<std::string, std::size_t>> store_labelled_traffic(registry::Registry& registry,
                                                                   const RetrainPolicy& policy,
                                                                   const registry::ModelVersion& baseline,
                                                                   const LoadedReference& loaded) {
  const std::string& reference = loaded.description;
  std::vector<std::string> inputs;
  for (const auto& feature : loaded.bundle->preprocessor().features()) inputs.push_back(feature.name);
  std::int64_t now = unix_time_ms();
  SLIPWAY_ASSIGN_OR_RETURN(
      auto logged, monitor::read_request_log(registry.home() + "/request_log", baseline.model,
                                             std::to_string(baseline.version), policy.endpoint, inputs,
                                             now - policy.traffic_window.count() * 1000, now, policy.id_column));
  const data::Column* ids = logged.inputs.find(policy.id_column);
  std::size_t with_id = 0;
  for (std::size_t row = 0; ids != nullptr && row < ids->size(); ++row) with_id += ids->is_missing(row) ? 0 : 1;
  if (with_id == 0) {
    return failed_precondition(fmt::format("none of the {} rows {} answered in the last {} carried an id in '{}'",
                                           logged.inputs.row_count(), reference,
                                           format_duration_s(policy.traffic_window.count()), policy.id_column));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto labels, registry.models().labels(baseline.model));
  std::vector<const data::Column*> columns;
  std::string csv;
  for (const auto& input : inputs) {
    columns.push_back(logged.inputs.find(input));
    append_csv_field(csv, input);
    csv += ',';
  }
  append_csv_field(csv, loaded.bundle->manifest().target);
  csv += '\n';
  // In the order of their ids: the log's order is the order answers were written, which threads
  // may swap, and the same traffic must make the same rows (the same split, the same model).
  std::map<std::string, std::size_t> rows_by_id;
  for (std::size_t row = 0; row < logged.inputs.row_count(); ++row) {
    if (ids->is_missing(row)) continue;
    std::string id = ids->text_at(row);
    if (id.size() <= kMaxRequestIdBytes && labels.count(id) != 0) rows_by_id.emplace(std::move(id), row);
  }
  std::size_t labelled = 0;
  for (const auto& [id, row] : rows_by_id) {
    auto label = labels.find(id);
    for (const data::Column* column : columns) {
      if (column != nullptr && !column->is_missing(row)) append_csv_field(csv, column->text_at(row));
      csv += ',';
    }
    append_csv_field(csv, label->second);
    csv += '\n';
    ++labelled;
  }
  if (labelled == 0) {
    return failed_precondition(fmt::format(
        "none of the {} rows {} answered in the last {} has a label yet (slipway labels ingest FILE --model {} "
        "--id-col COL --label-col COL)",
        with_id, reference, format_duration_s(policy.traffic_window.count()), baseline.model));
  }
  log_info(fmt::format("{} of {} logged rows of {} have labels", labelled, logged.inputs.row_count(), reference));
  SLIPWAY_ASSIGN_OR_RETURN(auto sha256, registry.artifacts().put(std::as_bytes(std::span(csv))));
  return std::make_pair(sha256, labelled);
}

// The spec a retraining trains: the policy's, else the baseline's run's, pointed at the new rows.
// `traffic`: the rows are logged requests, not the files the spec was written for.
Result<TrainSpec> retraining_spec(registry::Registry& registry, const RetrainPolicy& policy,
                                  const registry::ModelVersion& baseline, const LoadedReference& loaded,
                                  const std::string& data, bool traffic) {
  TrainSpec spec;
  if (!policy.spec.empty()) {
    SLIPWAY_RETURN_IF_ERROR(load_spec_text(policy.spec, "the retrain policy's spec", spec));
  } else {
    if (baseline.run_id.empty()) {
      return failed_precondition(fmt::format(
          "{}@{} was registered from a bundle, not by a run here, so there is no spec to train again: give the "
          "policy one (slipway retrain policy {} --spec FILE.yaml)",
          baseline.model, baseline.version, baseline.model));
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto run, registry.runs().get(baseline.run_id));
    if (run.imported()) {
      return failed_precondition(
          fmt::format("{}@{} was imported, not trained here, so there is no spec to train again: give the policy one "
                      "(slipway retrain policy {} --spec FILE.yaml)",
                      baseline.model, baseline.version, baseline.model));
    }
    if (auto members = run.tags.find("slipway.ensemble"); members != run.tags.end()) {
      return failed_precondition(
          fmt::format("{}@{} is an ensemble AutoML averaged from runs {}, not one training run: give the policy a "
                      "spec (slipway retrain policy {} --spec FILE.yaml)",
                      baseline.model, baseline.version, members->second, baseline.model));
    }
    SLIPWAY_RETURN_IF_ERROR(load_spec_text(run.spec, "the spec of run " + run.run_id, spec));
  }
  // The new rows are the whole input: the gate needs their held-out split, so no separate test
  // file. The step cache stays on: the same rows, spec and baseline give the same bundle.
  spec.data = data;
  if (!spec.test_data.empty()) {
    log_warn("the spec's test file " + spec.test_data +
             " is not used: a retraining gates on the new rows' held-out split, or the policy's gate_data");
  }
  spec.test_data.clear();
  spec.register_as.clear();  // registered only once the gate passes
  spec.bundle_out.clear();
  spec.resume_run.clear();
  spec.checkpoint_every = 0;
  spec.use_cache = true;
  spec.init_model.clear();
  if (traffic) {
    // Logged traffic has the model's inputs and the label, not the columns a spec may name
    // beside them (slices, weights, time or group keys, ignored columns).
    spec.slice.clear();
    spec.weight_column.clear();
    spec.ignore.clear();
    if (spec.split.starts_with("time:") || spec.split.starts_with("group:")) spec.split = "random";
  }
  if (spec.model == "gbdt" && policy.warm_start) {
    // Boosting continues the baseline's trees over the baseline's inputs: a spec cannot drop one.
    for (const auto& column : spec.ignore) {
      if (loaded.bundle->preprocessor().feature_index(column)) {
        return invalid_argument("the spec ignores '" + column + "', an input of " + loaded.description +
                                ", whose trees a warm start continues; retrain from scratch (--no-warm-start) to "
                                "drop it");
      }
    }
    spec.init_model = loaded.description;
  }
  if (policy.rounds > 0) {
    std::erase_if(spec.params, [](const std::string& pair) { return pair.starts_with("rounds="); });
    spec.params.push_back("rounds=" + std::to_string(policy.rounds));
  }
  return spec;
}

// Routes the endpoint to the candidate as the policy says; returns what was done.
Result<std::string> deploy_candidate(registry::Registry& registry, const RetrainPolicy& policy,
                                     const registry::ModelVersion& candidate) {
  // A rollout in progress is someone's decision under way: a retraining does not overrule it.
  SLIPWAY_ASSIGN_OR_RETURN(auto rollout, registry.endpoints().rollout(policy.endpoint));
  if (rollout && rollout->state == "running") {
    return failed_precondition("endpoint " + policy.endpoint + " is in a rollout of " + rollout->canary.reference() +
                               "; finish or roll it back first");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto shares, deploy_shares(policy.deploy));
  std::string mode = policy.deploy.substr(0, policy.deploy.find(':'));
  // The same operation as `slipway deploy`: the same checks (approvals among them).
  DeployRequest request;
  request.endpoint = policy.endpoint;
  request.reference = candidate.model + "@" + std::to_string(candidate.version);
  if (mode == "rollout") {
    request.steps = shares;
    request.interval_ms = policy.rollout_interval.count() * 1000;
    SLIPWAY_RETURN_IF_ERROR(deploy(registry, request, Caller{}).status());
    return policy.endpoint + ": rollout " + policy.deploy.substr(policy.deploy.find(':') + 1);
  }
  if (mode == "canary") request.canary = shares.front();
  SLIPWAY_RETURN_IF_ERROR(deploy(registry, request, Caller{}).status());
  return policy.endpoint +
         (request.canary ? ": canary " + format_config_number(*request.canary) + "%" : std::string(": full"));
}

}  // namespace

const ConfigSchema<RetrainPolicy>& retrain_policy_schema() {
  using P = RetrainPolicy;
  constexpr double kYear = 366.0 * kDay;
  static const ConfigSchema<RetrainPolicy> kSchema(
      "retrain policy",
      {
          config_field<P>({"on",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "When it is due, comma-separated: alert (any monitoring alert of the model fired), drift "
                           "(an input or the prediction), performance (a metric limit), schedule (every every_s)"},
                          &P::on),
          config_field<P>({"every_s",
                           ConfigType::kInt,
                           "",
                           0,
                           kYear,
                           {},
                           "With on=schedule: retrain when the last retraining that registered a version (or the "
                           "baseline's registration) is older than this many seconds"},
                          &P::every),
          config_field<P>({"cooldown_s",
                           ConfigType::kInt,
                           "",
                           0,
                           kYear,
                           {},
                           "No retraining starts sooner than this many seconds after the last one started"},
                          &P::cooldown),
          config_field<P>({"data",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "The new rows: a CSV file read when it runs, or traffic (the baseline's request log "
                           "joined with the labels ingested for the model)"},
                          &P::data),
          config_field<P>({"traffic_window_s",
                           ConfigType::kInt,
                           "",
                           60,
                           kYear,
                           {},
                           "With data=traffic: the request log of the last this many seconds"},
                          &P::traffic_window),
          config_field<P>(
              {"id_column", ConfigType::kText, "", 0, 0, {}, "With data=traffic: the input labels are joined by"},
              &P::id_column),
          config_field<P>({"min_rows",
                           ConfigType::kInt,
                           "",
                           1,
                           1e9,
                           {},
                           "Fewer new rows than this fail the retraining (a gate on a handful proves nothing)"},
                          &P::min_rows),
          config_field<P>({"spec",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "A train spec (YAML); empty: the spec of the run that trained the baseline"},
                          &P::spec),
          config_field<P>({"warm_start",
                           ConfigType::kBool,
                           "",
                           0,
                           0,
                           {},
                           "gbdt: continue boosting from the baseline's trees (other models train from scratch)"},
                          &P::warm_start),
          config_field<P>(
              {"rounds", ConfigType::kInt, "", 0, 100000, {}, "Boosting rounds to train (0: the spec's rounds)"},
              &P::rounds),
          config_field<P>({"gate_metric",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "The gate's metric (empty: auc for binary, log_loss for multiclass, rmse for regression)"},
                          &P::gate_metric),
          config_field<P>({"gate",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "The gate's thresholds against the baseline: min, max, max_drop, max_relative_drop"},
                          &P::gate),
          config_field<P>({"gate_data",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "Labelled rows the gate scores both on (empty: the new rows' held-out split)"},
                          &P::gate_data),
          config_field<P>(
              {"gate_slice", ConfigType::kText, "", 0, 0, {}, "The gate also holds in every value of this column"},
              &P::gate_slice),
          config_field<P>({"endpoint",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "The baseline is this endpoint's main version (else the model's newest), and deploys go "
                           "here"},
                          &P::endpoint),
          config_field<P>({"deploy",
                           ConfigType::kText,
                           "",
                           0,
                           0,
                           {},
                           "What a candidate that passed gets: none (registered only), full, canary:PERCENT or "
                           "rollout:STEPS"},
                          &P::deploy),
          config_field<P>({"rollout_interval_s",
                           ConfigType::kInt,
                           "",
                           1,
                           7.0 * kDay,
                           {},
                           "With deploy=rollout: each step's length in seconds"},
                          &P::rollout_interval),
      });
  return kSchema;
}

Status check_retrain_policy(const RetrainPolicy& policy) {
  auto triggers = config_detail::split_list(policy.on);
  if (triggers.empty()) return invalid_argument("a retrain policy needs on=alert, drift, performance or schedule");
  for (const auto& trigger : triggers) {
    if (std::find(trigger_names().begin(), trigger_names().end(), trigger) == trigger_names().end()) {
      auto closest = closest_name(trigger, trigger_names());
      return invalid_argument("unknown retrain trigger '" + trigger + "'" +
                              (closest ? "; did you mean '" + *closest + "'?" : std::string()) +
                              " (alert, drift, performance, schedule)");
    }
  }
  bool scheduled = std::find(triggers.begin(), triggers.end(), "schedule") != triggers.end();
  if (scheduled != (policy.every.count() > 0)) {
    return invalid_argument(scheduled ? "on=schedule needs every (such as --every 7d)"
                                      : "every is the schedule's period: add schedule to on");
  }
  if (policy.data.empty()) {
    return invalid_argument(
        "a retrain policy needs data: a CSV file of new rows, or traffic (the labelled request log)");
  }
  if (policy.data == "traffic" && policy.id_column.empty()) {
    return invalid_argument("data=traffic joins labels by an input: give id_column (--id-col)");
  }
  eval::GateCriteria criteria;
  SLIPWAY_RETURN_IF_ERROR(eval::parse_gate_thresholds(policy.gate, criteria));
  if (!criteria.min && !criteria.max && !criteria.max_drop && !criteria.max_relative_drop) {
    return invalid_argument("the gate needs a threshold, such as max_drop=0 (no worse than the baseline)");
  }
  SLIPWAY_RETURN_IF_ERROR(deploy_shares(policy.deploy).status());
  if (policy.deploy != "none" && policy.endpoint.empty()) {
    return invalid_argument("deploy " + policy.deploy + " needs the endpoint to deploy to (--endpoint)");
  }
  if (!policy.spec.empty()) {
    TrainSpec spec;
    SLIPWAY_RETURN_IF_ERROR(load_spec_text(policy.spec, "the retrain policy's spec", spec));
  }
  return {};
}

Result<std::optional<RetrainPolicy>> load_retrain_policy(registry::Registry& registry, const std::string& model) {
  SLIPWAY_ASSIGN_OR_RETURN(auto values, registry.retraining().policy(model));
  if (values.empty()) return std::optional<RetrainPolicy>{};
  RetrainPolicy policy = retrain_policy_schema().defaults();
  SLIPWAY_RETURN_IF_ERROR(retrain_policy_schema().apply(policy, values));
  policy.model = model;
  SLIPWAY_RETURN_IF_ERROR(check_retrain_policy(policy));
  return std::optional<RetrainPolicy>(std::move(policy));
}

Result<registry::ModelVersion> retrain_baseline(registry::Registry& registry, const RetrainPolicy& policy) {
  if (policy.endpoint.empty()) return registry.models().resolve(policy.model, {});
  SLIPWAY_ASSIGN_OR_RETURN(auto endpoint, registry.endpoints().get(policy.endpoint));
  if (!endpoint || endpoint->routes.empty()) {
    return not_found("endpoint '" + policy.endpoint + "' (the retrain policy's) serves nothing");
  }
  const registry::EndpointRoute& main = registry::main_route(endpoint->routes);
  if (main.model != policy.model) {
    return failed_precondition("endpoint '" + policy.endpoint + "' serves " + main.reference() + ", not a version of " +
                               policy.model);
  }
  return registry.models().resolve(main.model, {.version = main.version});
}

Result<RetrainDecision> retrain_due(registry::Registry& registry, const RetrainPolicy& policy, std::int64_t now_ms) {
  SLIPWAY_ASSIGN_OR_RETURN(auto history, registry.retraining().list(policy.model, 100));
  std::int64_t last_started_ms = history.empty() ? 0 : history.front().started_ms;
  if (last_started_ms > 0 && now_ms - last_started_ms < policy.cooldown.count() * 1000) {
    return RetrainDecision{false, fmt::format("cooling down: retraining #{} started {} ago (cooldown {})",
                                              history.front().id, format_duration_s((now_ms - last_started_ms) / 1000),
                                              format_duration_s(policy.cooldown.count()))};
  }
  std::vector<std::string> not_due;
  auto triggers = config_detail::split_list(policy.on);
  SLIPWAY_ASSIGN_OR_RETURN(auto alerts, registry.models().alerts());
  for (const auto& trigger : triggers) {
    if (trigger == "schedule") {
      auto last = std::find_if(history.begin(), history.end(), finished_with_candidate);
      std::int64_t since_ms = 0;
      if (last != history.end()) {
        since_ms = last->finished_ms;
      } else {
        SLIPWAY_ASSIGN_OR_RETURN(auto baseline, retrain_baseline(registry, policy));
        since_ms = baseline.created_ms;
      }
      std::int64_t age_s = (now_ms - since_ms) / 1000;
      if (age_s >= policy.every.count()) {
        return RetrainDecision{true, fmt::format("schedule: every {}, and the model was last trained {} ago",
                                                 format_duration_s(policy.every.count()), format_duration_s(age_s))};
      }
      not_due.push_back("the schedule is due in " + format_duration_s(policy.every.count() - age_s));
      continue;
    }
    // An alert acts once: it must have started firing after the last retraining started.
    for (const auto& alert : alerts) {
      if (alert.model != policy.model || !alert.firing || !trigger_covers(trigger, alert.subject)) continue;
      if (alert.changed_ms <= last_started_ms) continue;
      return RetrainDecision{true, fmt::format("{}: {} firing for {} ({:.4g})", trigger, alert.subject,
                                               format_duration_s((now_ms - alert.changed_ms) / 1000), alert.value)};
    }
    not_due.push_back("no " + (trigger == "alert" ? std::string("monitoring") : trigger) + " alert fired" +
                      (last_started_ms > 0 ? " since the last retraining" : ""));
  }
  return RetrainDecision{false, join(not_due, "; ")};
}

Result<RetrainOutcome> retrain(registry::Registry& registry, const RetrainPolicy& policy,
                               const RetrainOptions& options) {
  SLIPWAY_RETURN_IF_ERROR(check_retrain_policy(policy));
  // Decided under the lock, so two processes cannot both act on one alert.
  RetrainOutcome outcome;
  SLIPWAY_ASSIGN_OR_RETURN(auto lock, retraining_lock(registry.home(), policy.model));
  if (lock == nullptr) {
    std::string busy = "another process is retraining " + policy.model + " now";
    // Overlapping cron runs are not a failure; a retraining asked for by name is refused.
    if (options.force) return failed_precondition(busy);
    outcome.decision = {false, busy};
    return outcome;
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::size_t interrupted, registry.retraining().mark_interrupted(policy.model));
  if (interrupted > 0) log_warn(fmt::format("{} retraining(s) of {} had been interrupted", interrupted, policy.model));
  if (options.force) {
    outcome.decision = {true, "forced (--force)"};
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(outcome.decision, retrain_due(registry, policy, unix_time_ms()));
    if (!outcome.decision.due) return outcome;
  }
  // Recorded from here on, whatever happens: a cron job's failures are in the history, and the
  // trigger that fired is spent (the cooldown and the next alert decide the next try).
  registry::RetrainingRecord& record = outcome.record;
  record.model = policy.model;
  record.reason = outcome.decision.reason;
  auto baseline = retrain_baseline(registry, policy);
  if (baseline.ok()) {
    record.baseline_version = baseline->version;
    outcome.baseline = baseline->model + "@" + std::to_string(baseline->version);
  }
  SLIPWAY_ASSIGN_OR_RETURN(record.id, registry.retraining().start(record));
  // A record that cannot be written stays `running` until the next retraining of the model marks
  // it interrupted (with the candidate it registered, if any).
  auto finish = [&](std::string state, std::string message) -> Result<RetrainOutcome> {
    record.state = std::move(state);
    record.message = std::move(message);
    SLIPWAY_RETURN_IF_ERROR(registry.retraining().update(record));
    return std::move(outcome);
  };
  if (!baseline.ok()) return finish("failed", "no baseline: " + baseline.status().message());
  // Loaded once: the traffic's inputs, the warm start and the gate all read it.
  auto before = resolve_reference(&registry, outcome.baseline);
  if (!before.ok()) return finish("failed", "cannot load the baseline: " + before.status().message());
  std::string data_path = policy.data;
  if (policy.data == "traffic") {
    auto traffic = store_labelled_traffic(registry, policy, *baseline, *before);
    if (!traffic.ok()) return finish("failed", traffic.status().message());
    record.data_sha256 = traffic->first;
    data_path = registry.artifacts().path_for(record.data_sha256);
    outcome.data =
        fmt::format("the labelled traffic of {} (artifact {})", outcome.baseline, traffic->first.substr(0, 12));
  } else {
    outcome.data = data_path;
  }
  auto spec = retraining_spec(registry, policy, *baseline, *before, data_path, policy.data == "traffic");
  if (!spec.ok()) return finish("failed", spec.status().message());
  auto table = read_table(spec->data);
  if (!table.ok()) return finish("failed", "the new rows: " + table.status().message());
  std::size_t rows = table->row_count();
  record.data_fingerprint = data::fingerprint(*table);
  *table = data::Table{};

  // Rows an earlier retraining decided on, against the same baseline or the candidate it made,
  // would only train the same model again (for gbdt, a longer one): recorded, not trained.
  if (!options.force) {
    auto history = registry.retraining().list(policy.model, 100);
    if (!history.ok()) return finish("failed", history.status().message());
    for (const auto& earlier : *history) {
      bool decided =
          finished_with_candidate(earlier) || earlier.state == "rejected" || earlier.state == "deploy_failed";
      bool same_baseline =
          earlier.baseline_version == baseline->version || earlier.candidate_version == baseline->version;
      if (earlier.id != record.id && decided && same_baseline && earlier.data_fingerprint == record.data_fingerprint) {
        return finish("unchanged", fmt::format("the rows and the baseline are those of retraining #{} ({})", earlier.id,
                                               earlier.state));
      }
    }
  }
  if (static_cast<std::int64_t>(rows) < policy.min_rows) {
    return finish("failed", fmt::format("{} new rows, fewer than the policy's min_rows {}", rows, policy.min_rows));
  }
  log_info(fmt::format("retraining #{} of {} ({}) started", record.id, outcome.baseline, record.reason));

  auto trained = run_training(registry, *spec, options.callbacks);
  if (!trained.ok()) return finish("failed", "training failed: " + trained.status().message());
  outcome.training = std::move(*trained);
  record.run_id = outcome.training->run_id;
  record.state = "running";
  if (Status saved = registry.retraining().update(record); !saved.ok()) return finish("failed", saved.message());
  crash_point("retrain.after_train");

  auto candidate = model::Bundle::load(registry.artifacts().path_for(outcome.training->bundle_sha256),
                                       outcome.training->bundle_sha256);
  if (!candidate.ok()) return finish("failed", "cannot load the candidate: " + candidate.status().message());
  data::Table gate_rows;
  if (!policy.gate_data.empty()) {
    auto read = read_table(policy.gate_data);
    if (!read.ok()) return finish("failed", "the gate's rows: " + read.status().message());
    gate_rows = std::move(*read);
    outcome.gate_data = policy.gate_data;
  } else {
    gate_rows = std::move(outcome.training->held_out);
    outcome.gate_data = fmt::format("the new rows' held-out split ({} rows)", gate_rows.row_count());
  }
  eval::GateCriteria criteria;
  criteria.metric =
      policy.gate_metric.empty() ? std::string(eval::watched_metric((*candidate)->task())) : policy.gate_metric;
  if (Status parsed = eval::parse_gate_thresholds(policy.gate, criteria); !parsed.ok()) {
    return finish("failed", parsed.message());
  }
  auto report = eval::gate(*before->bundle, **candidate, gate_rows, criteria, policy.gate_slice);
  if (!report.ok()) return finish("failed", "the gate could not run: " + report.status().message());
  outcome.gate = std::move(*report);
  JsonWriter json;
  json.begin_object()
      .key("candidate")
      .value("run " + record.run_id + " (bundle " + outcome.training->bundle_sha256 + ")");
  json.key("baseline").value(outcome.baseline).key("data").value(outcome.gate_data);
  eval::write_gate_report_fields(json, *outcome.gate);
  json.key("retraining").value(record.id).end_object();
  std::string text = json.take();
  auto stored = registry.artifacts().put(std::as_bytes(std::span(text)));
  if (!stored.ok()) return finish("failed", "cannot store the gate report: " + stored.status().message());
  record.gate_report_sha256 = *stored;
  const eval::GateCheck& overall = outcome.gate->checks.front();
  if (std::isnan(overall.candidate) || std::isnan(overall.baseline)) {
    // A gate that passes because nothing could be measured proves nothing.
    return finish("rejected", fmt::format("the gate has no evidence: {} is undefined on its {} rows ({})",
                                          criteria.metric, overall.rows, overall.failure));
  }
  if (!outcome.gate->passed()) {
    std::string why;
    for (const auto& check : outcome.gate->checks) {
      if (!check.passed) why += (why.empty() ? "" : "; ") + check.scope + ": " + check.failure;
    }
    return finish("rejected", "the gate failed (" + criteria.metric + " " + policy.gate + "): " + why);
  }

  auto version = registry.models().register_version(policy.model, outcome.training->bundle_sha256, record.run_id);
  if (!version.ok()) return finish("failed", "cannot register the candidate: " + version.status().message());
  record.candidate_version = version->version;
  if (Status saved = registry.retraining().update(record); !saved.ok()) return finish("failed", saved.message());
  registry::GateRecord gate_record;
  gate_record.model = policy.model;
  gate_record.version = version->version;
  gate_record.baseline_model = baseline->model;
  gate_record.baseline_version = baseline->version;
  gate_record.data_fingerprint = data::fingerprint(gate_rows);
  gate_record.metric = criteria.metric;
  gate_record.criteria = eval::format_gate_thresholds(criteria);
  gate_record.passed = true;
  gate_record.report_sha256 = record.gate_report_sha256;
  Status gate_recorded = registry.models().record_gate(gate_record);
  if (policy.deploy == "none") {
    return finish("registered",
                  gate_recorded.ok() ? "" : "its gate result was not recorded: " + gate_recorded.message());
  }
  // A version whose gate is not on record is not sent traffic: an approver could not see why.
  if (!gate_recorded.ok()) {
    return finish("deploy_failed", "not deployed: its gate result was not recorded: " + gate_recorded.message());
  }
  // Said before it is done: a process killed mid-deploy leaves a record that says where to look.
  record.deployed = "pending: " + policy.endpoint;
  if (Status saved = registry.retraining().update(record); !saved.ok()) return finish("failed", saved.message());
  auto deployed = deploy_candidate(registry, policy, *version);
  if (!deployed.ok()) {
    record.deployed.clear();
    return finish("deploy_failed", "not deployed: " + deployed.status().message());
  }
  record.deployed = *deployed;
  return finish("deployed", "");
}

Status save_retrain_policy(registry::Registry& registry, const std::string& model,
                           const std::map<std::string, std::string>& values, const Caller& caller) {
  const auto& schema = retrain_policy_schema();
  RetrainPolicy policy = schema.defaults();
  SLIPWAY_RETURN_IF_ERROR(schema.apply(policy, values));
  policy.model = model;
  SLIPWAY_RETURN_IF_ERROR(check_retrain_policy(policy));
  std::error_code error;
  for (const std::string* path : {&policy.data, &policy.gate_data}) {
    if (!path->empty() && *path != "traffic" && !std::filesystem::is_regular_file(*path, error)) {
      return not_found("no file " + *path + " (the policy reads it each time it retrains: create it first)");
    }
  }
  if (!policy.endpoint.empty()) SLIPWAY_RETURN_IF_ERROR(retrain_baseline(registry, policy).status());
  act_as(registry, caller);
  return registry.retraining().set_policy(model, values);
}

Status remove_retrain_policy(registry::Registry& registry, const std::string& model, const Caller& caller) {
  act_as(registry, caller);
  return registry.retraining().remove_policy(model);
}

void write_retraining_json(JsonWriter& json, const std::string& model, const Status& error,
                           const RetrainOutcome& outcome) {
  const registry::RetrainingRecord& record = outcome.record;
  json.begin_object().key("model").value(model).key("error").value(error.message());
  json.key("due").value(outcome.decision.due).key("decision").value(outcome.decision.reason);
  if (record.id > 0) {
    json.key("id").value(record.id).key("state").value(record.state).key("message").value(record.message);
    json.key("baseline").value(outcome.baseline).key("data").value(outcome.data).key("run").value(record.run_id);
    json.key("candidate")
        .value(record.candidate_version > 0 ? model + "@" + std::to_string(record.candidate_version) : "");
    json.key("deployed").value(record.deployed).key("gate_report_sha256").value(record.gate_report_sha256);
    if (outcome.gate) {
      json.key("gate").begin_object().key("data").value(outcome.gate_data);
      eval::write_gate_report_fields(json, *outcome.gate);
      json.end_object();
    }
  }
  json.end_object();
}

void write_retraining_record_json(JsonWriter& json, const registry::RetrainingRecord& record) {
  json.begin_object().key("id").value(record.id).key("model").value(record.model);
  json.key("state").value(record.state).key("reason").value(record.reason);
  json.key("baseline_version").value(record.baseline_version).key("run_id").value(record.run_id);
  json.key("candidate_version").value(record.candidate_version).key("deployed").value(record.deployed);
  json.key("message").value(record.message).key("data_fingerprint").value(record.data_fingerprint);
  json.key("gate_report_sha256").value(record.gate_report_sha256);
  json.key("started_ms").value(record.started_ms).key("finished_ms").value(record.finished_ms);
  json.key("actor").value(record.actor).end_object();
}

}  // namespace slipway::pipeline
