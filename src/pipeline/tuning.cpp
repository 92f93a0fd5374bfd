// Hyperparameter studies: trials as training runs, their parameters from a tune:: sampler, the
// study and its trials in the metadata store.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "pipeline/operation_support.h"
#include "pipeline/study_support.h"
#include "slipway/eval.h"
#include "slipway/pipeline/tuning.h"

namespace slipway::pipeline {
namespace {

constexpr int kMaxTrials = 100'000;
constexpr int kMaxParallel = 64;
// Grid search spreads this many values over each float range.
constexpr int kGridFloatPoints = 5;
// A study whose first trials all fail this often stops: the spec is wrong, not the parameters.
constexpr int kFailuresBeforeGivingUp = 3;
constexpr std::string_view kInterrupted = "interrupted";

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// ---------------------------------------------------------------------------------------------
// The definition as stored.

std::string objective_text(const StudyObjective& objective) {
  return objective.measure + (objective.maximize ? ":maximize" : ":minimize");
}

std::string definition_yaml(const StudyDefinition& definition, bool with_trials) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "sampler" << YAML::Value << definition.sampler;
  out << YAML::Key << "pruner" << YAML::Value << definition.pruner;
  std::vector<std::string> objectives, constraints;
  for (const auto& objective : definition.objectives) objectives.push_back(objective_text(objective));
  for (const auto& constraint : definition.constraints) constraints.push_back(constraint_text(constraint));
  out << YAML::Key << "objectives" << YAML::Value << YAML::Flow << objectives;
  out << YAML::Key << "constraints" << YAML::Value << YAML::Flow << constraints;
  // Only when set: the definitions (and their digests) of studies without costs stay as they were.
  if (definition.costs) out << YAML::Key << "costs" << YAML::Value << eval::cost_matrix_text(*definition.costs);
  out << YAML::Key << "from_study" << YAML::Value << definition.from_study;
  if (with_trials) out << YAML::Key << "trials" << YAML::Value << definition.trials;
  out << YAML::Key << "space" << YAML::Value << YAML::Literal << tune::search_space_yaml(definition.space);
  out << YAML::Key << "spec" << YAML::Value << YAML::Literal << spec_yaml(definition.spec);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Result<StudyDefinition> parse_definition(const std::string& text, const std::string& study) {
  const std::string source = "study '" + study + "'";
  StudyDefinition definition;
  try {
    YAML::Node node = YAML::Load(text);
    definition.sampler = node["sampler"].as<std::string>();
    definition.pruner = node["pruner"].as<std::string>();
    for (const auto& objective : node["objectives"]) {
      SLIPWAY_ASSIGN_OR_RETURN(auto parsed, parse_study_objective(objective.as<std::string>()));
      definition.objectives.push_back(std::move(parsed));
    }
    for (const auto& constraint : node["constraints"]) {
      SLIPWAY_ASSIGN_OR_RETURN(auto parsed, parse_study_constraint(constraint.as<std::string>()));
      definition.constraints.push_back(std::move(parsed));
    }
    if (node["costs"]) {
      SLIPWAY_ASSIGN_OR_RETURN(definition.costs, eval::parse_cost_matrix(node["costs"].as<std::string>()));
    }
    definition.from_study = node["from_study"].as<std::string>();
    definition.trials = node["trials"].as<int>();
    SLIPWAY_RETURN_IF_ERROR(load_spec_text(node["spec"].as<std::string>(), source, definition.spec));
    SLIPWAY_ASSIGN_OR_RETURN(definition.space,
                             tune::parse_search_space(node["space"].as<std::string>(), source, definition.spec.model));
  } catch (const YAML::Exception& error) {
    return data_loss(source + "'s stored definition cannot be read: " + error.msg);
  }
  return definition;
}

std::string definition_sha256(const StudyDefinition& definition) {
  return sha256_hex(definition_yaml(definition, /*with_trials=*/false));
}

// ---------------------------------------------------------------------------------------------
// Checks.

// "none", "median[:WARMUP_STEPS]" or "asha[:MIN_RESOURCE[:REDUCTION_FACTOR]]" (MIN_RESOURCE 0:
// Optuna's "auto"); null for none.
Result<std::unique_ptr<tune::Pruner>> make_pruner(const std::string& pruner) {
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    std::size_t colon = pruner.find(':', start);
    parts.push_back(pruner.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  auto number = [&](std::size_t index, int least, int most) -> Result<int> {
    const std::string& text = parts[index];
    char* end = nullptr;
    long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < least || value > most) {
      return invalid_argument("pruner '" + pruner + "': '" + text + "' must be a whole number from " +
                              std::to_string(least) + " to " + std::to_string(most));
    }
    return static_cast<int>(value);
  };
  const std::string& kind = parts.front();
  if (kind == "none" && parts.size() == 1) return std::unique_ptr<tune::Pruner>();
  if (kind == "median" && parts.size() <= 2) {
    tune::MedianPrunerOptions options;
    if (parts.size() > 1) {
      SLIPWAY_ASSIGN_OR_RETURN(options.warmup_steps, number(1, 0, 100'000));
    }
    return tune::make_median_pruner(options);
  }
  if (kind == "asha" && parts.size() <= 3) {
    tune::AshaOptions options;
    if (parts.size() > 1) {
      SLIPWAY_ASSIGN_OR_RETURN(options.min_resource, number(1, 0, 100'000));
    }
    if (parts.size() > 2) {
      SLIPWAY_ASSIGN_OR_RETURN(options.reduction_factor, number(2, 2, 100));
    }
    return tune::make_asha_pruner(options);
  }
  return invalid_argument("unknown pruner '" + pruner +
                          "'; expected asha[:MIN_RESOURCE[:REDUCTION_FACTOR]], median[:WARMUP_STEPS] or none");
}

// Without objectives (`objectives_chosen` false) the task's default is still to come.
Status check_definition(const StudyDefinition& definition, bool objectives_chosen = true) {
  SLIPWAY_RETURN_IF_ERROR(check_train_spec(definition.spec));
  if (!definition.spec.register_as.empty()) {
    return invalid_argument("a study's trials are not registered; register the best with --register");
  }
  if (!definition.spec.resume_run.empty() || !definition.spec.init_model.empty()) {
    return invalid_argument("a study's trials train from scratch: --resume and --init-model do not apply");
  }
  if (definition.space.family != definition.spec.model) {
    return invalid_argument("the search space is for model '" + definition.space.family + "', the spec trains '" +
                            definition.spec.model + "'");
  }
  SLIPWAY_RETURN_IF_ERROR(tune::check_search_space(definition.space));
  if (definition.space.params.empty()) return invalid_argument("the search space has no parameters to tune");
  SLIPWAY_ASSIGN_OR_RETURN(auto fixed, parse_key_values(definition.spec.params));
  for (const auto& param : definition.space.params) {
    if (fixed.count(param.name)) {
      return invalid_argument("parameter '" + param.name + "' is both fixed (--param) and tuned (the search space)");
    }
  }
  if (!contains({"tpe", "tpe:multivariate", "random", "grid", "qmc"}, definition.sampler)) {
    return invalid_argument("unknown sampler '" + definition.sampler +
                            "'; expected tpe, tpe:multivariate, random, grid or qmc");
  }
  SLIPWAY_RETURN_IF_ERROR(make_pruner(definition.pruner).status());
  if (definition.pruner != "none" && definition.spec.model != "gbdt" && definition.spec.model != "mlp") {
    return invalid_argument("pruning judges boosting rounds or epochs: it applies to gbdt and mlp, not " +
                            definition.spec.model + " (use --pruner none)");
  }
  if ((objectives_chosen && definition.objectives.empty()) || definition.objectives.size() > 3) {
    return invalid_argument("a study has one objective, or two or three (a Pareto front); it has " +
                            std::to_string(definition.objectives.size()));
  }
  std::vector<std::string> measures;
  for (const auto& objective : definition.objectives) measures.push_back(objective.measure);
  for (const auto& constraint : definition.constraints) measures.push_back(constraint.measure);
  for (std::size_t i = 0; i < definition.objectives.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (measures[i] == measures[j]) return invalid_argument("objective '" + measures[i] + "' is given twice");
    }
  }
  SLIPWAY_RETURN_IF_ERROR(check_costs_given(definition.objectives, definition.constraints, definition.costs));
  for (const auto& measure : measures) {
    SLIPWAY_RETURN_IF_ERROR(measure_metric(measure).status());
    if (measure.find('@') != std::string::npos && definition.spec.slice.empty()) {
      return invalid_argument("'" + measure + "' is measured per slice: name the slice column (--slice COLUMN)");
    }
  }
  if (definition.trials < 1 || definition.trials > kMaxTrials) {
    return invalid_argument("--trials must be between 1 and " + std::to_string(kMaxTrials));
  }
  return {};
}

// train_mb is process-wide: one worker per process.
Status check_workers_for(const StudyDefinition& definition, int parallel) {
  if (parallel > 1 && names_measure(definition, kPeakTrainingMemory)) {
    return invalid_argument(
        "train_mb is the process's peak memory while a trial trains: measure it with one worker per process "
        "(--parallel 1; several processes may work one study)");
  }
  return {};
}

Status check_request(const StudyRequest& request) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.study));
  if (request.parallel < 1 || request.parallel > kMaxParallel) {
    return invalid_argument("--parallel must be between 1 and " + std::to_string(kMaxParallel));
  }
  if (request.budget_seconds && !(*request.budget_seconds > 0 && *request.budget_seconds <= kLongestBudgetSeconds)) {
    return invalid_argument("--budget must be a positive time of at most 30 days, such as 90s, 20m or 2h");
  }
  if (!request.register_as.empty()) SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.register_as));
  if (!request.resume) SLIPWAY_RETURN_IF_ERROR(check_workers_for(request.definition, request.parallel));
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sampling.

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t number) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (number + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

tune::TrialState tune_state(const std::string& state) {
  if (state == "complete") return tune::TrialState::kComplete;
  if (state == "pruned") return tune::TrialState::kPruned;
  if (state == "failed") return tune::TrialState::kFailed;
  return tune::TrialState::kRunning;
}

// The trials as a sampler sees them: one value each, to minimize. One objective: its value (an
// infeasible trial gets the worst feasible value, so it joins TPE's "bad" group). Several: the
// non-domination rank, infeasible trials one rank behind the last. TPE's constant liar: a
// running trial counts as complete with the worst value, so parallel workers spread out.
std::vector<tune::Trial> sampler_trials(const StudyDefinition& definition, const std::vector<StudyTrialView>& warm,
                                        const std::vector<StudyTrialView>& views, bool constant_liar) {
  std::vector<const StudyTrialView*> all;
  all.reserve(warm.size() + views.size());
  for (const auto& view : warm) all.push_back(&view);
  for (const auto& view : views) all.push_back(&view);
  std::vector<double> value(all.size(), std::numeric_limits<double>::quiet_NaN());
  std::vector<std::size_t> scored;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (usable(*all[i])) scored.push_back(i);
  }
  double worst = std::numeric_limits<double>::quiet_NaN();
  if (definition.objectives.size() == 1) {
    const double sign = definition.objectives[0].maximize ? -1.0 : 1.0;
    for (std::size_t i : scored) {
      value[i] = sign * all[i]->objective_values[0];
      if (!(value[i] <= worst)) worst = std::isnan(worst) ? value[i] : std::max(worst, value[i]);
    }
  } else {
    std::vector<std::vector<double>> points;
    points.reserve(scored.size());
    for (std::size_t i : scored) points.push_back(all[i]->objective_values);
    std::vector<int> ranks = domination_ranks(points, definition.objectives);
    for (std::size_t k = 0; k < scored.size(); ++k) {
      value[scored[k]] = ranks[k];
      worst = std::isnan(worst) ? ranks[k] : std::max(worst, static_cast<double>(ranks[k]));
    }
    if (!std::isnan(worst)) worst += 1;
  }
  std::vector<tune::Trial> trials;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& source = all[i]->trial;
    tune::Trial trial;
    trial.number = static_cast<int>(i);
    trial.params = source.params;
    trial.state = tune_state(source.state);
    for (const auto& [step, step_value] : source.intermediate) trial.intermediate[static_cast<int>(step)] = step_value;
    if (trial.state == tune::TrialState::kComplete) {
      if (!std::isnan(value[i])) {
        trial.value = value[i];
      } else if (!std::isnan(worst) && !all[i]->objective_values.empty()) {
        trial.value = worst;  // infeasible
      } else {
        trial.state = tune::TrialState::kFailed;
      }
    } else if (trial.state == tune::TrialState::kRunning && constant_liar && !std::isnan(worst)) {
      trial.state = tune::TrialState::kComplete;
      trial.value = worst;
    }
    trials.push_back(std::move(trial));
  }
  return trials;
}

