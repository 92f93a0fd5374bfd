// AutoML (`slipway tune --auto`): studies across model families, by successive halving, and an
// ensemble of the best family's top trials when it scores better.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <set>

#include "pipeline/operation_support.h"
#include "pipeline/study_support.h"
#include "slipway/eval.h"
#include "slipway/model/ensembles.h"
#include "slipway/pipeline/tuning.h"

namespace slipway::pipeline {
namespace {

// Families whose models average into one model of the family (model::averaged_bundle).
bool averages_into_one(const std::string& family) {
  return family == "gbdt" || family == "logistic" || family == "linear";
}

bool better_value(double a, double b, bool maximize) { return maximize ? a > b : a < b; }

// How many of a family's best trials greedy selection considers for the ensemble.
constexpr int kEnsembleCandidates = 10;

// The top `count` complete feasible trials of `study` with distinct bundles (a trial reused from
// the step cache has its twin's), best first, and their bundles.
Status top_trials(registry::Registry& registry, const std::string& study, const StudyObjective& objective, int count,
                  std::vector<StudyTrialView>& trials, std::vector<std::shared_ptr<const model::Bundle>>& bundles) {
  SLIPWAY_ASSIGN_OR_RETURN(StudyResult stored, read_study(registry, study));
  std::vector<StudyTrialView> ranked;
  for (auto& view : stored.trials) {
    if (usable(view) && std::isfinite(view.objective_values.front())) {
      ranked.push_back(std::move(view));
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](const StudyTrialView& a, const StudyTrialView& b) {
    return better_value(a.objective_values.front(), b.objective_values.front(), objective.maximize);
  });
  std::set<std::string> seen;
  for (auto& view : ranked) {
    if (static_cast<int>(trials.size()) >= count) break;
    SLIPWAY_ASSIGN_OR_RETURN(auto run, registry.runs().get(view.trial.run_id));
    if (run.bundle_sha256.empty() || !seen.insert(run.bundle_sha256).second) continue;
    SLIPWAY_ASSIGN_OR_RETURN(auto bundle,
                             model::Bundle::load(registry.artifacts().path_for(run.bundle_sha256), run.bundle_sha256));
    bundles.push_back(std::move(bundle));
    trials.push_back(std::move(view));
  }
  return {};
}

// Greedy forward selection (Caruana et al. 2004, without replacement): from the best trial, add
// the candidate whose average with the members scores best on the held-out rows, while that
// improves the objective, up to `size` members. Returns the members' indices into `candidates`.
Result<std::vector<std::size_t>> select_members(const std::vector<std::shared_ptr<const model::Bundle>>& candidates,
                                                const AutoMlRequest& request, const StudyObjective& objective,
                                                const TrainSpec& spec, const data::Table& held_out,
                                                double best_single) {
  std::vector<std::size_t> members = {0};
  double current = best_single;
  while (static_cast<int>(members.size()) < request.ensemble_size) {
    std::optional<std::size_t> pick;
    double pick_value = current;
    for (std::size_t candidate = 1; candidate < candidates.size(); ++candidate) {
      if (std::find(members.begin(), members.end(), candidate) != members.end()) continue;
      std::vector<std::shared_ptr<const model::Bundle>> trial;
      trial.reserve(members.size() + 1);
      for (auto member : members) trial.push_back(candidates[member]);
      trial.push_back(candidates[candidate]);
      auto averaged = model::averaged_bundle(trial);
      if (!averaged.ok()) continue;  // this one does not average with the members (say, int8 weights)
      SLIPWAY_ASSIGN_OR_RETURN(
          auto evaluation, eval::evaluate(**averaged, held_out, {.slice_column = spec.slice, .costs = request.costs}));
      double value = evaluation_measure(objective.measure, evaluation);
      if (std::isfinite(value) && better_value(value, pick_value, objective.maximize)) {
        pick = candidate;
        pick_value = value;
      }
    }
    if (!pick) break;
    members.push_back(*pick);
    current = pick_value;
  }
  return members;
}

// Builds the best averaging family's ensemble by greedy selection among its top trials,
// measures it on the held-out rows as a trial is measured, and records it as a run. Sets
// `result.ensemble`, or says in `result.ensemble_note` why there is none; an error is one of the
// store's or the data's.
Status build_ensemble(registry::Registry& registry, const AutoMlRequest& request, AutoMlResult& result) {
  if (is_bundle_measure(result.objective.measure)) {
    result.ensemble_note = "the objective is measured on the bundle, where averaging models only adds cost";
    return {};
  }
  const AutoMlEntry* source = nullptr;
  for (const auto& entry : result.leaderboard) {
    if (entry.best && averages_into_one(entry.family)) {
      source = &entry;
      break;
    }
  }
  if (source == nullptr) {
    result.ensemble_note = "no family that averages into one model (gbdt, logistic, linear) completed a trial";
    return {};
  }
  std::vector<StudyTrialView> candidates;
  std::vector<std::shared_ptr<const model::Bundle>> bundles;
  SLIPWAY_RETURN_IF_ERROR(
      top_trials(registry, source->study, result.objective, kEnsembleCandidates, candidates, bundles));
  if (bundles.size() < 2) {
    result.ensemble_note = source->family + " has fewer than two feasible trials with distinct models to average";
    return {};
  }
  TrainSpec spec = request.spec;
  spec.model = source->family;
  SLIPWAY_ASSIGN_OR_RETURN(TrainingRows rows, training_rows(spec));
  auto chosen =
      select_members(bundles, request, result.objective, spec, rows.test, candidates.front().objective_values.front());
  if (!chosen.ok()) {
    result.ensemble_note = "the " + source->family + " trials do not average: " + chosen.status().message();
    return {};
  }
  if (chosen->size() < 2) {
    result.ensemble_note = "no other " + source->family + " trial improves the best one when averaged with it";
    return {};
  }
  AutoMlEnsemble ensemble;
  ensemble.family = source->family;
  ensemble.study = source->study;
  std::vector<std::shared_ptr<const model::Bundle>> members;
  members.reserve(chosen->size());
  ensemble.members.reserve(chosen->size());
  for (auto index : *chosen) {
    ensemble.members.push_back(candidates[index]);
    members.push_back(bundles[index]);
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto averaged, model::averaged_bundle(members));
  TrainOutcome outcome;
  SLIPWAY_ASSIGN_OR_RETURN(outcome.evaluation, eval::evaluate(*averaged, rows.test, spec.slice));
  SLIPWAY_ASSIGN_OR_RETURN(outcome.summary.bundle,
                           with_training_record(*averaged, test_metrics_of(outcome.evaluation), rows.train));
  SLIPWAY_ASSIGN_OR_RETURN(outcome.bundle_sha256, registry.artifacts().put(outcome.summary.bundle->serialize()));
  outcome.held_out = std::move(rows.test);

  StudyDefinition measured;
  measured.objectives = {result.objective};
  measured.constraints = request.constraints;
  measured.costs = request.costs;
  Status measures = measure_trial(registry, measured, /*measure_latency=*/true, spec, outcome, ensemble.measures);
  if (!measures.ok()) log_warn("the ensemble: " + measures.message());
  auto value = ensemble.measures.find(result.objective.measure);
  ensemble.value = value == ensemble.measures.end() ? std::nan("") : value->second;
  for (const auto& constraint : request.constraints) {
    // An ensemble is not trained: what training measures does not bound it.
    if (constraint.measure == "train_s" || constraint.measure == kPeakTrainingMemory) continue;
    ensemble.feasible = ensemble.feasible && constraint_holds(constraint, ensemble.measures);
  }
  const AutoMlEntry& leader = result.leaderboard.front();
  ensemble.better = ensemble.feasible && std::isfinite(ensemble.value) && leader.best &&
                    better_value(ensemble.value, leader.best->objective_values.front(), result.objective.maximize);

  act_as(registry, request.caller);
  registry::NewRun run;
  run.experiment = source->study;
  run.code_version = std::string(slipway_code_version());
  run.spec = "ensemble: mean of " + std::to_string(members.size()) + " " + source->family + " trials of study " +
             source->study + "\n";
  run.params = outcome.summary.bundle->manifest().params;
  std::vector<std::string> member_runs;
  for (const auto& member : ensemble.members) member_runs.push_back(member.trial.run_id);
  run.tags = {{"slipway.study", source->study}, {"slipway.ensemble", join(member_runs, ",")}};
  SLIPWAY_ASSIGN_OR_RETURN(ensemble.run_id, registry.runs().start(run));
  std::vector<std::pair<std::string, double>> logged;
  for (const auto& [name, measure] : ensemble.measures) {
    if (std::isfinite(measure)) logged.emplace_back(name, measure);
  }
  Status recorded = registry.runs().log_metrics(ensemble.run_id, logged);
  if (!recorded.ok()) {
    (void)registry.runs().finish(ensemble.run_id, false, "");
    return recorded;
  }
  SLIPWAY_RETURN_IF_ERROR(registry.runs().finish(ensemble.run_id, true, outcome.bundle_sha256));
  ensemble.bundle_sha256 = outcome.bundle_sha256;
  result.ensemble = std::move(ensemble);
  return {};
}

}  // namespace

Result<AutoMlResult> run_automl(registry::Registry& registry, const AutoMlRequest& request,
                                const StudyCallbacks& callbacks) {
  if (!(request.budget_seconds > 0 && request.budget_seconds <= kLongestBudgetSeconds)) {
    return invalid_argument(
        "--auto needs a --budget of at most 30 days, such as 15m: it spends it across model "
        "families");
  }
  if (request.objectives.size() > 1) return invalid_argument("--auto optimizes one objective");
  SLIPWAY_RETURN_IF_ERROR(check_costs_given(request.objectives, request.constraints, request.costs));
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.study));
  if (!request.register_as.empty()) SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.register_as));
  TrainSpec probe = request.spec;
  probe.model = "gbdt";  // a family that takes every task: the task comes from the target
  SLIPWAY_RETURN_IF_ERROR(check_train_spec(probe));
  SLIPWAY_ASSIGN_OR_RETURN(model::Task task, inferred_task(probe));
  SLIPWAY_RETURN_IF_ERROR(check_costs_fit(request.costs.has_value(), task, request.spec.target));
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
      definition.costs = request.costs;
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
  if (request.ensemble_size < 2) {
    result.ensemble_note = "not asked for";
  } else if (callbacks.cancel != nullptr && callbacks.cancel->load()) {
    result.ensemble_note = "cancelled";
  } else if (Status built = build_ensemble(registry, request, result); !built.ok()) {
    // The families' results stand without it.
    result.ensemble.reset();
    result.ensemble_note = "it could not be built: " + built.message();
    log_warn("AutoML's ensemble " + result.ensemble_note);
  }
  if (!request.register_as.empty()) {
    const AutoMlEntry& winner = result.leaderboard.front();
    if (!winner.best)
      return failed_precondition("no family completed a trial within the constraints: nothing to register");
    act_as(registry, request.caller);
    if (result.ensemble && result.ensemble->better) {
      SLIPWAY_ASSIGN_OR_RETURN(result.registered,
                               registry.models().register_version(request.register_as, result.ensemble->bundle_sha256,
                                                                  result.ensemble->run_id));
    } else {
      SLIPWAY_ASSIGN_OR_RETURN(auto run, registry.runs().get(winner.best->trial.run_id));
      SLIPWAY_ASSIGN_OR_RETURN(result.registered,
                               registry.models().register_version(request.register_as, run.bundle_sha256, run.run_id));
    }
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
  if (result.ensemble) {
    const AutoMlEnsemble& ensemble = *result.ensemble;
    json.key("ensemble").begin_object().key("family").value(ensemble.family).key("study").value(ensemble.study);
    json.key("members").begin_array();
    for (const auto& member : ensemble.members) {
      json.begin_object().key("trial").value(member.trial.number).key("run_id").value(member.trial.run_id);
      json.key("value").value(member.objective_values.front()).end_object();
    }
    json.end_array().key("value").value(ensemble.value).key("feasible").value(ensemble.feasible);
    json.key("better").value(ensemble.better).key("run_id").value(ensemble.run_id);
    json.key("measures").begin_object();
    for (const auto& [name, value] : ensemble.measures) json.key(name).value(value);
    json.end_object().end_object();
  } else {
    json.key("ensemble_note").value(result.ensemble_note);
  }
  if (result.registered) {
    json.key("registered").begin_object().key("model").value(result.registered->model);
    json.key("version").value(result.registered->version).end_object();
  }
  json.end_object();
}

}  // namespace slipway::pipeline
