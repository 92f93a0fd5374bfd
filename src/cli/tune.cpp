// slipway tune, studies, study show, study narrow: flags into a pipeline::StudyRequest, and
// studies as tables.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <iostream>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/pipeline/tuning.h"

namespace slipway::cli {
namespace {

// The first Ctrl-C (or SIGTERM) asks the study to stop: running trials end as interrupted (a
// --resume runs them again) and the study is recorded. A second one ends the process at once.
std::atomic<bool> stop_requested{false};

void on_stop_signal(int signal) {
  if (stop_requested.exchange(true)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

// Numbers to 4 significant digits for reading (--json and `study show --json` keep them exact).
std::string params_text(const std::map<std::string, std::string>& params) {
  std::string text;
  for (const auto& [name, value] : params) {
    char* end = nullptr;
    double number = std::strtod(value.c_str(), &end);
    bool fractional = !value.empty() && *end == '\0' && value.find_first_of(".eE") != std::string::npos;
    text += (text.empty() ? "" : " ") + name + "=" + (fractional ? fmt::format("{:.4g}", number) : value);
  }
  return text;
}

std::string values_text(const pipeline::StudyTrialView& view) {
  if (view.objective_values.empty()) return "-";
  std::string text;
  for (double value : view.objective_values) text += (text.empty() ? "" : ", ") + format_metric(value);
  if (!view.feasible) text += " (infeasible)";
  return text;
}

std::string objectives_text(const pipeline::StudyDefinition& definition) {
  std::string text;
  for (const auto& objective : definition.objectives) {
    text += (text.empty() ? "" : ", ") + objective.measure + (objective.maximize ? " (max)" : " (min)");
  }
  return text;
}

void print_trials(std::ostream& out, const pipeline::StudyResult& study,
                  const std::vector<const pipeline::StudyTrialView*>& views) {
  // What the constraints bound, beside the objectives' values.
  std::vector<std::string> constraint_measures;
  for (const auto& constraint : study.definition.constraints) {
    bool listed = std::find(constraint_measures.begin(), constraint_measures.end(), constraint.measure) !=
                  constraint_measures.end();
    if (!listed) constraint_measures.push_back(constraint.measure);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto* view : views) {
    const auto& trial = view->trial;
    bool best = std::find(study.best.begin(), study.best.end(), trial.number) != study.best.end();
    std::string seconds = trial.finished_ms > 0
                              ? fmt::format("{:.1f}", static_cast<double>(trial.finished_ms - trial.started_ms) / 1e3)
                              : "-";
    std::vector<std::string> row = {std::to_string(trial.number) + (best ? " *" : ""), trial.state, values_text(*view)};
    for (const auto& measure : constraint_measures) {
      auto found = trial.measures.find(measure);
      row.push_back(found == trial.measures.end() ? "-" : format_metric(found->second));
    }
    row.insert(row.end(), {seconds, params_text(trial.params), trial.message});
    rows.push_back(std::move(row));
  }
  std::vector<std::string> headers = {"trial", "state", "value"};
  headers.insert(headers.end(), constraint_measures.begin(), constraint_measures.end());
  headers.insert(headers.end(), {"seconds", "params", "note"});
  print_table(out, headers, rows);
}

void print_study(std::ostream& out, const pipeline::StudyResult& study, std::size_t most_trials) {
  const auto& definition = study.definition;
  std::map<std::string, int> states;
  for (const auto& view : study.trials) ++states[view.trial.state];
  std::string counts;
  for (const auto& [state, count] : states)
    counts += (counts.empty() ? "" : ", ") + std::to_string(count) + " " + state;
  out << "study      " << study.study << " (" << definition.spec.model << ", " << definition.sampler << " sampler, "
      << (definition.pruner == "none" ? std::string("no") : definition.pruner) << " pruner)\n";
  out << "objective  " << objectives_text(definition) << "\n";
  if (!definition.constraints.empty()) {
    std::string constraints;
    for (const auto& constraint : definition.constraints) {
      constraints += (constraints.empty() ? "" : ", ") + constraint.measure + (constraint.at_most ? " <= " : " >= ") +
                     fmt::format("{:g}", constraint.limit);
    }
    out << "constraint " << constraints << "\n";
  }
  out << "trials     " << study.trials.size() << " of " << definition.trials << (counts.empty() ? "" : ": " + counts);
  if (!study.stopped.empty()) out << "; " << study.trials_run << " run now, stopped by " << study.stopped;
  out << "\n";
  if (study.best.empty()) {
    out << "best       none yet (no feasible complete trial)\n";
  } else if (definition.objectives.size() == 1) {
    const auto& best = study.trials[static_cast<std::size_t>(study.best.front())];
    out << "best       trial " << best.trial.number << ": " << definition.objectives.front().measure << " "
        << format_metric(best.objective_values.front()) << "  " << params_text(best.trial.params) << "\n";
    out << "           run " << best.trial.run_id << "\n";
  } else {
    out << "front      " << study.best.size() << " trials (marked *) no other trial beats in every objective\n";
  }
  if (study.registered) {
    out << "registered " << study.registered->model << " version " << study.registered->version << "\n";
  }
  if (!study.importance.empty()) {
    std::vector<std::pair<std::string, double>> ranked(study.importance.begin(), study.importance.end());
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    out << "importance";
    for (const auto& [name, share] : ranked) out << " " << name << " " << fmt::format("{:.0f}%", share * 100);
    out << "\n";
  }
  // The best first (complete and feasible by the first objective), then the rest by number.
  std::vector<const pipeline::StudyTrialView*> ordered;
  for (const auto& view : study.trials) ordered.push_back(&view);
  const bool maximize = definition.objectives.front().maximize;
  auto rank = [&](const pipeline::StudyTrialView* view) {
    if (view->objective_values.empty() || std::isnan(view->objective_values.front()) || !view->feasible) {
      return std::numeric_limits<double>::infinity();
    }
    return maximize ? -view->objective_values.front() : view->objective_values.front();
  };
  std::stable_sort(ordered.begin(), ordered.end(), [&](const auto* a, const auto* b) { return rank(a) < rank(b); });
  if (ordered.size() > most_trials) ordered.resize(most_trials);
  if (!ordered.empty()) {
    out << "\n";
    print_trials(out, study, ordered);
    if (study.trials.size() > ordered.size()) {
      out << "(the best " << ordered.size() << " of " << study.trials.size() << " trials; slipway study show "
          << study.study << " lists them all)\n";
    }
  }
}

struct StudyOutput : CommandResult {
  pipeline::StudyResult study;
  std::size_t most_trials = 10;

  void write_json(JsonWriter& json) const override { pipeline::write_study_json(json, study); }
  void write_text(std::ostream& out) const override { print_study(out, study, most_trials); }
};

Result<pipeline::StudyRequest> tune_request(const TuneOptions& flags, const std::vector<std::string>& given_flags) {
  auto given = [&](const char* name) {
    return std::find(given_flags.begin(), given_flags.end(), name) != given_flags.end();
  };
  pipeline::StudyRequest request;
  request.study = flags.study;
  request.resume = !flags.resume.empty();
  if (request.resume) {
    if (given("study") && flags.study != flags.resume) {
      return invalid_argument("--resume names the study to continue; --study is not needed");
    }
    request.study = flags.resume;
    for (const char* flag : {"data", "target", "model", "space", "sampler", "pruner", "objective", "constraint",
                             "valid", "split", "param", "from-study", "spec", "force"}) {
      if (given(flag)) {
        return invalid_argument(std::string("--resume continues the stored study as it was defined; --") + flag +
                                " does not apply (start a new study, or --force one over)");
      }
    }
  }
  if (request.study.empty()) return invalid_argument("name the study: --study NAME (or --resume NAME)");
  request.trials_given = given("trials");
  request.force = flags.force;
  request.parallel = flags.parallel;
  request.register_as = flags.register_as;
  if (given("register") && flags.register_as.empty()) return invalid_argument("--register needs a model name");
  if (given("budget")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto budget, parse_duration("--budget", flags.budget, /*longest_days=*/30));
    if (budget.count() <= 0) return invalid_argument("--budget must be longer than 0, such as 90s, 20m or 2h");
    request.budget_seconds = static_cast<double>(budget.count()) / 1000.0;
  }
  pipeline::StudyDefinition& definition = request.definition;
  definition.trials = flags.trials;
  if (request.resume) return request;

  pipeline::TrainSpec& spec = definition.spec;
  if (!flags.spec_path.empty()) SLIPWAY_RETURN_IF_ERROR(pipeline::load_spec(flags.spec_path, spec));
  if (given("data")) spec.data = flags.data;
  if (given("target")) spec.target = flags.target;
  if (given("model") || flags.spec_path.empty()) spec.model = flags.model;
  if (given("valid")) spec.test_data = flags.valid;
  if (given("split")) spec.split = flags.split;
  if (given("test-fraction")) spec.test_fraction = flags.test_fraction;
  if (given("slice")) spec.slice = flags.slice;
  if (given("seed")) spec.seed = flags.seed;
  if (given("threads")) spec.threads = flags.threads;
  if (given("weight")) spec.weight_column = flags.weight;
  if (given("experiment")) {
    SLIPWAY_RETURN_IF_ERROR(registry::validate_experiment_name(flags.experiment));
    spec.experiment = flags.experiment;
  }
  spec.params.insert(spec.params.end(), flags.params.begin(), flags.params.end());
  spec.ignore.insert(spec.ignore.end(), flags.ignore.begin(), flags.ignore.end());
  if (spec.data.empty() || spec.target.empty()) return invalid_argument("tune needs --data and --target");

  if (!flags.space.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(definition.space, tune::load_search_space(flags.space, spec.model));
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(definition.space, tune::default_search_space(spec.model));
  }
  definition.sampler = flags.sampler;
  definition.pruner = flags.pruner;
  for (const auto& text : flags.objectives) {
    SLIPWAY_ASSIGN_OR_RETURN(auto objective, pipeline::parse_study_objective(text));
    definition.objectives.push_back(std::move(objective));
  }
  for (const auto& text : flags.constraints) {
    SLIPWAY_ASSIGN_OR_RETURN(auto constraint, pipeline::parse_study_constraint(text));
    definition.constraints.push_back(std::move(constraint));
  }
  definition.from_study = flags.from_study;
  return request;
}

Result<StudyOutput> tune(const GlobalOptions& global, const TuneOptions& flags,
                         const std::vector<std::string>& given_flags) {
  SLIPWAY_ASSIGN_OR_RETURN(pipeline::StudyRequest request, tune_request(flags, given_flags));
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kCreate));
  pipeline::StudyCallbacks callbacks;
  const auto started = std::chrono::steady_clock::now();
  callbacks.on_trial_finished = [&](const pipeline::StudyTrialView& view, const pipeline::StudyResult& progress) {
    if (!flags.progress) return;
    int pruned = 0, failed = 0;
    for (const auto& trial : progress.trials) {
      pruned += trial.trial.state == "pruned" ? 1 : 0;
      failed += trial.trial.state == "failed" ? 1 : 0;
    }
    std::string best = "-";
    if (!progress.best.empty() && progress.definition.objectives.size() == 1) {
      const auto& leader = progress.trials[static_cast<std::size_t>(progress.best.front())];
      best = format_metric(leader.objective_values.front()) + " (#" + std::to_string(leader.trial.number) + ")";
    } else if (!progress.best.empty()) {
      best = std::to_string(progress.best.size()) + " on the front";
    }
    std::string left;
    if (request.budget_seconds) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      left = fmt::format("  {:.0f}s left", std::max(0.0, *request.budget_seconds - elapsed));
    }
    std::string outcome = view.trial.state == "complete" ? values_text(view) : view.trial.message;
    std::cerr << fmt::format("trial {:>3} {:<8} {:<24} best {}  pruned {} failed {}{}  {}\n", view.trial.number,
                             view.trial.state, outcome.substr(0, 60), best, pruned, failed, left,
                             params_text(view.trial.params));
  };
  // A line per trial says what each trial's log lines would: keep only warnings and errors.
  if (flags.progress) set_log_level(LogLevel::kWarn);
  stop_requested = false;
  callbacks.cancel = &stop_requested;
  auto previous_interrupt = std::signal(SIGINT, on_stop_signal);
  auto previous_terminate = std::signal(SIGTERM, on_stop_signal);
  auto result = pipeline::run_study(*store, request, callbacks);
  std::signal(SIGINT, previous_interrupt);
  std::signal(SIGTERM, previous_terminate);
  if (!result.ok()) return result.status();
  StudyOutput output;
  output.study = std::move(*result);
  return output;
}