std::unique_ptr<tune::Sampler> make_sampler(const StudyDefinition& definition, std::uint64_t seed,
                                            const std::vector<tune::ParamValues>& grid) {
  if (definition.sampler == "random") return tune::make_random_sampler(seed);
  if (definition.sampler == "qmc") return tune::make_qmc_sampler({.scramble = true, .seed = definition.spec.seed});
  if (definition.sampler == "grid") return tune::make_grid_sampler(grid, seed);
  // Pruned trials' intermediate values are the trainer's validation loss: lower is better.
  return tune::make_tpe_sampler({.seed = seed,
                                 .intermediate_direction = tune::Direction::kMinimize,
                                 .multivariate = definition.sampler == "tpe:multivariate"});
}

// What the next trial runs, or nothing when the study has enough: first an interrupted trial
// not yet run again (each once), then the sampler's choice.
Result<std::optional<registry::TrialClaim>> choose_trial(const StudyDefinition& definition,
                                                         const std::vector<StudyTrialView>& warm,
                                                         const std::vector<tune::ParamValues>& grid,
                                                         const std::vector<registry::StudyTrial>& stored) {
  int counted = 0;
  for (const auto& trial : stored) counted += interrupted(trial) ? 0 : 1;
  for (const auto& trial : stored) {
    if (!interrupted(trial) || trial.retry_of >= 0) continue;
    bool retried = std::any_of(stored.begin(), stored.end(),
                               [&](const registry::StudyTrial& other) { return other.retry_of == trial.number; });
    if (!retried) return std::optional<registry::TrialClaim>(registry::TrialClaim{trial.params, trial.number});
  }
  if (counted >= definition.trials) return std::optional<registry::TrialClaim>();
  // A grid is covered once every point was visited by a trial that counted.
  if (definition.sampler == "grid" && static_cast<std::size_t>(counted) >= grid.size()) {
    return std::optional<registry::TrialClaim>();
  }
  std::vector<StudyTrialView> views;
  views.reserve(stored.size());
  for (const auto& trial : stored) views.push_back(view_of(definition, trial));
  auto trials = sampler_trials(definition, warm, views, definition.sampler.starts_with("tpe"));
  auto sampler = make_sampler(definition, mix_seed(definition.spec.seed, stored.size()), grid);
  registry::TrialClaim claim;
  claim.params = sampler->sample(definition.space, trials, tune::Direction::kMinimize);
  return std::optional<registry::TrialClaim>(std::move(claim));
}

