// slipway tune, studies, study show, study narrow: flags into a pipeline::StudyRequest, and
// studies as tables.
#include <sys/ioctl.h>
#include <unistd.h>

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

std::string html_escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A scatter of (x, y) points with axis labels as inline SVG; `line` joins `line_points` (the best
// so far) over them.
std::string svg_scatter(const std::vector<std::pair<double, double>>& points,
                        const std::vector<std::pair<double, double>>& line_points, const std::string& x_label,
                        const std::string& y_label, const std::vector<std::string>& titles) {
  constexpr double kWidth = 640, kHeight = 320, kLeft = 70, kBottom = 40, kTop = 10, kRight = 10;
  double x_low = INFINITY, x_high = -INFINITY, y_low = INFINITY, y_high = -INFINITY;
  for (const auto& [x, y] : points) {
    x_low = std::min(x_low, x), x_high = std::max(x_high, x), y_low = std::min(y_low, y), y_high = std::max(y_high, y);
  }
  if (points.empty()) return "<p>No complete trial yet.</p>\n";
  if (x_high <= x_low) x_high = x_low + 1;
  if (y_high <= y_low) y_high = y_low + std::max(1e-9, std::abs(y_low) * 1e-3);
  auto sx = [&](double x) { return kLeft + (x - x_low) / (x_high - x_low) * (kWidth - kLeft - kRight); };
  auto sy = [&](double y) { return kHeight - kBottom - (y - y_low) / (y_high - y_low) * (kHeight - kBottom - kTop); };
  std::string svg =
      fmt::format(R"(<svg width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", kWidth, kHeight, kWidth, kHeight);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)", kLeft, kTop,
                     kWidth - kLeft - kRight, kHeight - kBottom - kTop);
  for (int tick = 0; tick <= 4; ++tick) {
    double y = y_low + (y_high - y_low) * tick / 4, x = x_low + (x_high - x_low) * tick / 4;
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="end">{:.4g}</text>)", kLeft - 4,
                       sy(y) + 4, y);
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle">{:.4g}</text>)", sx(x),
                       kHeight - kBottom + 14, x);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)", (kWidth + kLeft) / 2,
                     kHeight - 6, html_escaped(x_label));
  svg += fmt::format(
      R"svg(<text x="14" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>)svg",
      kHeight / 2, kHeight / 2, html_escaped(y_label));
  if (!line_points.empty()) {
    std::string path;
    for (const auto& [x, y] : line_points)
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", sx(x), sy(y));
    svg += R"(<path d=")" + path + R"(" fill="none" stroke="#d62728" stroke-width="2"/>)";
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="#1f77b4"><title>{}</title></circle>)",
                       sx(points[i].first), sy(points[i].second), html_escaped(i < titles.size() ? titles[i] : ""));
  }
  return svg + "</svg>\n";
}

