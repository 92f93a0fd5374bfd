// slipway/pipeline/tuning.h — hyperparameter studies as an operation: what `slipway tune`,
// `slipway studies` and `slipway study` call (and the management API will). A study's trials are
// training runs (pipeline::run_training) with parameters a tune:: sampler picks; the study and
// its trials live in the workspace's metadata store (registry::StudyStore), so several workers,
// threads or processes, work one study, and a study stopped by kill -9 goes on with --resume.
//
// Threads: run_study runs `parallel` workers, each on a thread of its own with its own Registry
// opened on the caller's workspace; the callbacks are called one at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "slipway/core.h"
#include "slipway/eval.h"
#include "slipway/pipeline.h"
#include "slipway/registry.h"
#include "slipway/tune.h"

namespace slipway::pipeline {

// A quantity measured on each trial that a study optimizes or bounds:
//  - an evaluation metric on the held-out rows (auc, log_loss, accuracy, f1, rmse, r2, ...);
//    METRIC@VALUE on the rows whose slice column (the spec's `slice`) is VALUE; METRIC@worst on
//    the worst of the slices;
//    brier and ece (calibration), balanced_accuracy (classes weighted alike), and cost (the mean
//    cost per row of the model's least-expected-cost decisions under the definition's costs);
//  - measured on the trial's bundle on this machine: p50_us and p95_us (one-row KServe v2
//    inference through the serving code path, 200 requests from the held-out rows), rows_per_s
//    (batch throughput: the held-out rows scored at once, as batch scoring scores a shard; the
//    median of three after a warm-up), bundle_kb, train_s (fitting time), train_mb (the process's
//    peak resident memory while the trial trained; one worker per process).
struct StudyObjective {
  std::string measure;
  bool maximize = true;
};
// "auc", "p95_us:minimize", "log_loss@worst:minimize". Without a direction, a metric's own
// (eval::higher_is_better), maximize for rows_per_s and minimize for the bundle's other quantities.
Result<StudyObjective> parse_study_objective(const std::string& text);

struct StudyConstraint {
  std::string measure;
  bool at_most = true;  // measure <= limit; else measure >= limit
  double limit = 0;
};
// "p95_us<=50", "bundle_kb<=512", "recall>=0.6".
Result<StudyConstraint> parse_study_constraint(const std::string& text);

// What a study is: stored with it, so that `--resume` and other workers need only its name.
struct StudyDefinition {
  TrainSpec spec;  // the data, target, family, split or test file, fixed parameters, seed
  tune::SearchSpace space;
  std::string sampler = "tpe";  // tpe, tpe:multivariate, random, grid, qmc
  std::string pruner = "none";  // asha, median, none
  // One, or two or three (a Pareto front). None: the task's watched metric (auc for binary
  // classification, log_loss for multiclass, rmse for regression).
  std::vector<StudyObjective> objectives;
  std::vector<StudyConstraint> constraints;
  // What decisions cost, for the metric "cost" (required when an objective or constraint names it).
  std::optional<eval::CostMatrix> costs;
  std::string from_study;  // whose trials warm-start the sampler
  int trials = 20;         // the study ends at this many trials (interrupted ones that were retried aside)
};

// A study to start or continue.
struct StudyRequest {
  std::string study;
  StudyDefinition definition;
  // Continue the stored study: `definition` is ignored except `trials` when `trials_given`.
  bool resume = false;
  bool trials_given = false;
  // A study of this name with another definition is refused unless `force`, which starts it over
  // (its earlier trials are dropped from the study; their runs stay).
  bool force = false;
  // Wall-clock seconds; none: no limit. Trials still running when it ends are stopped (failed).
  std::optional<double> budget_seconds;
  int parallel = 1;         // workers; each trains with the spec's threads / parallel
  std::string register_as;  // register the best trial's bundle (single objective, feasible)
  // Time one-row serving latency (p50_us, p95_us) on every trial, not only when an objective or
  // a constraint names it.
  bool measure_latency = false;
  Caller caller;
};

// One trial as a study reads it.
struct StudyTrialView {
  registry::StudyTrial trial;
  std::vector<double> objective_values;  // in the definition's order; empty unless complete
  bool feasible = true;                  // every constraint holds (complete trials)
};

struct StudyResult {
  std::string study;
  StudyDefinition definition;
  std::vector<StudyTrialView> trials;
  // The best feasible complete trial (one objective), or the feasible Pareto front (several), by
  // number.
  std::vector<std::int64_t> best;
  // Each tuned parameter's share of the objective's variance among complete trials: the variance
  // of the objective's mean across the parameter's values (choices, or quantile bins of numbers),
  // over the objective's variance, normalized to sum to 1. Empty with fewer than 4 complete trials.
  std::map<std::string, double> importance;
  std::optional<registry::ModelVersion> registered;
  int trials_run = 0;   // by this call
  std::string stopped;  // why this call stopped: "trials", "budget", "cancelled"
};

// Called one at a time, from the workers' threads; none is required.
struct StudyCallbacks {
  std::function<void(const registry::StudyTrial& trial)> on_trial_started;
  std::function<void(const StudyTrialView& trial, const StudyResult& study)> on_trial_finished;
  // Set from another thread: no new trial starts, and the running ones stop (failed,
  // "interrupted": --resume runs them again).
  const std::atomic<bool>* cancel = nullptr;
};

// What can be checked without the workspace or the data (run_study checks it first): the name,
// workers, budget, and (unless resuming) the spec, space, sampler, pruner, objectives and
// constraints. A front door calls it to refuse a request before it starts a job.
Status check_study_request(const StudyRequest& request);

// Creates the study (or checks that the stored one has this definition), fails the trials whose
// process is gone (each is run again once), then runs trials until the study has
// `definition.trials`, the budget ends or `cancel` is set, and registers the best. A trial
// whose training fails or whose objective is NaN is recorded failed and the study goes on; the
// first three trials of a study failing stops it (a spec, not a parameter, is wrong), as does an
// objective that is not a metric of the task.
Result<StudyResult> run_study(registry::Registry& registry, const StudyRequest& request,
                              const StudyCallbacks& callbacks = {});

// Every study, by name, with its trials counted by state.
Result<std::vector<registry::StudySummary>> list_studies(registry::Registry& registry);
// The stored study, read: its trials, best and parameter importance.
Result<StudyResult> read_study(registry::Registry& registry, const std::string& study);
// {"study","objectives":[...],"trials":[...],"best":[...],"importance":{...},...}
void write_study_json(JsonWriter& json, const StudyResult& study);

// The study's space narrowed to what its best `top_fraction` complete feasible trials used
// (tune::narrow_search_space, on the first objective), as YAML.
Result<std::string> narrowed_study_space(registry::Registry& registry, const std::string& study, double top_fraction);

// ---------------------------------------------------------------------------------------------
// AutoML (`slipway tune --auto`): the task inferred from the target, the budget spent across
// model families by successive halving, the winner registered.

struct AutoMlRequest {
  // Each family's trials are a study of its own, STUDY-FAMILY (shown and resumed like any).
  std::string study;
  TrainSpec spec;  // the data, target, --valid or split, seed, threads; `model` is ignored
  // At most one; none: the task's metric. Constraints as a study's.
  std::vector<StudyObjective> objectives;
  std::vector<StudyConstraint> constraints;
  std::optional<eval::CostMatrix> costs;
  double budget_seconds = 0;          // required, > 0
  std::vector<std::string> families;  // empty: by task (logistic or linear, gbdt, mlp)
  // At most this many trials of the best family that averages into one model (gbdt, logistic,
  // linear) averaged into an ensemble, registered when it beats the best single trial; below 2:
  // no ensemble.
  int ensemble_size = 3;
  std::string register_as;
  Caller caller;
};

// One family's standing.
struct AutoMlEntry {
  std::string family;
  std::string study;
  int trials = 0;                      // complete, pruned and failed
  int last_rung = 0;                   // the last rung of successive halving it ran in
  std::optional<StudyTrialView> best;  // its best feasible trial
  std::string error;                   // why its study stopped, when it failed
};

// The mean of a family's best few trials as one model (model::averaged_bundle), measured on the
// held-out rows as a trial is, and recorded as a run of its own tagged slipway.study and
// slipway.ensemble (the members' run ids).
struct AutoMlEnsemble {
  std::string family;
  std::string study;
  std::vector<StudyTrialView> members;  // in the order greedy selection added them, the best first
  std::map<std::string, double> measures;
  double value = 0;  // the objective
  bool feasible = true;
  bool better = false;  // than the best single trial of every family (and so registered, when asked)
  std::string run_id;
  std::string bundle_sha256;
};

struct AutoMlResult {
  StudyObjective objective;
  std::vector<AutoMlEntry> leaderboard;  // the best first; families without a feasible trial last
  int rungs = 0;
  std::optional<AutoMlEnsemble> ensemble;  // when one was built
  std::string ensemble_note;               // why none was built, when none was
  std::optional<registry::ModelVersion> registered;
};

// Rung r gives each surviving family 4 x 2^r more trials, with an equal share of the time left;
// after a rung the better half (at least one) goes on; the last family standing takes what time
// remains. Then the best family that averages into one model builds an ensemble by greedy forward
// selection among its 10 best feasible trials (distinct bundles): from the best, add the trial
// whose average with the members scores best on the held-out rows while that improves the
// objective, up to `ensemble_size` members (none when nothing improves, or when the objective is
// measured on the bundle). The ensemble is registered instead of the best single trial when it is
// feasible and scores better than every family's best.
// InvalidArgument without a budget or for a family the task cannot train.
Result<AutoMlResult> run_automl(registry::Registry& registry, const AutoMlRequest& request,
                                const StudyCallbacks& callbacks = {});
// {"objective","rungs","leaderboard":[{"family","study","trials","rung","best":{...}}],"registered"?}
void write_automl_json(JsonWriter& json, const AutoMlResult& result);

}  // namespace slipway::pipeline