// ---------------------------------------------------------------------------------------------
// Running trials.

// What the workers share.
struct StudyRun {
  std::string study;
  StudyDefinition definition;
  std::vector<StudyTrialView> warm;  // the --from-study trials
  std::vector<tune::ParamValues> grid;
  std::string home;
  int threads_per_trial = 1;
  bool measure_latency = false;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  const StudyCallbacks* callbacks = nullptr;

  std::mutex mutex;  // guards what follows and serializes the callbacks
  Status abort;      // set once: the study stops with it
  int trials_run = 0;
  int failures_before_any_success = 0;
  bool any_complete = false;
  std::atomic<bool> stop{false};                                 // no new trial starts
  std::vector<std::unique_ptr<std::atomic<bool>>> trial_cancel;  // per worker: stop its trial
  std::vector<std::string> stop_reason;                          // per worker: why, when set
};

// The definition's pruner was checked when the study opened.
std::unique_ptr<tune::Pruner> checked_pruner(const std::string& pruner) {
  auto made = make_pruner(pruner);
  return made.ok() ? std::move(*made) : nullptr;
}

// The trainer's validation metric per round (always to minimize), judged by the pruner against
// the study's other trials, re-read from the store at most once a second.
class PruningMonitor {
 public:
  PruningMonitor(registry::Registry& registry, const StudyRun& run, registry::StudyTrial& trial)
      : registry_(registry), run_(run), trial_(trial), pruner_(checked_pruner(run.definition.pruner)) {}