// The study as one self-contained HTML page: the optimization history (each complete trial's
// first objective and the best so far), the Pareto front for two objectives, parameter
// importance, and every trial.
std::string study_html(const pipeline::StudyResult& study) {
  const auto& definition = study.definition;
  const auto& first = definition.objectives.front();
  std::string page = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Study " + html_escaped(study.study) +
                     "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
                     "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}</style></head><body>\n";
  page += "<h1>Study " + html_escaped(study.study) + "</h1>\n<p>" + html_escaped(definition.spec.model) + ", " +
          html_escaped(definition.sampler) + " sampler, " +
          html_escaped(definition.pruner == "none" ? "no" : definition.pruner) +
          " pruner; objectives: " + html_escaped(objectives_text(definition)) + "</p>\n";
  std::vector<std::pair<double, double>> history, best_line;
  std::vector<std::string> titles;
  double best = NAN;
  for (const auto& view : study.trials) {
    if (view.objective_values.empty() || !std::isfinite(view.objective_values[0])) continue;
    double value = view.objective_values[0];
    auto number = static_cast<double>(view.trial.number);
    history.emplace_back(number, value);
    titles.push_back("trial " + std::to_string(view.trial.number) + ": " + params_text(view.trial.params));
    if (view.feasible && (std::isnan(best) || (first.maximize ? value > best : value < best))) best = value;
    if (!std::isnan(best)) best_line.emplace_back(number, best);
  }
  page += "<h2>Optimization history</h2>\n" + svg_scatter(history, best_line, "trial", first.measure, titles);
  if (definition.objectives.size() >= 2) {
    std::vector<std::pair<double, double>> all, front;
    std::vector<std::string> front_titles;
    for (const auto& view : study.trials) {
      if (view.objective_values.size() < 2) continue;
      bool on_front = std::find(study.best.begin(), study.best.end(), view.trial.number) != study.best.end();
      (on_front ? front : all).emplace_back(view.objective_values[0], view.objective_values[1]);
      if (on_front) front_titles.push_back("trial " + std::to_string(view.trial.number));
    }
    std::sort(front.begin(), front.end());
    all.insert(all.end(), front.begin(), front.end());
    page += "<h2>Pareto front</h2>\n" +
            svg_scatter(all, front, definition.objectives[0].measure, definition.objectives[1].measure, {});
  }
  if (!study.importance.empty()) {
    page += "<h2>Parameter importance</h2>\n<table><tr><th>parameter</th><th>share</th></tr>\n";
    for (const auto& [name, share] : study.importance) {
      page += fmt::format(
          "<tr><td>{}</td><td><svg width=\"200\" height=\"12\"><rect width=\"{:.0f}\" height=\"12\" "
          "fill=\"#1f77b4\"/></svg> {:.0f}%</td></tr>\n",
          html_escaped(name), share * 200, share * 100);
    }
    page += "</table>\n";
  }
  page += "<h2>Trials</h2>\n<table><tr><th>trial</th><th>state</th><th>value</th><th>params</th><th>note</th></tr>\n";
  for (const auto& view : study.trials) {
    bool marked = std::find(study.best.begin(), study.best.end(), view.trial.number) != study.best.end();
    page += "<tr><td>" + std::to_string(view.trial.number) + (marked ? " *" : "") + "</td><td>" +
            html_escaped(view.trial.state) + "</td><td>" + html_escaped(values_text(view)) + "</td><td>" +
            html_escaped(params_text(view.trial.params)) + "</td><td>" + html_escaped(view.trial.message) +
            "</td></tr>\n";
  }
  return page + "</table>\n</body></html>\n";
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
                             "costs", "valid", "split", "param", "from-study", "spec", "force"}) {
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
  definition.spec.use_cache = flags.use_cache;
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
  if (given("costs")) {
    SLIPWAY_ASSIGN_OR_RETURN(definition.costs, eval::load_cost_matrix(flags.costs));
  }
  definition.from_study = flags.from_study;
  return request;
}

// What a finished trial's progress says: its line, and the study's standing after it.
struct TrialProgress {
  std::string line;      // trial, state, value or message, params
  std::string standing;  // best so far, pruned and failed counts, time left
};

TrialProgress trial_progress(const pipeline::StudyTrialView& view, const pipeline::StudyResult& progress,
                             std::optional<double> seconds_left, bool name_the_study) {
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
  std::string left = seconds_left ? fmt::format("  {:.0f}s left", std::max(0.0, *seconds_left)) : "";
  std::string outcome = view.trial.state == "complete" ? values_text(view) : view.trial.message;
  TrialProgress lines;
  lines.standing = fmt::format("best {}  pruned {} failed {}{}", best, pruned, failed, left);
  lines.line = fmt::format("{}trial {:>3} {:<8} {:<24} {}", name_the_study ? progress.study + " " : "",
                           view.trial.number, view.trial.state, outcome.substr(0, 60), params_text(view.trial.params));
  return lines;
}

// The live table on a terminal: the latest trials and the study's standing, redrawn in place
// (cursor up, clear below) after each trial.
class LiveTrialTable {
 public:
  LiveTrialTable() {
    winsize size{};
    if (::ioctl(2, TIOCGWINSZ, &size) == 0 && size.ws_col > 20) width_ = size.ws_col - 1;
  }

  void redraw(const TrialProgress& progress) {
    recent_.push_back(progress.line);
    if (recent_.size() > kRows) recent_.erase(recent_.begin());
    std::string frame = drawn_lines_ > 0 ? fmt::format("\x1b[{}A\x1b[J", drawn_lines_) : "";
    for (const auto& line : recent_) frame += line.substr(0, width_) + "\n";
    frame += progress.standing.substr(0, width_) + "\n";
    drawn_lines_ = recent_.size() + 1;
    std::cerr << frame << std::flush;
  }

