// What a study's trials measure: the names objectives and constraints may take, and the
// measurements of a trained trial (its evaluation, slices, costs, and its bundle on this
// machine: serving latency, batch throughput, size, training memory).
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "pipeline/operation_support.h"
#include "pipeline/study_support.h"
#include "slipway/eval.h"
#include "slipway/serve.h"

namespace slipway::pipeline {
namespace {

constexpr int kLatencyRequests = 200;
constexpr int kLatencyWarmup = 20;
constexpr int kThroughputRepeats = 3;

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Quantities measured on the trial's bundle rather than by evaluation, all smaller-is-better
// but the batch throughput.
const std::vector<std::string>& bundle_measures() {
  static const std::vector<std::string> kMeasures = {"p50_us",    "p95_us",  "rows_per_s",
                                                     "bundle_kb", "train_s", "train_mb"};
  return kMeasures;
}

// One-row KServe v2 requests from the held-out rows through the serving code path: p50 and p95
// of the time inside the server, in microseconds.
Result<std::pair<double, double>> serving_latency_us(const std::shared_ptr<const model::Bundle>& bundle,
                                                     const data::Table& rows, const TrainSpec& spec) {
  std::vector<std::string> skip = {spec.target};
  if (!spec.weight_column.empty()) skip.push_back(spec.weight_column);
  std::vector<std::string> bodies = serve::v2_requests_from_table(rows, 1, skip, kLatencyRequests);
  if (bodies.empty()) return failed_precondition("no held-out rows to time requests with");
  std::vector<double> micros;
  for (int i = 0; i < kLatencyWarmup + kLatencyRequests; ++i) {
    SLIPWAY_ASSIGN_OR_RETURN(serve::InferStageTimes times,
                             serve::time_v2_infer(bundle, bodies[static_cast<std::size_t>(i) % bodies.size()]));
    if (i >= kLatencyWarmup) micros.push_back(times.total() * 1e6);
  }
  std::sort(micros.begin(), micros.end());
  auto at = [&](double quantile) {
    return micros[std::min(micros.size() - 1, static_cast<std::size_t>(quantile * static_cast<double>(micros.size())))];
  };
  return std::pair<double, double>(at(0.50), at(0.95));
}

// The slice measures the definition asks for (METRIC@VALUE, METRIC@worst).
void add_slice_measures(const StudyDefinition& definition, const eval::Evaluation& evaluation,
                        std::map<std::string, double>& measures) {
  for (const auto& objective : definition.objectives) {
    if (objective.measure.find('@') != std::string::npos) {
      measures[objective.measure] = evaluation_measure(objective.measure, evaluation);
    }
  }
  for (const auto& constraint : definition.constraints) {
    if (constraint.measure.find('@') != std::string::npos) {
      measures[constraint.measure] = evaluation_measure(constraint.measure, evaluation);
    }
  }
}

// Rows a second through Bundle::predict on the held-out rows scored at once, as batch scoring
// scores a shard: the median of three after a warm-up.
Result<double> batch_rows_per_second(const model::Bundle& bundle, const data::Table& rows) {
  if (rows.row_count() == 0) return failed_precondition("no held-out rows to score");
  std::vector<double> seconds;
  for (int i = 0; i <= kThroughputRepeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    SLIPWAY_RETURN_IF_ERROR(bundle.predict(rows).status());
    if (i > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return static_cast<double>(rows.row_count()) / std::max(seconds[seconds.size() / 2], 1e-9);
}

}  // namespace

Result<std::string> measure_metric(const std::string& measure) {
  std::string metric = measure.substr(0, measure.find('@'));
  if (contains(bundle_measures(), metric)) {
    if (metric != measure) return invalid_argument("'" + measure + "': " + metric + " has no slices");
    return metric;
  }
  if (!contains(eval::metric_names(), metric)) {
    std::vector<std::string> known = eval::metric_names();
    known.insert(known.end(), bundle_measures().begin(), bundle_measures().end());
    std::string message = "'" + metric + "' is not a metric or a measure of the bundle";
    if (auto suggestion = closest_name(metric, known)) message += "; did you mean '" + *suggestion + "'?";
    return invalid_argument(message + " (known: " + join(known, ", ") + ")");
  }
  if (measure.size() > metric.size() + 1 || measure.find('@') == std::string::npos) return metric;
  return invalid_argument("'" + measure + "': a slice objective is METRIC@VALUE or METRIC@worst");
}

bool measure_maximized(const std::string& metric) {
  if (metric == kBatchThroughput) return true;
  return !contains(bundle_measures(), metric) && eval::higher_is_better(metric);
}

bool is_bundle_measure(const std::string& measure) { return contains(bundle_measures(), measure); }

double evaluation_measure(const std::string& measure, const eval::Evaluation& evaluation) {
  std::size_t at = measure.find('@');
  if (at == std::string::npos) return evaluation.overall.get(measure);
  std::string metric = measure.substr(0, at), slice = measure.substr(at + 1);
  double value = std::numeric_limits<double>::quiet_NaN();
  for (const auto& entry : evaluation.slices) {
    double slice_value = entry.metrics.get(metric);
    if (slice == "worst") {
      if (std::isnan(slice_value)) continue;
      bool worse = eval::higher_is_better(metric) ? slice_value < value : slice_value > value;
      if (std::isnan(value) || worse) value = slice_value;
    } else if (entry.value == slice) {
      value = slice_value;
    }
  }
  return value;
}

bool constraint_holds(const StudyConstraint& constraint, const std::map<std::string, double>& measures) {
  auto found = measures.find(constraint.measure);
  double value = found == measures.end() ? std::numeric_limits<double>::quiet_NaN() : found->second;
  return constraint.at_most ? value <= constraint.limit : value >= constraint.limit;  // NaN: false
}

Status check_costs_given(const std::vector<StudyObjective>& objectives, const std::vector<StudyConstraint>& constraints,
                         const std::optional<eval::CostMatrix>& costs) {
  if (costs) return {};
  std::vector<std::string> measures;
  measures.reserve(objectives.size() + constraints.size());
  for (const auto& objective : objectives) measures.push_back(objective.measure);
  for (const auto& constraint : constraints) measures.push_back(constraint.measure);
  for (const auto& measure : measures) {
    if (measure.substr(0, measure.find('@')) == "cost") {
      return invalid_argument("'" + measure + "' needs what decisions cost: --costs 'fn=5,fp=1' or a CSV file");
    }
  }
  return {};
}

Status check_costs_fit(bool has_costs, model::Task task, const std::string& target) {
  if (!has_costs || task != model::Task::kRegression) return {};
  return invalid_argument("--costs weighs a classifier's decisions; '" + target + "' makes this a regression");
}

bool names_measure(const StudyDefinition& definition, std::string_view measure) {
  return std::any_of(definition.objectives.begin(), definition.objectives.end(),
                     [&](const StudyObjective& objective) { return objective.measure == measure; }) ||
         std::any_of(definition.constraints.begin(), definition.constraints.end(),
                     [&](const StudyConstraint& constraint) { return constraint.measure == measure; });
}

// Linux keeps the process's peak resident memory (VmHWM); writing 5 to clear_refs resets it to
// the current resident memory, so the peak read after training is the peak during it.
bool reset_peak_memory() {
  // What earlier trials freed goes back to the system first, so the peak starts from what is held.
  ::malloc_trim(0);
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

std::optional<double> peak_memory_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (!line.starts_with("VmHWM:")) continue;  // "VmHWM:\t    1932 kB"
    char* end = nullptr;
    double kib = std::strtod(line.c_str() + 6, &end);
    if (end != line.c_str() + 6 && kib > 0 && std::isfinite(kib)) return kib / 1024.0;
  }
  return std::nullopt;
}

Status measure_trial(registry::Registry& registry, const StudyDefinition& definition, bool measure_latency,
                     const TrainSpec& spec, const TrainOutcome& outcome, std::map<std::string, double>& measures) {
  const eval::Evaluation* evaluation = &outcome.evaluation;
  std::optional<eval::Evaluation> costed;
  if (definition.costs) {
    auto evaluated = eval::evaluate(*outcome.summary.bundle, outcome.held_out,
                                    {.slice_column = spec.slice, .costs = definition.costs});
    if (!evaluated.ok()) return evaluated.status();
    costed = std::move(*evaluated);
    evaluation = &*costed;
  }
  for (const auto& [name, value] : evaluation->overall.values) measures[name] = value;
  add_slice_measures(definition, *evaluation, measures);
  std::error_code size_error;
  auto bytes = std::filesystem::file_size(registry.artifacts().path_for(outcome.bundle_sha256), size_error);
  measures["bundle_kb"] = size_error ? std::numeric_limits<double>::quiet_NaN() : bytes / 1024.0;
  Status status;
  if (measure_latency || names_measure(definition, "p50_us") || names_measure(definition, "p95_us")) {
    auto latency = serving_latency_us(outcome.summary.bundle, outcome.held_out, spec);
    if (latency.ok()) {
      measures["p50_us"] = latency->first;
      measures["p95_us"] = latency->second;
    } else {
      status = failed_precondition("latency not measured: " + latency.status().message());
    }
  }
  if (names_measure(definition, kBatchThroughput)) {
    auto throughput = batch_rows_per_second(*outcome.summary.bundle, outcome.held_out);
    if (throughput.ok()) {
      measures[std::string(kBatchThroughput)] = *throughput;
    } else if (status.ok()) {
      status = failed_precondition("batch throughput not measured: " + throughput.status().message());
    }
  }
  return status;
}

Result<StudyObjective> parse_study_objective(const std::string& text) {
  StudyObjective objective;
  std::string measure = text;
  std::optional<bool> maximize;
  if (auto colon = text.rfind(':'); colon != std::string::npos) {
    std::string direction = text.substr(colon + 1);
    if (direction != "maximize" && direction != "minimize") {
      return invalid_argument("objective '" + text + "': the direction after ':' is maximize or minimize");
    }
    maximize = direction == "maximize";
    measure = text.substr(0, colon);
  }
  if (measure.empty() || has_control_characters(measure)) return invalid_argument("an objective names a measure");
  SLIPWAY_ASSIGN_OR_RETURN(std::string metric, measure_metric(measure));
  objective.measure = measure;
  objective.maximize = maximize.value_or(measure_maximized(metric));
  return objective;
}

std::string constraint_text(const StudyConstraint& constraint) {
  char limit[32];
  std::snprintf(limit, sizeof limit, "%.17g", constraint.limit);
  return constraint.measure + (constraint.at_most ? "<=" : ">=") + limit;
}

Result<StudyConstraint> parse_study_constraint(const std::string& text) {
  StudyConstraint constraint;
  std::size_t at = text.find("<=");
  constraint.at_most = at != std::string::npos;
  if (!constraint.at_most) at = text.find(">=");
  if (at == std::string::npos || at == 0) {
    return invalid_argument("constraint '" + text + "': write MEASURE<=LIMIT or MEASURE>=LIMIT, such as p95_us<=50");
  }
  constraint.measure = text.substr(0, at);
  if (has_control_characters(constraint.measure)) return invalid_argument("a constraint names a measure");
  SLIPWAY_RETURN_IF_ERROR(measure_metric(constraint.measure).status());
  std::string limit = text.substr(at + 2);
  char* end = nullptr;
  constraint.limit = std::strtod(limit.c_str(), &end);
  if (limit.empty() || *end != '\0' || !std::isfinite(constraint.limit)) {
    return invalid_argument("constraint '" + text + "': the limit must be a finite number");
  }
  return constraint;
}

}  // namespace slipway::pipeline