  // True when the trial should stop: never at its last round (`total_rounds`), whose work is
  // done; its value there still counts for the other trials.
  bool on_round(const train::RoundMetrics& round, int total_rounds) {
    if (!std::isfinite(round.validation)) return false;
    trial_.intermediate[round.round + 1] = round.validation;
    if (!pruner_) return false;
    auto now = std::chrono::steady_clock::now();
    if (now - refreshed_ > std::chrono::seconds(1)) {
      refresh_others();
      refreshed_ = now;
    }
    tune::Trial mine;
    mine.number = static_cast<int>(trial_.number);
    for (const auto& [step, value] : trial_.intermediate) mine.intermediate[static_cast<int>(step)] = value;
    for (const auto& [step, value] : trial_.rung_values) mine.rung_values[static_cast<int>(step)] = value;
    const std::size_t rungs_before = mine.rung_values.size();
    bool prune = pruner_->should_prune(mine, others_, tune::Direction::kMinimize);
    if (mine.rung_values.size() != rungs_before) {
      for (const auto& [step, value] : mine.rung_values) trial_.rung_values[step] = value;
      // Other workers judge their trials by this one's rungs.
      if (auto status = registry_.studies().record_progress(run_.study, trial_); !status.ok()) {
        log_warn("trial " + std::to_string(trial_.number) + ": " + status.message());
      }
    }
    prune = prune && round.round + 1 < total_rounds;
    if (prune) pruned_at_ = round.round + 1;
    return prune;
  }
  int pruned_at() const { return pruned_at_; }

 private:
  void refresh_others() {
    auto stored = registry_.studies().trials(run_.study);
    if (!stored.ok()) return;  // judge by what was read last
    others_.clear();
    for (const auto& trial : *stored) {
      if (trial.number == trial_.number) continue;
      tune::Trial other;
      other.number = static_cast<int>(trial.number);
      other.state = tune_state(trial.state);
      for (const auto& [step, value] : trial.intermediate) other.intermediate[static_cast<int>(step)] = value;
      for (const auto& [step, value] : trial.rung_values) other.rung_values[static_cast<int>(step)] = value;
      if (other.state == tune::TrialState::kComplete && !other.intermediate.empty()) {
        other.value = other.intermediate.rbegin()->second;
      }
      others_.push_back(std::move(other));
    }
  }