 private:
  static constexpr std::size_t kRows = 12;
  // Lines are cut to the terminal's width: a wrapped line would break the redraw's line count.
  std::size_t width_ = 119;
  std::vector<std::string> recent_;
  std::size_t drawn_lines_ = 0;
};

// Progress on stderr per finished trial (with its study's name when several studies run): a live
// table on a terminal, a plain line per trial otherwise (logs, pipes).
pipeline::StudyCallbacks progress_callbacks(const TuneOptions& flags, std::optional<double> budget_seconds,
                                            bool name_the_study) {
  pipeline::StudyCallbacks callbacks;
  if (!flags.progress) return callbacks;
  // A line per trial says what each trial's log lines would: keep only warnings and errors.
  set_log_level(LogLevel::kWarn);
  const auto started = std::chrono::steady_clock::now();
  auto table = ::isatty(2) != 0 ? std::make_shared<LiveTrialTable>() : nullptr;
  callbacks.on_trial_finished = [=](const pipeline::StudyTrialView& view, const pipeline::StudyResult& progress) {
    std::optional<double> seconds_left;
    if (budget_seconds) {
      seconds_left =
          *budget_seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
    TrialProgress lines = trial_progress(view, progress, seconds_left, name_the_study);
    if (table != nullptr) {
      table->redraw(lines);
    } else {
      std::cerr << lines.line << "  " << lines.standing << "\n";
    }
  };
  return callbacks;
}

// Ctrl-C and SIGTERM ask `callbacks` to stop while it lives.
class StopOnSignal {
 public:
  explicit StopOnSignal(pipeline::StudyCallbacks& callbacks) {
    stop_requested = false;
    callbacks.cancel = &stop_requested;
    previous_interrupt_ = std::signal(SIGINT, on_stop_signal);
    previous_terminate_ = std::signal(SIGTERM, on_stop_signal);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  ~StopOnSignal() {
    std::signal(SIGINT, previous_interrupt_);
    std::signal(SIGTERM, previous_terminate_);
  }

 private:
  void (*previous_interrupt_)(int) = SIG_DFL;
  void (*previous_terminate_)(int) = SIG_DFL;
};

Result<StudyOutput> tune(const GlobalOptions& global, const TuneOptions& flags,
                         const std::vector<std::string>& given_flags) {
  if (std::find(given_flags.begin(), given_flags.end(), "ensemble") != given_flags.end()) {
    return invalid_argument("--ensemble applies to --auto, which builds ensembles across its trials");
  }
  SLIPWAY_ASSIGN_OR_RETURN(pipeline::StudyRequest request, tune_request(flags, given_flags));
  SLIPWAY_RETURN_IF_ERROR(pipeline::check_study_request(request));
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kCreate));
  pipeline::StudyCallbacks callbacks = progress_callbacks(flags, request.budget_seconds, false);
  StopOnSignal stop(callbacks);
  SLIPWAY_ASSIGN_OR_RETURN(pipeline::StudyResult result, pipeline::run_study(*store, request, callbacks));
  StudyOutput output;
  output.study = std::move(result);
  return output;
}

struct AutoMlOutput : CommandResult {
  pipeline::AutoMlResult result;

