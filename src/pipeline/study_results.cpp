// A study's trials as a study reads them: each trial's objectives and feasibility, the best trial
// or the Pareto front, parameter importance, and the study as JSON.
#include <algorithm>
#include <cmath>
#include <limits>

#include "pipeline/study_support.h"

namespace slipway::pipeline {
namespace {

// a is at least as good as b in every objective and better in one.
bool dominates(const std::vector<double>& a, const std::vector<double>& b, const std::vector<StudyObjective>& goals) {
  bool better = false;
  for (std::size_t i = 0; i < goals.size(); ++i) {
    double ai = goals[i].maximize ? -a[i] : a[i];
    double bi = goals[i].maximize ? -b[i] : b[i];
    if (ai > bi) return false;
    better = better || ai < bi;
  }
  return better;
}

std::vector<std::int64_t> best_trials(const StudyDefinition& definition, const std::vector<StudyTrialView>& views) {
  std::vector<const StudyTrialView*> candidates;
  for (const auto& view : views) {
    if (usable(view)) candidates.push_back(&view);
  }
  std::vector<std::int64_t> best;
  if (candidates.empty()) return best;
  if (definition.objectives.size() == 1) {
    const bool maximize = definition.objectives[0].maximize;
    const StudyTrialView* winner = candidates[0];
    for (const auto* view : candidates) {
      double value = view->objective_values[0], current = winner->objective_values[0];
      if (maximize ? value > current : value < current) winner = view;
    }
    best.push_back(winner->trial.number);
    return best;
  }
  for (const auto* view : candidates) {
    bool dominated = std::any_of(candidates.begin(), candidates.end(), [&](const StudyTrialView* other) {
      return dominates(other->objective_values, view->objective_values, definition.objectives);
    });
    if (!dominated) best.push_back(view->trial.number);
  }
  return best;
}

// Each parameter's share of the first objective's variance: how much the objective's mean moves
// across the parameter's values (choices, or four quantile bins of numbers).
std::map<std::string, double> parameter_importance(const StudyDefinition& definition,
                                                   const std::vector<StudyTrialView>& views) {
  std::vector<const StudyTrialView*> complete;
  for (const auto& view : views) {
    if (view.trial.state == "complete" && !view.objective_values.empty() && std::isfinite(view.objective_values[0])) {
      complete.push_back(&view);
    }
  }
  std::map<std::string, double> importance;
  if (complete.size() < 4) return importance;
  double mean = 0;
  for (const auto* view : complete) mean += view->objective_values[0];
  mean /= static_cast<double>(complete.size());
  double total = 0;
  for (const auto* view : complete) total += std::pow(view->objective_values[0] - mean, 2);
  if (!(total > 0)) return importance;
  for (const auto& param : definition.space.params) {
    // Group the trials by the parameter's value (bins for numbers); unset values form a group.
    std::vector<std::pair<std::string, double>> keyed;
    std::vector<double> numbers;
    for (const auto* view : complete) {
      auto found = view->trial.params.find(param.name);
      if (found != view->trial.params.end() && param.kind != tune::ParamKind::kCategorical) {
        numbers.push_back(std::strtod(found->second.c_str(), nullptr));
      }
    }
    std::sort(numbers.begin(), numbers.end());
    auto bin_of = [&](double number) {
      int bin = 0;
      for (int edge = 1; edge < 4; ++edge) {
        if (number > numbers[numbers.size() * static_cast<std::size_t>(edge) / 4]) bin = edge;
      }
      return std::to_string(bin);
    };
    for (const auto* view : complete) {
      auto found = view->trial.params.find(param.name);
      std::string key = found == view->trial.params.end() ? "(unset)"
                        : param.kind == tune::ParamKind::kCategorical
                            ? found->second
                            : bin_of(std::strtod(found->second.c_str(), nullptr));
      keyed.emplace_back(key, view->objective_values[0]);
    }
    std::map<std::string, std::pair<double, int>> groups;
    for (const auto& [key, value] : keyed) {
      groups[key].first += value;
      groups[key].second += 1;
    }
    double between = 0;
    for (const auto& [key, group] : groups) between += group.second * std::pow(group.first / group.second - mean, 2);
    importance[param.name] = between / total;
  }
  double sum = 0;
  for (const auto& [name, share] : importance) sum += share;
  if (sum > 0) {
    for (auto& [name, share] : importance) share /= sum;
  }
  return importance;
}

}  // namespace

StudyTrialView view_of(const StudyDefinition& definition, registry::StudyTrial trial) {
  StudyTrialView view;
  view.trial = std::move(trial);
  if (view.trial.state != "complete") return view;
  for (const auto& objective : definition.objectives) {
    auto found = view.trial.measures.find(objective.measure);
    view.objective_values.push_back(found == view.trial.measures.end() ? std::numeric_limits<double>::quiet_NaN()
                                                                       : found->second);
  }
  for (const auto& constraint : definition.constraints) {
    view.feasible = view.feasible && constraint_holds(constraint, view.trial.measures);
  }
  return view;
}

std::vector<int> domination_ranks(const std::vector<std::vector<double>>& values,
                                  const std::vector<StudyObjective>& goals) {
  std::vector<int> rank(values.size(), -1);
  std::size_t assigned = 0;
  for (int level = 0; assigned < values.size(); ++level) {
    std::vector<std::size_t> front;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (rank[i] >= 0) continue;
      bool dominated = false;
      for (std::size_t j = 0; j < values.size() && !dominated; ++j) {
        dominated = j != i && rank[j] < 0 && dominates(values[j], values[i], goals);
      }
      if (!dominated) front.push_back(i);
    }
    for (std::size_t i : front) rank[i] = level;
    assigned += front.size();
  }
  return rank;
}