  registry::Registry& registry_;
  const StudyRun& run_;
  registry::StudyTrial& trial_;
  std::unique_ptr<tune::Pruner> pruner_;
  std::vector<tune::Trial> others_;
  std::chrono::steady_clock::time_point refreshed_{};
  int pruned_at_ = 0;
};

TrainSpec trial_spec(const StudyRun& run, const registry::StudyTrial& trial) {
  TrainSpec spec = run.definition.spec;
  for (const auto& [name, value] : trial.params) spec.params.push_back(name + "=" + value);
  if (run.definition.pruner != "none") {
    // The pruner judges the validation metric per round (gbdt) or epoch (mlp), which the trainers
    // compute with early stopping on; with the most patience allowed it only holds the validation
    // rows out (and keeps the best round's trees, or the best epoch's weights).
    bool set = std::any_of(spec.params.begin(), spec.params.end(),
                           [](const std::string& pair) { return pair.starts_with("early_stopping_rounds="); });
    if (!set) spec.params.emplace_back("early_stopping_rounds=100000");
  }
  if (spec.experiment == "default") spec.experiment = run.study;
  spec.threads = run.threads_per_trial;
  spec.bundle_out.clear();
  spec.run_id.clear();
  return spec;
}

// Trains one trial and records how it ended. An error return stops the study.
// `claim_ms`: how long claiming it took (reading the trials, sampling, recording), the study's
// own overhead per trial.
Status run_trial(registry::Registry& registry, StudyRun& run, registry::StudyTrial trial, std::size_t worker,
                 double claim_ms) {
  std::atomic<bool>& cancel = *run.trial_cancel[worker];
  PruningMonitor monitor(registry, run, trial);
  TrainCallbacks callbacks;
  callbacks.cancel = &cancel;
  callbacks.on_run_started = [&](const std::string& run_id) {
    trial.run_id = run_id;
    Status tagged = registry.runs().set_tags(
        run_id, {{"slipway.study", run.study}, {"slipway.trial", std::to_string(trial.number)}});
    Status linked = registry.studies().set_trial_run(run.study, trial.number, run_id);
    if (!tagged.ok() || !linked.ok()) log_warn("run " + run_id + ": " + (tagged.ok() ? linked : tagged).message());
  };
  callbacks.on_round = [&](const train::RoundMetrics& round, int total_rounds) {
    if (monitor.on_round(round, total_rounds)) cancel = true;
  };
  const TrainSpec spec = trial_spec(run, trial);
  const bool measure_memory = names_measure(run.definition, kPeakTrainingMemory);
  const bool memory_reset = measure_memory && reset_peak_memory();
  auto outcome = run_training(registry, spec, callbacks);
  // Read before the measures below score and time the bundle: the peak of training alone.
  const std::optional<double> training_peak = memory_reset ? peak_memory_mib() : std::nullopt;

  Status stops_study;
  if (outcome.ok()) {
    trial.measures.clear();
    Status measured = measure_trial(registry, run.definition, run.measure_latency, spec, *outcome, trial.measures);
    if (!measured.ok()) trial.message = measured.message();
    trial.measures["train_s"] = outcome->train_seconds;
    trial.measures["claim_ms"] = claim_ms;
    if (measure_memory) {
      // A run reused from the cache did not train here: its peak says nothing.
      const bool reused = !outcome->cached_from.empty();
      auto peak = reused ? std::nullopt : training_peak;
      trial.measures[std::string(kPeakTrainingMemory)] = peak.value_or(std::numeric_limits<double>::quiet_NaN());
      if (!peak) {
        trial.message = reused ? "train_mb not measured: the run was reused from the cache (use --no-cache)"
                               : "train_mb not measured: this system cannot reset the peak resident memory";
      }
    }
    trial.state = "complete";
    if (measured.code() == StatusCode::kInvalidArgument) {
      stops_study = measured;
      trial.state = "failed";
    }
    for (const auto& objective : run.definition.objectives) {
      if (trial.state == "failed") break;
      auto found = trial.measures.find(objective.measure);
      if (found == trial.measures.end()) {
        std::vector<std::string> names;
        for (const auto& [name, value] : trial.measures) names.push_back(name);
        stops_study = invalid_argument("objective '" + objective.measure + "' is not measured for this task (" +
                                       join(names, ", ") + " are)");
        trial.state = "failed";
        trial.message = stops_study.message();
      } else if (std::isnan(found->second)) {
        trial.state = "failed";
        trial.message =
            "objective " + objective.measure + " is NaN" + (trial.message.empty() ? "" : " (" + trial.message + ")");
      }
    }
  } else if (monitor.pruned_at() > 0) {
    trial.state = "pruned";
    trial.message = std::string(run.definition.spec.model == "mlp" ? "pruned at epoch " : "pruned at round ") +
                    std::to_string(monitor.pruned_at());
  } else if (cancel) {
    trial.state = "failed";
    std::lock_guard lock(run.mutex);
    trial.message = std::string(kInterrupted) + ": " + run.stop_reason[worker];
  } else if (outcome.status().code() == StatusCode::kIo) {
    // The disk or the store failed, not the parameters: the study stops (the next trial would fail
    // too) and the trial runs again once on --resume.
    trial.state = "failed";
    trial.message = std::string(kInterrupted) + ": " + outcome.status().message();
    stops_study = outcome.status();
  } else {
    trial.state = "failed";
    trial.message = outcome.status().message();
  }
  // The record must be written even when the study is stopping: a trial left running would be
  // taken for an interrupted one and run again.
  Status finished = registry.studies().finish_trial(run.study, trial);

  std::lock_guard lock(run.mutex);
  ++run.trials_run;
  if (trial.state == "complete") run.any_complete = true;
  if (trial.state == "failed" && !interrupted(trial) && !run.any_complete &&
      ++run.failures_before_any_success >= kFailuresBeforeGivingUp && stops_study.ok()) {
    stops_study = failed_precondition("the study's first " + std::to_string(kFailuresBeforeGivingUp) +
                                      " trials failed; the last: " + trial.message);
  }
  if (!finished.ok()) stops_study = finished;
  if (run.callbacks->on_trial_finished) {
    auto stored = registry.studies().trials(run.study);
    if (stored.ok()) {
      StudyResult progress = study_of(run.study, run.definition, std::move(*stored));
      progress.trials_run = run.trials_run;
      run.callbacks->on_trial_finished(view_of(run.definition, trial), progress);
    }
  }
  return stops_study;
}

