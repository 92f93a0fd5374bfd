// slipway retrain: a policy per model (when, on which rows, the gate, the deploy), the
// retrainings it runs, and their history.
#include <algorithm>
#include <filesystem>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

// ------------------------------------------------------------------------------ the policy

struct PolicyResult : CommandResult {
  std::string model;
  bool removed = false;
  bool changed = false;
  std::map<std::string, std::string> values;  // every key, the stored or the default
  std::set<std::string> stored;               // the keys the workspace holds

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model).key("removed").value(removed).key("policy").begin_object();
    for (const auto& [key, value] : values) json.key(key).value(value);
    json.end_object().end_object();
  }
  void write_text(std::ostream& out) const override {
    if (removed) {
      out << "removed the retrain policy of " << model << "\n";
      return;
    }
    out << (changed ? "stored the retrain policy of " : "retrain policy of ") << model << "\n\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& [key, value] : values) {
      std::string shown = value;
      if (key == "spec") {
        shown = value.empty()
                    ? "(the baseline's run spec)"
                    : fmt::format("({} lines of YAML; --json shows it)", std::count(value.begin(), value.end(), '\n'));
      }
      rows.push_back({key, shown, stored.count(key) != 0 ? "set" : "default"});
    }
    print_table(out, {"key", "value", ""}, rows);
  }
};

Result<PolicyResult> set_policy(const GlobalOptions& global, const RetrainPolicyFlags& flags) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(flags.model));
  std::map<std::string, std::string> given;
  auto seconds = [&](const char* key, const char* flag, const std::optional<std::string>& text) -> Status {
    if (!text) return {};
    SLIPWAY_ASSIGN_OR_RETURN(auto duration, parse_duration(flag, *text, 366));
    if (duration.count() > 0 && duration < std::chrono::seconds(1)) {
      return invalid_argument(std::string(flag) + " is counted in seconds: give at least 1s, or 0");
    }
    given[key] = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(duration).count());
    return {};
  };
  SLIPWAY_RETURN_IF_ERROR(seconds("every_s", "--every", flags.every));
  SLIPWAY_RETURN_IF_ERROR(seconds("cooldown_s", "--cooldown", flags.cooldown));
  SLIPWAY_RETURN_IF_ERROR(seconds("traffic_window_s", "--window", flags.window));
  SLIPWAY_RETURN_IF_ERROR(seconds("rollout_interval_s", "--rollout-interval", flags.rollout_interval));
  auto text = [&](const char* key, const std::optional<std::string>& value) {
    if (value) given[key] = *value;
  };
  text("on", flags.on);
  text("id_column", flags.id_column);
  text("gate", flags.gate);
  text("gate_metric", flags.gate_metric);
  text("gate_slice", flags.gate_slice);
  text("endpoint", flags.endpoint);
  text("deploy", flags.deploy);
  if (flags.rounds) given["rounds"] = std::to_string(*flags.rounds);
  if (flags.min_rows) given["min_rows"] = std::to_string(*flags.min_rows);
  if (flags.warm_start) given["warm_start"] = *flags.warm_start ? "true" : "false";
  // Files are read when the policy runs, from wherever that is (cron): stored absolute.
  auto absolute = [](const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); };
  if (flags.data) given["data"] = *flags.data == "traffic" || flags.data->empty() ? *flags.data : absolute(*flags.data);
  if (flags.gate_data) given["gate_data"] = flags.gate_data->empty() ? "" : absolute(*flags.gate_data);
  if (flags.spec_path) {
    // Stored as text with absolute paths, so the policy does not change when the file does.
    pipeline::TrainSpec spec;
    if (!flags.spec_path->empty()) SLIPWAY_RETURN_IF_ERROR(pipeline::load_spec(*flags.spec_path, spec));
    given["spec"] = flags.spec_path->empty() ? "" : pipeline::spec_yaml(spec);
  }

  bool gate_given = flags.gate_min || flags.gate_max || flags.gate_max_drop || flags.gate_max_relative_drop;
  bool changes = !given.empty() || gate_given || flags.remove || flags.reset;
  auto access = changes ? WorkspaceAccess::kWrite : WorkspaceAccess::kReadOnly;
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, access));
  PolicyResult result;
  result.model = flags.model;
  if (flags.remove) {
    if (!given.empty() || gate_given) return invalid_argument("--remove takes no other policy flag");
    SLIPWAY_RETURN_IF_ERROR(pipeline::remove_retrain_policy(*store, flags.model, pipeline::Caller{}));
    result.removed = true;
    return result;
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto stored, store->retraining().policy(flags.model));
  if (stored.empty() && !changes) {
    return not_found("model '" + flags.model + "' has no retrain policy; set one with `slipway retrain policy " +
                     flags.model + " --on alert --data FILE`");
  }
  const auto& schema = pipeline::retrain_policy_schema();
  std::map<std::string, std::string> merged = flags.reset ? given : stored;
  for (const auto& [key, value] : given) merged[key] = value;
  // A gate flag sets its threshold; the others stored stay.
  if (gate_given) {
    eval::GateCriteria criteria;
    if (auto gate = merged.find("gate"); gate != merged.end()) {
      SLIPWAY_RETURN_IF_ERROR(eval::parse_gate_thresholds(gate->second, criteria));
    }
    for (auto [flag, threshold] : {std::pair{&flags.gate_min, &criteria.min}, std::pair{&flags.gate_max, &criteria.max},
                                   std::pair{&flags.gate_max_drop, &criteria.max_drop},
                                   std::pair{&flags.gate_max_relative_drop, &criteria.max_relative_drop}}) {
      if (*flag) *threshold = *flag;
    }
    if (criteria.min && criteria.max && *criteria.min > *criteria.max) {
      return invalid_argument("the gate's minimum is above its maximum: no candidate could pass");
    }
    merged["gate"] = eval::format_gate_thresholds(criteria);
    given["gate"] = merged["gate"];
  }
  pipeline::RetrainPolicy policy = schema.defaults();
  SLIPWAY_RETURN_IF_ERROR(schema.apply(policy, merged));
  policy.model = flags.model;
  SLIPWAY_RETURN_IF_ERROR(pipeline::check_retrain_policy(policy));
  if (changes) {
    SLIPWAY_RETURN_IF_ERROR(pipeline::save_retrain_policy(*store, flags.model, merged, pipeline::Caller{}));
    result.changed = true;
  }
  result.values = schema.values(policy);
  for (const auto& [key, value] : merged) result.stored.insert(key);
  return result;
}