struct StudyListOutput : CommandResult {
  std::vector<registry::StudySummary> studies;

  void write_json(JsonWriter& json) const override {
    json.begin_array();
    for (const auto& summary : studies) {
      json.begin_object().key("study").value(summary.study.name);
      json.key("created_ms").value(summary.study.created_ms).key("updated_ms").value(summary.updated_ms);
      json.key("actor").value(summary.study.actor).key("trials").begin_object();
      for (const auto& [state, count] : summary.trials_by_state) json.key(state).value(count);
      json.end_object().end_object();
    }
    json.end_array();
  }
  void write_text(std::ostream& out) const override {
    if (studies.empty()) {
      out << "no studies yet (slipway tune --study NAME ... starts one)\n";
      return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& summary : studies) {
      std::int64_t total = 0;
      std::string states;
      for (const auto& [state, count] : summary.trials_by_state) {
        total += count;
        states += (states.empty() ? "" : ", ") + std::to_string(count) + " " + state;
      }
      rows.push_back({summary.study.name, std::to_string(total), states, format_time_ms(summary.study.created_ms),
                      format_time_ms(summary.updated_ms)});
    }
    print_table(out, {"study", "trials", "states", "created", "updated"}, rows);
  }
};

Result<StudyListOutput> list_studies(const GlobalOptions& global) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  StudyListOutput output;
  SLIPWAY_ASSIGN_OR_RETURN(output.studies, store->studies().list());
  return output;
}

