// AutoML (`slipway tune --auto`): studies across model families, by successive halving.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "pipeline/operation_support.h"
#include "pipeline/study_support.h"
#include "slipway/eval.h"
#include "slipway/pipeline/tuning.h"

namespace slipway::pipeline {

Result<AutoMlResult> run_automl(registry::Registry& registry, const AutoMlRequest& request,
                                const StudyCallbacks& callbacks) {
  if (!(request.budget_seconds > 0 && request.budget_seconds <= kLongestBudgetSeconds)) {
    return invalid_argument(
        "--auto needs a --budget of at most 30 days, such as 15m: it spends it across model "
        "families");
  }
  if (request.objectives.size() > 1) return invalid_argument("--auto optimizes one objective");
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.study));
  if (!request.register_as.empty()) SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.register_as));
  TrainSpec probe = request.spec;
  probe.model = "gbdt";  // a family that takes every task: the task comes from the target
  SLIPWAY_RETURN_IF_ERROR(check_train_spec(probe));
  SLIPWAY_ASSIGN_OR_RETURN(model::Task task, inferred_task(probe));
  std::vector<std::string> families = request.families;
  if (families.empty()) {
    if (task == model::Task::kBinaryClassification) families = {"logistic", "gbdt", "mlp"};
    if (task == model::Task::kRegression) families = {"linear", "gbdt", "mlp"};
    if (task == model::Task::kMulticlassClassification) families = {"gbdt", "mlp"};
  }
  for (const auto& family : families) {
    bool fits = (family == "logistic" && task == model::Task::kBinaryClassification) ||
                (family == "linear" && task == model::Task::kRegression) || family == "gbdt" || family == "mlp";
    if (!fits) return invalid_argument("model '" + family + "' does not train this task");
  }
  AutoMlResult result;
  if (request.objectives.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(result.objective, parse_study_objective(std::string(eval::watched_metric(task))));
  } else {
    result.objective = request.objectives.front();
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(request.budget_seconds));
  auto seconds_left = [&] {
    return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  };
  for (const auto& family : families) {
    AutoMlEntry entry;
    entry.family = family;
    entry.study = request.study + "-" + family;
    result.leaderboard.push_back(std::move(entry));
  }
  // Better first: a feasible best by the objective, then the rest.
  auto better = [&](const AutoMlEntry& a, const AutoMlEntry& b) {
    if (a.best.has_value() != b.best.has_value()) return a.best.has_value();
    if (!a.best) return false;
    double x = a.best->objective_values.front(), y = b.best->objective_values.front();
    return result.objective.maximize ? x > y : x < y;
  };
  constexpr double kShortestShareSeconds = 0.5;
  std::vector<AutoMlEntry*> alive;
  for (auto& entry : result.leaderboard) alive.push_back(&entry);
  for (int rung = 0; !alive.empty() && seconds_left() > kShortestShareSeconds; ++rung) {
    const int quota = 4 << std::min(rung, 10);
    for (std::size_t i = 0; i < alive.size() && seconds_left() > kShortestShareSeconds; ++i) {
      AutoMlEntry& entry = *alive[i];
      StudyRequest study;
      study.study = entry.study;
      study.caller = request.caller;
      study.measure_latency = true;
      study.budget_seconds = seconds_left() / static_cast<double>(alive.size() - i);
      StudyDefinition& definition = study.definition;
      definition.spec = request.spec;
      definition.spec.model = entry.family;
      SLIPWAY_ASSIGN_OR_RETURN(definition.space, tune::default_search_space(entry.family));
      definition.objectives = {result.objective};
      definition.constraints = request.constraints;
      definition.trials = entry.trials + quota;
      auto ran = run_study(registry, study, callbacks);
      entry.last_rung = rung;
      if (!ran.ok()) {
        entry.error = ran.status().message();
        if (ran.status().code() == StatusCode::kAlreadyExists) return ran.status();  // a name clash, not a family
        continue;
      }
      entry.trials = static_cast<int>(std::count_if(ran->trials.begin(), ran->trials.end(),
                                                    [](const auto& view) { return !interrupted(view.trial); }));
      entry.best.reset();
      if (!ran->best.empty()) entry.best = ran->trials[static_cast<std::size_t>(ran->best.front())];
    }
    result.rungs = rung + 1;
    std::erase_if(alive, [](const AutoMlEntry* entry) { return !entry->error.empty(); });
    if (alive.size() > 1) {
      std::stable_sort(alive.begin(), alive.end(), [&](const auto* a, const auto* b) { return better(*a, *b); });
      alive.resize((alive.size() + 1) / 2);
    }
  }
  std::stable_sort(result.leaderboard.begin(), result.leaderboard.end(), better);
  if (!request.register_as.empty()) {
    const AutoMlEntry& winner = result.leaderboard.front();
    if (!winner.best)
      return failed_precondition("no family completed a trial within the constraints: nothing to register");
    act_as(registry, request.caller);
    SLIPWAY_ASSIGN_OR_RETURN(auto run, registry.runs().get(winner.best->trial.run_id));
    SLIPWAY_ASSIGN_OR_RETURN(result.registered,
                             registry.models().register_version(request.register_as, run.bundle_sha256, run.run_id));
  }
  return result;
}

void write_automl_json(JsonWriter& json, const AutoMlResult& result) {
  json.begin_object().key("objective").begin_object().key("measure").value(result.objective.measure);
  json.key("direction").value(result.objective.maximize ? "maximize" : "minimize").end_object();
  json.key("rungs").value(result.rungs);
  json.key("leaderboard").begin_array();
  for (const auto& entry : result.leaderboard) {
    json.begin_object().key("family").value(entry.family).key("study").value(entry.study);
    json.key("trials").value(entry.trials).key("rung").value(entry.last_rung);
    if (!entry.error.empty()) json.key("error").value(entry.error);
    if (entry.best) {
      const auto& trial = entry.best->trial;
      json.key("best").begin_object().key("trial").value(trial.number).key("run_id").value(trial.run_id);
      json.key("value").value(entry.best->objective_values.front());
      json.key("measures").begin_object();
      for (const auto& [name, value] : trial.measures) json.key(name).value(value);
      json.end_object().key("params").begin_object();
      for (const auto& [name, value] : trial.params) json.key(name).value(value);
      json.end_object().end_object();
    }
    json.end_object();
  }
  json.end_array();
  if (result.registered) {
    json.key("registered").begin_object().key("model").value(result.registered->model);
    json.key("version").value(result.registered->version).end_object();
  }
  json.end_object();
}

}  // namespace slipway::pipeline