void run_worker(StudyRun& run, std::size_t worker) {
  auto fail = [&](Status status) {
    std::lock_guard lock(run.mutex);
    if (run.abort.ok()) run.abort = std::move(status);
    run.stop = true;
  };
  auto opened = registry::Registry::open(run.home, false);
  if (!opened.ok()) return fail(opened.status());
  registry::Registry& registry = **opened;
  while (!run.stop) {
    const auto claim_started = std::chrono::steady_clock::now();
    // A worker killed since (kill -9, here or in another process) left its trial running: fail it
    // now, so that this claim runs it again rather than a study that waits for it forever.
    auto abandoned = registry.studies().fail_abandoned_trials(run.study);
    if (!abandoned.ok()) return fail(abandoned.status());
    if (!abandoned->empty()) {
      log_info("study " + run.study + ": " + std::to_string(abandoned->size()) +
               " trial(s) whose process is gone marked failed; each runs again once");
    }
    auto claimed = registry.studies().claim_trial(run.study, [&](const std::vector<registry::StudyTrial>& stored) {
      return choose_trial(run.definition, run.warm, run.grid, stored);
    });
    if (!claimed.ok()) return fail(claimed.status());
    if (!*claimed) return;
    const double claim_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - claim_started).count();
    *run.trial_cancel[worker] = false;
    {
      std::lock_guard lock(run.mutex);
      if (run.stop) *run.trial_cancel[worker] = true;  // stopped between the claim and now
      if (run.callbacks->on_trial_started) run.callbacks->on_trial_started(**claimed);
    }
    if (auto status = run_trial(registry, run, std::move(**claimed), worker, claim_ms); !status.ok())
      return fail(status);
  }
}

Result<StudyDefinition> stored_definition(registry::Registry& registry, const std::string& study) {
  SLIPWAY_ASSIGN_OR_RETURN(auto record, registry.studies().get(study));
  if (!record) return not_found("no study named '" + study + "' (slipway studies lists them)");
  return parse_definition(record->definition, study);
}

// The metric the task is watched in (eval::watched_metric).
Result<StudyObjective> default_objective(const TrainSpec& spec) {
  SLIPWAY_ASSIGN_OR_RETURN(model::Task task, inferred_task(spec));
  return parse_study_objective(std::string(eval::watched_metric(task)));
}