// ------------------------------------------------------------------------------ retraining

// One model's turn: its decision and outcome, or what stopped it.
struct Retraining {
  std::string model;
  Status error;
  pipeline::RetrainOutcome outcome;
};

struct RetrainResult : CommandResult {
  std::vector<Retraining> retrainings;
  bool dry_run = false;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("retrainings").begin_array();
    for (const auto& item : retrainings) pipeline::write_retraining_json(json, item.model, item.error, item.outcome);
    json.end_array().end_object();
  }

  void write_text(std::ostream& out) const override {
    for (const auto& item : retrainings) {
      const auto& outcome = item.outcome;
      const auto& record = outcome.record;
      if (!item.error.ok()) {
        out << item.model << ": error: " << item.error.message() << "\n";
        continue;
      }
      if (!outcome.decision.due || dry_run) {
        out << item.model << ": " << (outcome.decision.due ? "would retrain: " : "not due: ") << outcome.decision.reason
            << "\n";
        continue;
      }
      out << item.model << ": " << outcome.decision.reason << "\n";
      if (record.state == "unchanged") {
        out << "  nothing to do: " << record.message << " (--force trains anyway)\n";
        continue;
      }
      out << fmt::format("  retraining #{} against {} on {}", record.id, outcome.baseline, outcome.data);
      if (outcome.training) {
        const auto& training = *outcome.training;
        out << fmt::format(": run {} (trained on {} rows{})", record.run_id, training.summary.rows_used,
                           training.spec.init_model.empty() ? "" : ", warm start from " + training.spec.init_model);
      }
      out << "\n";
      if (outcome.gate) {
        const auto& overall = outcome.gate->checks.front();
        out << fmt::format("  gate {} {}: baseline {} candidate {} on {}: {}\n", outcome.gate->criteria.metric,
                           eval::format_gate_thresholds(outcome.gate->criteria), format_metric(overall.baseline),
                           format_metric(overall.candidate), outcome.gate_data,
                           outcome.gate->passed() ? "passed" : "FAILED");
      }
      out << "  " << record.state;
      if (record.candidate_version > 0) out << ": " << item.model << "@" << record.candidate_version;
      if (!record.deployed.empty()) out << " to " << record.deployed;
      if (!record.message.empty()) out << " (" << record.message << ")";
      out << "\n";
    }
  }
};