  void write_json(JsonWriter& json) const override { pipeline::write_automl_json(json, result); }
  void write_text(std::ostream& out) const override {
    const auto& objective = result.objective;
    out << "objective  " << objective.measure << (objective.maximize ? " (max)" : " (min)") << "; " << result.rungs
        << " rungs of successive halving across families\n\n";
    std::vector<std::vector<std::string>> rows;
    int rank = 0;
    for (const auto& entry : result.leaderboard) {
      auto measure = [&](const char* name) {
        if (!entry.best) return std::string("-");
        auto found = entry.best->trial.measures.find(name);
        return found == entry.best->trial.measures.end() ? std::string("-") : format_metric(found->second);
      };
      rows.push_back({std::to_string(++rank), entry.family, std::to_string(entry.trials),
                      entry.best ? format_metric(entry.best->objective_values.front()) : "-", measure("p95_us"),
                      measure("bundle_kb"), measure("train_s"), std::to_string(entry.last_rung),
                      entry.study + (entry.error.empty() ? "" : " (" + entry.error + ")")});
    }
    if (result.ensemble) {
      const auto& ensemble = *result.ensemble;
      auto measure = [&](const char* name) {
        auto found = ensemble.measures.find(name);
        return found == ensemble.measures.end() ? std::string("-") : format_metric(found->second);
      };
      std::string members;
      for (const auto& member : ensemble.members) {
        members += (members.empty() ? "#" : ", #") + std::to_string(member.trial.number);
      }
      rows.push_back({ensemble.better ? "*" : "-", "ensemble", std::to_string(ensemble.members.size()),
                      format_metric(ensemble.value), measure("p95_us"), measure("bundle_kb"), "-", "-",
                      ensemble.study + " trials " + members + (ensemble.feasible ? "" : " (infeasible)")});
    }
    print_table(out, {"rank", "model", "trials", objective.measure, "p95_us", "bundle_kb", "train_s", "rung", "study"},
                rows);
    if (result.ensemble) {
      out << "\nensemble: the mean of " << result.ensemble->family << "'s top " << result.ensemble->members.size()
          << " trials " << (result.ensemble->better ? "beats (*)" : "does not beat") << " the best single trial (run "
          << result.ensemble->run_id << ")\n";
    } else if (!result.ensemble_note.empty()) {
      out << "\nno ensemble: " << result.ensemble_note << "\n";
    }
    if (result.registered) {
      bool ensemble = result.ensemble && result.ensemble->better;
      out << "\nregistered " << result.registered->model << " version " << result.registered->version << " ("
          << (ensemble ? "ensemble of " + result.ensemble->family : result.leaderboard.front().family) << ", run "
          << result.registered->run_id << ")\n";
    }
  }
};

Result<AutoMlOutput> automl(const GlobalOptions& global, const TuneOptions& flags,
                            const std::vector<std::string>& given_flags) {
  auto given = [&](const char* name) {
    return std::find(given_flags.begin(), given_flags.end(), name) != given_flags.end();
  };
  for (const char* flag :
       {"resume", "model", "space", "sampler", "pruner", "trials", "parallel", "from-study", "force"}) {
    if (given(flag)) {
      return invalid_argument(std::string("--auto chooses the models, their spaces and trials itself; --") + flag +
                              " does not apply");
    }
  }
  if (!given("budget")) return invalid_argument("--auto needs a --budget, such as 15m: it spends it across models");
  TuneOptions study_flags = flags;
  if (study_flags.study.empty()) study_flags.study = "automl";
  SLIPWAY_ASSIGN_OR_RETURN(pipeline::StudyRequest request, tune_request(study_flags, given_flags));
  pipeline::AutoMlRequest automl;
  automl.study = request.study;
  automl.spec = request.definition.spec;
  automl.objectives = request.definition.objectives;
  automl.constraints = request.definition.constraints;
  automl.costs = request.definition.costs;
  automl.ensemble_size = flags.ensemble_size;
  automl.budget_seconds = request.budget_seconds.value_or(0);
  automl.register_as = request.register_as;
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kCreate));
  pipeline::StudyCallbacks callbacks = progress_callbacks(flags, request.budget_seconds, true);
  StopOnSignal stop(callbacks);
  AutoMlOutput output;
  SLIPWAY_ASSIGN_OR_RETURN(output.result, pipeline::run_automl(*store, automl, callbacks));
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
  SLIPWAY_ASSIGN_OR_RETURN(output.studies, pipeline::list_studies(*store));
  return output;
}

Result<StudyOutput> show_study(const GlobalOptions& global, const std::string& study, const std::string& html) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  StudyOutput output;
  SLIPWAY_ASSIGN_OR_RETURN(output.study, pipeline::read_study(*store, study));
  output.most_trials = SIZE_MAX;
  if (!html.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(html, study_html(output.study)));
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
  if (flags.auto_ml) return render(global, automl(global, flags, given));
  return render(global, tune(global, flags, given));
}

int run_studies(const GlobalOptions& global) { return render(global, list_studies(global)); }

int run_study_show(const GlobalOptions& global, const std::string& study, const std::string& html) {
  return render(global, show_study(global, study, html));
}

int run_study_narrow(const GlobalOptions& global, const StudyNarrowOptions& flags) {
  return render(global, narrow_study(global, flags));
}

}  // namespace slipway::cli