// Creates the study, or checks the stored one against `definition`; returns the definition to run.
Result<StudyDefinition> open_study(registry::Registry& registry, const StudyRequest& request) {
  SLIPWAY_ASSIGN_OR_RETURN(auto record, registry.studies().get(request.study));
  if (request.resume) {
    if (!record) return not_found("no study named '" + request.study + "' to resume (slipway studies lists them)");
    SLIPWAY_ASSIGN_OR_RETURN(StudyDefinition definition, parse_definition(record->definition, request.study));
    if (request.trials_given) definition.trials = request.definition.trials;
    definition.spec.use_cache = request.definition.spec.use_cache;  // how to run, not what
    SLIPWAY_RETURN_IF_ERROR(check_definition(definition));
    return definition;
  }
  StudyDefinition definition = request.definition;
  if (definition.objectives.empty()) {
    SLIPWAY_RETURN_IF_ERROR(check_train_spec(definition.spec));
    SLIPWAY_ASSIGN_OR_RETURN(StudyObjective objective, default_objective(definition.spec));
    definition.objectives.push_back(std::move(objective));
  }
  SLIPWAY_RETURN_IF_ERROR(check_definition(definition));
  if (definition.costs) {
    SLIPWAY_ASSIGN_OR_RETURN(model::Task task, inferred_task(definition.spec));
    SLIPWAY_RETURN_IF_ERROR(check_costs_fit(true, task, definition.spec.target));
  }
  if (!definition.from_study.empty()) {
    if (definition.from_study == request.study) return invalid_argument("--from-study names the study itself");
    SLIPWAY_RETURN_IF_ERROR(stored_definition(registry, definition.from_study).status());
  }
  const std::string sha = definition_sha256(definition);
  auto check_same = [&](const registry::StudyRecord& stored) -> Status {
    if (stored.definition_sha256 == sha) return {};
    return already_exists("study '" + request.study +
                          "' exists with another definition (space, objectives, sampler, pruner or training spec); "
                          "continue it with --resume, pick another name, or start it over with --force");
  };
  if (record && !request.force) {
    SLIPWAY_RETURN_IF_ERROR(check_same(*record));
    return definition;
  }
  registry::StudyRecord created;
  created.name = request.study;
  created.definition = definition_yaml(definition, /*with_trials=*/true);
  created.definition_sha256 = sha;
  Status made = registry.studies().create(created, request.force);
  if (made.code() == StatusCode::kAlreadyExists) {
    // Another process created it since we looked (two workers started at once): join it when
    // its definition is this one.
    SLIPWAY_ASSIGN_OR_RETURN(record, registry.studies().get(request.study));
    if (!record) return made;
    SLIPWAY_RETURN_IF_ERROR(check_same(*record));
    return definition;
  }
  SLIPWAY_RETURN_IF_ERROR(made);
  return definition;
}

// The earlier study's complete trials, measured the way this study measures them.
Result<std::vector<StudyTrialView>> warm_start_trials(registry::Registry& registry, const StudyDefinition& definition) {
  std::vector<StudyTrialView> warm;
  if (definition.from_study.empty()) return warm;
  SLIPWAY_ASSIGN_OR_RETURN(auto trials, registry.studies().trials(definition.from_study));
  for (auto& trial : trials) {
    if (trial.state != "complete") continue;
    // Only parameters of this space carry over; a trial outside its ranges still informs TPE.
    std::map<std::string, std::string> kept;
    for (const auto& param : definition.space.params) {
      auto found = trial.params.find(param.name);
      if (found != trial.params.end()) kept.insert(*found);
    }
    trial.params = std::move(kept);
    StudyTrialView view = view_of(definition, std::move(trial));
    if (usable(view)) warm.push_back(std::move(view));
  }
  return warm;
}

}  // namespace

bool interrupted(const registry::StudyTrial& trial) {
  return trial.state == "failed" && std::string_view(trial.message).starts_with(kInterrupted);
}

Result<model::Task> inferred_task(const TrainSpec& spec) {
  SLIPWAY_ASSIGN_OR_RETURN(auto params, parse_key_values(spec.params));
  std::string objective = params.count("objective") ? params.at("objective") : "auto";
  if (spec.model == "logistic" || objective == "binary:logistic") return model::Task::kBinaryClassification;
  if (objective == "multi:softmax") return model::Task::kMulticlassClassification;
  if (objective != "auto" || spec.model == "linear") return model::Task::kRegression;
  SLIPWAY_ASSIGN_OR_RETURN(data::Table table, read_table(spec.data));
  SLIPWAY_ASSIGN_OR_RETURN(std::size_t index, table.column_index(spec.target));
  const data::Column& target = table.column(index);
  std::set<std::string> values;
  for (std::size_t row = 0; row < target.size() && values.size() <= 2; ++row) {
    if (!target.is_missing(row)) values.insert(target.text_at(row));
  }
  if (values.size() == 2) return model::Task::kBinaryClassification;
  if (values.size() > 2 && target.type != data::ColumnType::kNumeric) return model::Task::kMulticlassClassification;
  return model::Task::kRegression;
}

Status check_study_request(const StudyRequest& request) {
  SLIPWAY_RETURN_IF_ERROR(check_request(request));
  if (request.resume) return {};
  return check_definition(request.definition, /*objectives_chosen=*/false);
}

