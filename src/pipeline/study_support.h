// What the study operations share (private to pipeline): tuning.cpp runs studies, automl.cpp
// runs studies across model families, trial_measures.cpp measures their trials, study_results.cpp
// reads them.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/eval.h"
#include "slipway/model.h"
#include "slipway/pipeline/tuning.h"
#include "slipway/registry.h"

namespace slipway::pipeline {

// The longest budget a study or AutoML takes (a longer one would overflow the deadline's clock).
inline constexpr double kLongestBudgetSeconds = 30.0 * 24 * 3600;

// A trial that a cancel, a budget or its worker's death ended: it does not count toward the
// study's trials and runs again once.
bool interrupted(const registry::StudyTrial& trial);

// The task training will infer from the target as it does: logistic and two values are binary,
// more than two texts multiclass, other numbers regression, unless the family's objective
// parameter says. Reads the data when only the target can tell.
Result<model::Task> inferred_task(const TrainSpec& spec);

// The rows run_training trains and evaluates on for `spec`: the data read and split as it does
// (training.cpp).
struct TrainingRows {
  data::Table train;
  data::Table test;
};
Result<TrainingRows> training_rows(const TrainSpec& spec);

// What run_training records in a fitted bundle it stores: the metrics on the held-out rows as
// "test_NAME", and the training rows' profile (what `slipway monitor` measures skew against).
std::map<std::string, double> test_metrics_of(const eval::Evaluation& evaluation);
Result<std::shared_ptr<const model::Bundle>> with_training_record(const model::Bundle& bundle,
                                                                  const std::map<std::string, double>& test_metrics,
                                                                  const data::Table& train);

// ---------------------------------------------------------------------------------------------
// Reading a study's trials (study_results.cpp).

// The trial with its objectives' values (complete trials) and whether its constraints hold.
StudyTrialView view_of(const StudyDefinition& definition, registry::StudyTrial trial);
// Complete, feasible, and every objective a number: a trial samplers and the best may count.
bool usable(const StudyTrialView& view);
// Non-domination rank of each entry (0: the front), by peeling one front after another.
std::vector<int> domination_ranks(const std::vector<std::vector<double>>& values,
                                  const std::vector<StudyObjective>& goals);
// The study read: its trials viewed, the best (or the front), parameter importance.
StudyResult study_of(const std::string& study, const StudyDefinition& definition,
                     std::vector<registry::StudyTrial> trials);

// ---------------------------------------------------------------------------------------------
// What trials measure (trial_measures.cpp).

inline constexpr std::string_view kBatchThroughput = "rows_per_s";
inline constexpr std::string_view kPeakTrainingMemory = "train_mb";

// METRIC, METRIC@VALUE or METRIC@worst, or a measure of the bundle: its metric part, checked
// (InvalidArgument naming the closest known name).
Result<std::string> measure_metric(const std::string& measure);
// Whether `metric` is better larger (what an objective without a direction takes).
bool measure_maximized(const std::string& metric);
// Whether `measure` is measured on the trial's bundle (p95_us, bundle_kb, ...), not evaluated.
bool is_bundle_measure(const std::string& measure);
// An evaluation's value of METRIC, METRIC@VALUE or METRIC@worst (NaN when it has none).
double evaluation_measure(const std::string& measure, const eval::Evaluation& evaluation);
// "p95_us<=50": the text parse_study_constraint reads back (the limit exact).
std::string constraint_text(const StudyConstraint& constraint);
// Whether `constraint` holds for `measures` (a measure missing or NaN: it does not).
bool constraint_holds(const StudyConstraint& constraint, const std::map<std::string, double>& measures);
// InvalidArgument when an objective or a constraint names `cost` without `costs`.
Status check_costs_given(const std::vector<StudyObjective>& objectives, const std::vector<StudyConstraint>& constraints,
                         const std::optional<eval::CostMatrix>& costs);
// InvalidArgument when costs are given for a regression (`target` makes the task).
Status check_costs_fit(bool has_costs, model::Task task, const std::string& target);
// Whether an objective or a constraint of `definition` is `measure`.
bool names_measure(const StudyDefinition& definition, std::string_view measure);

// The process's peak resident memory (Linux's VmHWM), reset to the current resident memory; and
// read, in MiB. False or none where the system does not offer it.
bool reset_peak_memory();
std::optional<double> peak_memory_mib();

// The trial's measures from its training outcome: the evaluation's metrics (again with the
// definition's costs, when it has them), the slices asked for, the bundle's size, its serving
// latency when `measure_latency` or the definition names it, and its batch throughput when the
// definition names it.
// InvalidArgument when the costs do not fit the model (the study stops); another error leaves
// the measure out and is the trial's message.
Status measure_trial(registry::Registry& registry, const StudyDefinition& definition, bool measure_latency,
                     const TrainSpec& spec, const TrainOutcome& outcome, std::map<std::string, double>& measures);

}  // namespace slipway::pipeline