bool usable(const StudyTrialView& view) {
  if (view.trial.state != "complete" || !view.feasible) return false;
  return std::none_of(view.objective_values.begin(), view.objective_values.end(),
                      [](double value) { return std::isnan(value); });
}

StudyResult study_of(const std::string& study, const StudyDefinition& definition,
                     std::vector<registry::StudyTrial> trials) {
  StudyResult result;
  result.study = study;
  result.definition = definition;
  for (auto& trial : trials) result.trials.push_back(view_of(definition, std::move(trial)));
  result.best = best_trials(definition, result.trials);
  result.importance = parameter_importance(definition, result.trials);
  return result;
}

void write_study_json(JsonWriter& json, const StudyResult& study) {
  const StudyDefinition& definition = study.definition;
  json.begin_object();
  json.key("study").value(study.study);
  json.key("model").value(definition.spec.model);
  json.key("sampler").value(definition.sampler);
  json.key("pruner").value(definition.pruner);
  json.key("objectives").begin_array();
  for (const auto& objective : definition.objectives) {
    json.begin_object().key("measure").value(objective.measure).key("direction");
    json.value(objective.maximize ? "maximize" : "minimize").end_object();
  }
  json.end_array();
  json.key("constraints").begin_array();
  for (const auto& constraint : definition.constraints) json.value(constraint_text(constraint));
  json.end_array();
  json.key("trials_planned").value(definition.trials);
  if (!study.stopped.empty()) json.key("trials_run").value(study.trials_run).key("stopped").value(study.stopped);
  std::map<std::string, int> states;
  for (const auto& view : study.trials) ++states[view.trial.state];
  json.key("trial_states").begin_object();
  for (const auto& [state, count] : states) json.key(state).value(count);
  json.end_object();
  json.key("best").begin_array();
  for (auto number : study.best) json.value(number);
  json.end_array();
  json.key("importance").begin_object();
  for (const auto& [name, share] : study.importance) json.key(name).value(share);
  json.end_object();
  if (study.registered) {
    json.key("registered").begin_object().key("model").value(study.registered->model);
    json.key("version").value(study.registered->version).end_object();
  }
  json.key("trials").begin_array();
  for (const auto& view : study.trials) {
    const auto& trial = view.trial;
    json.begin_object().key("number").value(trial.number).key("state").value(trial.state);
    json.key("params").begin_object();
    for (const auto& [name, value] : trial.params) json.key(name).value(value);
    json.end_object();
    json.key("values").begin_array();
    for (double value : view.objective_values) json.value(value);
    json.end_array();
    json.key("feasible").value(view.feasible);
    json.key("measures").begin_object();
    for (const auto& [name, value] : trial.measures) json.key(name).value(value);
    json.end_object();
    if (!trial.intermediate.empty()) {
      json.key("last_step").value(trial.intermediate.rbegin()->first);
    }
    json.key("run_id").value(trial.run_id).key("message").value(trial.message);
    if (trial.retry_of >= 0) json.key("retry_of").value(trial.retry_of);
    double seconds = trial.finished_ms > 0 ? static_cast<double>(trial.finished_ms - trial.started_ms) / 1000.0 : 0.0;
    json.key("seconds").value(seconds);
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

}  // namespace slipway::pipeline