Result<StudyResult> run_study(registry::Registry& registry, const StudyRequest& request,
                              const StudyCallbacks& callbacks) {
  SLIPWAY_RETURN_IF_ERROR(check_request(request));
  act_as(registry, request.caller);
  SLIPWAY_ASSIGN_OR_RETURN(StudyDefinition definition, open_study(registry, request));
  SLIPWAY_RETURN_IF_ERROR(check_workers_for(definition, request.parallel));  // a resumed study's too

  StudyRun run;
  run.study = request.study;
  run.definition = definition;
  run.home = registry.home();
  run.callbacks = &callbacks;
  run.measure_latency = request.measure_latency;
  SLIPWAY_ASSIGN_OR_RETURN(run.warm, warm_start_trials(registry, definition));
  if (definition.sampler == "grid") {
    SLIPWAY_ASSIGN_OR_RETURN(run.grid, tune::grid_points(definition.space, kGridFloatPoints));
  }
  const int threads = definition.spec.threads > 0 ? definition.spec.threads : default_thread_count();
  run.threads_per_trial = std::max(1, threads / request.parallel);
  const auto started = std::chrono::steady_clock::now();
  if (request.budget_seconds) {
    run.deadline = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(*request.budget_seconds));
  }
  std::string stopped = "trials";
  for (int worker = 0; worker < request.parallel; ++worker) {
    run.trial_cancel.push_back(std::make_unique<std::atomic<bool>>(false));
    run.stop_reason.emplace_back();
  }
  std::atomic<int> running{request.parallel};
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(request.parallel));
  for (int worker = 0; worker < request.parallel; ++worker) {
    workers.emplace_back([&run, &running, worker] {
      run_worker(run, static_cast<std::size_t>(worker));
      --running;
    });
  }
  // Watches the budget and the caller's cancel; stops every running trial when either ends.
  while (running > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string reason;
    if (callbacks.cancel != nullptr && callbacks.cancel->load()) reason = "cancelled";
    if (reason.empty() && run.deadline && std::chrono::steady_clock::now() >= *run.deadline) reason = "budget";
    if (reason.empty() || run.stop) continue;
    std::lock_guard lock(run.mutex);
    stopped = reason;
    run.stop = true;
    for (std::size_t worker = 0; worker < run.trial_cancel.size(); ++worker) {
      run.stop_reason[worker] = reason == "budget" ? "the study's time budget ended" : "the study was cancelled";
      *run.trial_cancel[worker] = true;
    }
  }
  for (auto& worker : workers) worker.join();
  if (!run.abort.ok()) return run.abort;

  SLIPWAY_ASSIGN_OR_RETURN(StudyResult result, read_study(registry, request.study));
  result.trials_run = run.trials_run;
  result.stopped = stopped;
  if (!request.register_as.empty()) {
    if (definition.objectives.size() != 1) {
      return invalid_argument("--register takes a study with one objective; a Pareto front has no single best");
    }
    if (result.best.empty())
      return failed_precondition("no trial completed within the constraints: nothing to register");
    const StudyTrialView& best = result.trials[static_cast<std::size_t>(result.best.front())];
    SLIPWAY_ASSIGN_OR_RETURN(auto best_run, registry.runs().get(best.trial.run_id));
    SLIPWAY_ASSIGN_OR_RETURN(result.registered, registry.models().register_version(
                                                    request.register_as, best_run.bundle_sha256, best.trial.run_id));
  }
  return result;
}

Result<std::vector<registry::StudySummary>> list_studies(registry::Registry& registry) {
  return registry.studies().list();
}

Result<StudyResult> read_study(registry::Registry& registry, const std::string& study) {
  SLIPWAY_ASSIGN_OR_RETURN(StudyDefinition definition, stored_definition(registry, study));
  SLIPWAY_ASSIGN_OR_RETURN(auto trials, registry.studies().trials(study));
  return study_of(study, definition, std::move(trials));
}

Result<std::string> narrowed_study_space(registry::Registry& registry, const std::string& study, double top_fraction) {
  SLIPWAY_ASSIGN_OR_RETURN(StudyResult result, read_study(registry, study));
  std::vector<tune::Trial> trials;
  const StudyObjective& objective = result.definition.objectives.front();
  for (const auto& view : result.trials) {
    if (!usable(view)) continue;
    tune::Trial trial;
    trial.number = static_cast<int>(view.trial.number);
    trial.params = view.trial.params;
    trial.state = tune::TrialState::kComplete;
    trial.value = view.objective_values.front();
    trials.push_back(std::move(trial));
  }
  SLIPWAY_ASSIGN_OR_RETURN(
      tune::SearchSpace narrowed,
      tune::narrow_search_space(result.definition.space, trials,
                                objective.maximize ? tune::Direction::kMaximize : tune::Direction::kMinimize,
                                top_fraction));
  return tune::search_space_yaml(narrowed);
}

}  // namespace slipway::pipeline