Result<StudyOutput> show_study(const GlobalOptions& global, const std::string& study) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  StudyOutput output;
  SLIPWAY_ASSIGN_OR_RETURN(output.study, pipeline::read_study(*store, study));
  output.most_trials = SIZE_MAX;
  return output;
}

struct NarrowOutput : CommandResult {
  std::string study, yaml, out;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("study").value(study).key("space").value(yaml);
    if (!out.empty()) json.key("out").value(out);
    json.end_object();
  }
  void write_text(std::ostream& stream) const override {
    if (out.empty()) {
      stream << yaml;
    } else {
      stream << "wrote the narrowed space of study " << study << " to " << out << "\n";
    }
  }
};

Result<NarrowOutput> narrow_study(const GlobalOptions& global, const StudyNarrowOptions& flags) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  NarrowOutput output;
  output.study = flags.study;
  output.out = flags.out;
  SLIPWAY_ASSIGN_OR_RETURN(output.yaml, pipeline::narrowed_study_space(*store, flags.study, flags.top_fraction));
  if (!flags.out.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(flags.out, output.yaml));
  return output;
}

}  // namespace

int run_tune(const GlobalOptions& global, const TuneOptions& flags, const std::vector<std::string>& given) {
  return render(global, tune(global, flags, given));
}

int run_studies(const GlobalOptions& global) { return render(global, list_studies(global)); }

int run_study_show(const GlobalOptions& global, const std::string& study) {
  return render(global, show_study(global, study));
}

int run_study_narrow(const GlobalOptions& global, const StudyNarrowOptions& flags) {
  return render(global, narrow_study(global, flags));
}

}  // namespace slipway::cli