Retraining retrain_model(const GlobalOptions& global, registry::Registry& store, const std::string& model,
                         const RetrainFlags& flags) {
  Retraining item;
  item.model = model;
  auto policy = pipeline::load_retrain_policy(store, model);
  if (policy.ok() && !policy->has_value()) {
    policy = not_found("model '" + model + "' has no retrain policy (slipway retrain policy " + model +
                       " --on alert --data FILE)");
  }
  if (!policy.ok()) {
    item.error = policy.status();
    return item;
  }
  if (flags.dry_run) {
    // Read-only: what the triggers say now, without the lock or any write.
    auto decision = flags.force ? Result<pipeline::RetrainDecision>(pipeline::RetrainDecision{true, "forced (--force)"})
                                : pipeline::retrain_due(store, **policy, unix_time_ms());
    if (decision.ok()) {
      item.outcome.decision = *decision;
    } else {
      item.error = decision.status();
    }
    return item;
  }
  ProgressBar progress("retrain " + model, 0, flags.progress && !global.json);
  pipeline::RetrainOptions options;
  options.force = flags.force;
  options.callbacks.on_round = [&](const train::RoundMetrics& latest, int total) {
    progress.set_total(total);
    progress.update(latest.round + 1, "train " + format_metric(latest.train));
  };
  options.callbacks.on_fit_done = [&] { progress.finish(); };
  auto outcome = pipeline::retrain(store, **policy, options);
  if (outcome.ok()) {
    item.outcome = std::move(*outcome);
  } else {
    item.error = outcome.status();
  }
  return item;
}

// ------------------------------------------------------------------------------ history

struct HistoryResult : CommandResult {
  std::vector<registry::RetrainingRecord> records;
  void write_json(JsonWriter& json) const override {
    json.begin_array();
    for (const auto& record : records) pipeline::write_retraining_record_json(json, record);
    json.end_array();
  }
  void write_text(std::ostream& out) const override {
    if (records.empty()) {
      out << "no retrainings yet\n";
      return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& record : records) {
      std::string outcome = record.candidate_version > 0 ? "@" + std::to_string(record.candidate_version) : "";
      if (!record.deployed.empty()) outcome += " -> " + record.deployed;
      if (!record.message.empty()) outcome += (outcome.empty() ? "" : "; ") + record.message;
      rows.push_back({"#" + std::to_string(record.id), record.model + "@" + std::to_string(record.baseline_version),
                      format_time_ms(record.started_ms), record.state, record.reason, outcome});
    }
    print_table(out, {"id", "baseline", "started", "state", "reason", "outcome"}, rows);
  }
};

}  // namespace

int run_retrain_policy(const GlobalOptions& global, const RetrainPolicyFlags& flags) {
  return render(global, set_policy(global, flags));
}

int run_retrain(const GlobalOptions& global, const RetrainFlags& flags) {
  if (flags.due && !flags.model.empty()) return fail(invalid_argument("give a model NAME or --due, not both"));
  if (!flags.due && flags.model.empty()) return fail(invalid_argument("give a model NAME, or --due for every policy"));
  if (flags.due && flags.force) return fail(invalid_argument("--force retrains one model: give NAME, not --due"));
  if (!flags.due) {
    if (Status valid = registry::validate_model_name(flags.model); !valid.ok()) return fail(valid);
  }
  auto store = open_workspace(global, flags.dry_run ? WorkspaceAccess::kReadOnly : WorkspaceAccess::kWrite);
  if (!store.ok()) return fail(store.status());
  std::vector<std::string> models = {flags.model};
  if (flags.due) {
    auto with_policies = (*store)->retraining().models_with_policies();
    if (!with_policies.ok()) return fail(with_policies.status());
    models = std::move(*with_policies);
  }
  RetrainResult result;
  result.dry_run = flags.dry_run;
  bool failed = false;
  for (const auto& model : models) {
    result.retrainings.push_back(retrain_model(global, **store, model, flags));
    const auto& item = result.retrainings.back();
    const std::string& state = item.outcome.record.state;
    failed = failed || !item.error.ok() || state == "failed" || state == "deploy_failed";
  }
  // One model's error is the command's; --due reports each and goes on to the next.
  if (!flags.due && !result.retrainings.front().error.ok()) return fail(result.retrainings.front().error);
  render(global, result);
  return failed ? 1 : 0;
}

int run_retrain_history(const GlobalOptions& global, const std::string& model, std::int64_t limit) {
  if (limit <= 0) return fail(invalid_argument("--limit must be at least 1"));
  auto history = [&]() -> Result<HistoryResult> {
    SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
    HistoryResult result;
    SLIPWAY_ASSIGN_OR_RETURN(result.records, store->retraining().list(model, static_cast<std::size_t>(limit)));
    return result;
  };
  return render(global, history());
}

}  // namespace slipway::cli
