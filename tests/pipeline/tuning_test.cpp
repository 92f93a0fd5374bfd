// pipeline::run_study in process on the lending data: studies stored and continued, trials as
// runs, redefinition, a worker killed mid-trial, constraints, several objectives, pruning,
// parallel workers, and the input a careless caller gives.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "slipway/pipeline/tuning.h"
#include "support/test_support.h"

namespace slipway::pipeline {
namespace {

using slipway::testing::data_path;
using slipway::testing::TempDir;

std::unique_ptr<registry::Registry> open_registry(const TempDir& dir) {
  auto opened = registry::Registry::open(dir.file("home"), {.create = true});
  EXPECT_TRUE(opened.ok()) << opened.status().message();
  return std::move(*opened);
}

StudyRequest small_study(const std::string& name, int trials) {
  StudyRequest request;
  request.study = name;
  StudyDefinition& definition = request.definition;
  definition.spec.data = data_path("lending_club.csv");
  definition.spec.target = "Class";
  definition.spec.model = "gbdt";
  definition.spec.params = {"rounds=8"};
  definition.spec.threads = 2;
  auto space = tune::parse_search_space(
      "params:\n"
      "  learning_rate: {type: float, low: 0.02, high: 0.5, log: true}\n"
      "  max_depth: {type: int, low: 2, high: 6}\n",
      "test space", "gbdt");
  EXPECT_TRUE(space.ok()) << space.status().message();
  definition.space = *space;
  definition.trials = trials;
  return request;
}

std::size_t count_state(const StudyResult& study, const std::string& state) {
  return static_cast<std::size_t>(std::count_if(study.trials.begin(), study.trials.end(),
                                                [&](const StudyTrialView& view) { return view.trial.state == state; }));
}

TEST(Tuning, RunsAStudyOfRunsAndRegistersTheBest) {
  TempDir dir;
  auto registry = open_registry(dir);
  StudyRequest request = small_study("lending-gbdt", 5);
  request.register_as = "lending";
  int started = 0, finished = 0;
  StudyCallbacks callbacks;
  callbacks.on_trial_started = [&](const registry::StudyTrial&) { ++started; };
  callbacks.on_trial_finished = [&](const StudyTrialView&, const StudyResult&) { ++finished; };
  auto study = run_study(*registry, request, callbacks);
  ASSERT_TRUE(study.ok()) << study.status().message();
  EXPECT_EQ(started, 5);
  EXPECT_EQ(finished, 5);
  EXPECT_EQ(study->trials_run, 5);
  EXPECT_EQ(study->stopped, "trials");
  ASSERT_EQ(study->trials.size(), 5u);
  // The default objective is the task's metric: auc, maximized.
  ASSERT_EQ(study->definition.objectives.size(), 1u);
  EXPECT_EQ(study->definition.objectives[0].measure, "auc");
  EXPECT_TRUE(study->definition.objectives[0].maximize);
  double best_auc = -1;
  for (const auto& view : study->trials) {
    ASSERT_EQ(view.trial.state, "complete") << view.trial.message;
    ASSERT_EQ(view.objective_values.size(), 1u);
    best_auc = std::max(best_auc, view.objective_values[0]);
    EXPECT_GT(view.trial.measures.at("bundle_kb"), 0);
    EXPECT_TRUE(view.trial.params.count("learning_rate") && view.trial.params.count("max_depth"));
    // Each trial is a run, tagged with its study and number.
    auto run = registry->runs().get(view.trial.run_id);
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_EQ(run->status, "FINISHED");
    EXPECT_EQ(run->tags.at("slipway.study"), "lending-gbdt");
    EXPECT_EQ(run->tags.at("slipway.trial"), std::to_string(view.trial.number));
    EXPECT_EQ(run->params.at("learning_rate"), view.trial.params.at("learning_rate"));
  }
  ASSERT_EQ(study->best.size(), 1u);
  EXPECT_EQ(study->trials[static_cast<std::size_t>(study->best[0])].objective_values[0], best_auc);
  ASSERT_TRUE(study->registered.has_value());
  EXPECT_EQ(study->registered->model, "lending");
  EXPECT_EQ(study->registered->run_id, study->trials[static_cast<std::size_t>(study->best[0])].trial.run_id);
  EXPECT_EQ(study->importance.size(), 2u);

  // The same request again: the study has its trials; nothing runs.
  request.register_as.clear();
  auto again = run_study(*registry, request);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->trials_run, 0);
  EXPECT_EQ(again->trials.size(), 5u);

  // --resume with more trials goes on from the stored definition alone.
  StudyRequest resume;
  resume.study = "lending-gbdt";
  resume.resume = true;
  resume.trials_given = true;
  resume.definition.trials = 7;
  auto resumed = run_study(*registry, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->trials_run, 2);
  EXPECT_EQ(resumed->trials.size(), 7u);

  auto listed = registry->studies().list();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().trials_by_state.at("complete"), 7);

  // Narrowing keeps the parameters, inside the old ranges.
  auto narrowed = narrowed_study_space(*registry, "lending-gbdt", 0.5);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status().message();
  auto space = tune::parse_search_space(*narrowed, "narrowed", "gbdt");
  ASSERT_TRUE(space.ok()) << space.status().message() << "\n" << *narrowed;
  ASSERT_EQ(space->params.size(), 2u);
  EXPECT_GE(space->params[0].low, 0.02);
  EXPECT_LE(space->params[0].high, 0.5);
}

TEST(Tuning, ARedefinedStudyIsRefusedUnlessForced) {
  TempDir dir;
  auto registry = open_registry(dir);
  ASSERT_TRUE(run_study(*registry, small_study("s", 2)).ok());
  StudyRequest changed = small_study("s", 2);
  changed.definition.sampler = "random";
  auto refused = run_study(*registry, changed);
  ASSERT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("--force"), std::string::npos);
  changed.force = true;
  auto forced = run_study(*registry, changed);
  ASSERT_TRUE(forced.ok()) << forced.status().message();
  EXPECT_EQ(forced->trials.size(), 2u);
  EXPECT_EQ(forced->definition.sampler, "random");
}

TEST(Tuning, ATrialWhoseProcessDiedFailsAndRunsAgainOnce) {
  TempDir dir;
  auto registry = open_registry(dir);
  ASSERT_TRUE(run_study(*registry, small_study("s", 2)).ok());
  // A child process claims trial 2 and dies without ending it, as kill -9 would leave it.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto opened = registry::Registry::open(dir.file("home"), false);
    if (!opened.ok()) _exit(2);
    auto claimed = (*opened)->studies().claim_trial("s", [](const std::vector<registry::StudyTrial>&) {
      return Result<std::optional<registry::TrialClaim>>(
          std::optional<registry::TrialClaim>(registry::TrialClaim{{{"learning_rate", "0.1"}, {"max_depth", "3"}}}));
    });
    _exit(claimed.ok() && claimed->has_value() ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  StudyRequest resume;
  resume.study = "s";
  resume.resume = true;
  resume.trials_given = true;
  resume.definition.trials = 3;
  auto resumed = run_study(*registry, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  ASSERT_EQ(resumed->trials.size(), 4u);
  const auto& died = resumed->trials[2].trial;
  EXPECT_EQ(died.state, "failed");
  EXPECT_TRUE(died.message.starts_with("interrupted")) << died.message;
  const auto& retry = resumed->trials[3].trial;
  EXPECT_EQ(retry.state, "complete") << retry.message;
  EXPECT_EQ(retry.retry_of, 2);
  EXPECT_EQ(retry.params, died.params);
  // The retry took the interrupted trial's place: three counted trials, so the study is done.
  EXPECT_EQ(resumed->trials_run, 1);
}

TEST(Tuning, InfeasibleTrialsAreMarkedAndNeverBest) {
  TempDir dir;
  auto registry = open_registry(dir);
  StudyRequest request = small_study("tight", 3);
  request.definition.constraints = {*parse_study_constraint("bundle_kb<=0.001")};
  request.register_as = "never";
  auto study = run_study(*registry, request);
  ASSERT_EQ(study.status().code(), StatusCode::kFailedPrecondition) << study.status().message();
  auto stored = read_study(*registry, "tight");
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->trials.size(), 3u);
  for (const auto& view : stored->trials) {
    EXPECT_EQ(view.trial.state, "complete");
    EXPECT_FALSE(view.feasible);
  }
  EXPECT_TRUE(stored->best.empty());
}

TEST(Tuning, SeveralObjectivesGiveAParetoFrontAndLatencyIsMeasured) {
  TempDir dir;
  auto registry = open_registry(dir);
  StudyRequest request = small_study("front", 5);
  request.definition.sampler = "random";
  request.definition.objectives = {*parse_study_objective("auc"), *parse_study_objective("p95_us")};
  auto study = run_study(*registry, request);
  ASSERT_TRUE(study.ok()) << study.status().message();
  ASSERT_FALSE(study->best.empty());
  for (const auto& view : study->trials) {
    ASSERT_EQ(view.objective_values.size(), 2u);
    EXPECT_GT(view.objective_values[1], 0.0);  // microseconds
    EXPECT_LE(view.trial.measures.at("p50_us"), view.trial.measures.at("p95_us"));
  }
  // No trial beats a front member in both objectives.
  for (auto number : study->best) {
    const auto& member = study->trials[static_cast<std::size_t>(number)].objective_values;
    for (const auto& other : study->trials) {
      bool beats = other.objective_values[0] >= member[0] && other.objective_values[1] <= member[1] &&
                   (other.objective_values[0] > member[0] || other.objective_values[1] < member[1]);
      EXPECT_FALSE(beats) << "trial " << other.trial.number << " dominates front member " << number;
    }
  }
  request.register_as = "x";
  request.definition.trials = 5;
  EXPECT_EQ(run_study(*registry, request).status().code(), StatusCode::kInvalidArgument);
}

// Objectives that reflect the business: a cost matrix (a bad loan approved costs five refused
// good ones), calibration and class-weighted accuracy; measures of the bundle: batch throughput
// and the peak memory of training. The costs are stored with the study and read back.
TEST(Tuning, CostsCalibrationThroughputAndMemoryAreMeasuredOnEachTrial) {
  TempDir dir;
  auto registry = open_registry(dir);
  StudyRequest request = small_study("costed", 3);
  request.definition.sampler = "tpe:multivariate";
  request.definition.spec.use_cache = false;
  request.definition.costs = *eval::parse_cost_matrix("actual,predicted,cost\nbad,good,5\ngood,bad,1\n");
  request.definition.objectives = {*parse_study_objective("cost"), *parse_study_objective("rows_per_s")};
  request.definition.constraints = {*parse_study_constraint("train_mb>=1"), *parse_study_constraint("ece<=1")};
  EXPECT_FALSE(request.definition.objectives[0].maximize);
  EXPECT_TRUE(request.definition.objectives[1].maximize);
  auto study = run_study(*registry, request);
  ASSERT_TRUE(study.ok()) << study.status().message();
  ASSERT_EQ(study->trials.size(), 3u);
  for (const auto& view : study->trials) {
    ASSERT_EQ(view.trial.state, "complete") << view.trial.message;
    const auto& measures = view.trial.measures;
    // A row costs 0, 1 or 5.
    EXPECT_GE(measures.at("cost"), 0.0);
    EXPECT_LE(measures.at("cost"), 5.0);
    EXPECT_GT(measures.at("rows_per_s"), 0.0);
    EXPECT_GT(measures.at("train_mb"), 1.0);
    EXPECT_GE(measures.at("ece"), 0.0);
    EXPECT_LE(measures.at("ece"), 1.0);
    EXPECT_GT(measures.at("brier"), 0.0);
    EXPECT_GT(measures.at("balanced_accuracy"), 0.0);
    EXPECT_TRUE(view.feasible);
  }
  auto stored = read_study(*registry, "costed");
  ASSERT_TRUE(stored.ok());
  ASSERT_TRUE(stored->definition.costs.has_value());
  EXPECT_EQ(eval::cost_matrix_text(*stored->definition.costs), "actual,predicted,cost\nbad,good,5\ngood,bad,1\n");
  EXPECT_EQ(stored->definition.sampler, "tpe:multivariate");

  // Resumed with more workers, the stored objective's train_mb is still one worker per process.
  StudyRequest resume;
  resume.study = "costed";
  resume.resume = true;
  resume.parallel = 2;
  auto parallel = run_study(*registry, resume);
  ASSERT_FALSE(parallel.ok());
  EXPECT_NE(parallel.status().message().find("--parallel 1"), std::string::npos) << parallel.status().message();

  // Costs naming a label the model does not have stop the study at its first trial.
  StudyRequest wrong = small_study("wrong-labels", 3);
  wrong.definition.costs = *eval::parse_cost_matrix("actual,predicted,cost\ndefault,good,5\n");
  wrong.definition.objectives = {*parse_study_objective("cost")};
  auto refused = run_study(*registry, wrong);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("'default'"), std::string::npos) << refused.status().message();
}

TEST(Tuning, AshaPrunesWeakTrialsOnTheirValidationRounds) {
  TempDir dir;
  auto registry = open_registry(dir);
  StudyRequest request = small_study("pruned", 8);
  request.definition.spec.params = {"rounds=40"};
  request.definition.pruner = "asha";
  auto study = run_study(*registry, request);
  ASSERT_TRUE(study.ok()) << study.status().message();
  EXPECT_EQ(count_state(*study, "complete") + count_state(*study, "pruned"), 8u);
  EXPECT_GE(count_state(*study, "pruned"), 1u);
  for (const auto& view : study->trials) {
    EXPECT_FALSE(view.trial.intermediate.empty());
    if (view.trial.state != "pruned") continue;
    EXPECT_LT(view.trial.intermediate.rbegin()->first, 40);
    auto run = registry->runs().get(view.trial.run_id);
    ASSERT_TRUE(run.ok());
    EXPECT_EQ(run->status, "INTERRUPTED");
  }
  // Pruning works the same in a study of two objectives.
  StudyRequest two = small_study("pruned-front", 6);
  two.definition.spec.params = {"rounds=40"};
  two.definition.pruner = "median";
  two.definition.objectives = {*parse_study_objective("auc"), *parse_study_objective("bundle_kb")};
  auto front = run_study(*registry, two);
  ASSERT_TRUE(front.ok()) << front.status().message();
  EXPECT_EQ(front->trials.size(), 6u);
}

// An MLP reports its validation loss per epoch as boosting does per round: the pruner stops the
// weak trials' epochs.
TEST(Tuning, AshaPrunesMlpTrialsOnTheirValidationEpochs) {
  TempDir dir;
  auto registry = open_registry(dir);
  StudyRequest request = small_study("mlp-pruned", 14);
  request.definition.spec.model = "mlp";
  request.definition.spec.params = {"epochs=8", "hidden_units=16"};
  auto space = tune::parse_search_space(
      "params:\n  learning_rate: {type: float, low: 0.00001, high: 0.05, log: true}\n", "test space", "mlp");
  ASSERT_TRUE(space.ok()) << space.status().message();
  request.definition.space = *space;
  request.definition.sampler = "random";
  request.definition.pruner = "asha:1:2";
  auto study = run_study(*registry, request);
  ASSERT_TRUE(study.ok()) << study.status().message();
  EXPECT_EQ(count_state(*study, "complete") + count_state(*study, "pruned"), 14u);
  EXPECT_GE(count_state(*study, "pruned"), 1u);
  for (const auto& view : study->trials) {
    EXPECT_FALSE(view.trial.intermediate.empty()) << view.trial.message;
    if (view.trial.state != "pruned") continue;
    EXPECT_TRUE(view.trial.message.starts_with("pruned at epoch")) << view.trial.message;
    EXPECT_LT(view.trial.intermediate.rbegin()->first, 8);
  }
  request = small_study("logistic-pruned", 2);
  request.definition.spec.model = "logistic";
  request.definition.spec.params.clear();
  request.definition.space = *tune::default_search_space("logistic");
  request.definition.pruner = "asha";
  auto refused = run_study(*registry, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("gbdt and mlp"), std::string::npos) << refused.status().message();
}

TEST(Tuning, ParallelWorkersNeitherLoseNorRepeatTrials) {
  TempDir dir;
  auto registry = open_registry(dir);
  StudyRequest request = small_study("parallel", 6);
  request.parallel = 2;
  auto study = run_study(*registry, request);
  ASSERT_TRUE(study.ok()) << study.status().message();
  ASSERT_EQ(study->trials.size(), 6u);
  std::set<std::string> runs;
  for (std::size_t i = 0; i < study->trials.size(); ++i) {
    EXPECT_EQ(study->trials[i].trial.number, static_cast<std::int64_t>(i));
    EXPECT_EQ(study->trials[i].trial.state, "complete") << study->trials[i].trial.message;
    runs.insert(study->trials[i].trial.run_id);
  }
  EXPECT_EQ(runs.size(), 6u);
}

TEST(Tuning, TheFirstTrialsAllFailingStopTheStudy) {
  TempDir dir;
  auto registry = open_registry(dir);
  // A slice value no row has: every trial's objective is NaN.
  StudyRequest request = small_study("nan", 10);
  request.definition.spec.slice = "term";
  request.definition.objectives = {*parse_study_objective("auc@no_such_term")};
  auto study = run_study(*registry, request);
  ASSERT_EQ(study.status().code(), StatusCode::kFailedPrecondition) << study.status().message();
  EXPECT_NE(study.status().message().find("NaN"), std::string::npos) << study.status().message();
  auto stored = read_study(*registry, "nan");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->trials.size(), 3u);
  EXPECT_EQ(count_state(*stored, "failed"), 3u);

  // The worst slice is a measure like any other.
  StudyRequest worst = small_study("worst", 2);
  worst.definition.spec.slice = "term";
  worst.definition.objectives = {*parse_study_objective("auc@worst")};
  auto sliced = run_study(*registry, worst);
  ASSERT_TRUE(sliced.ok()) << sliced.status().message();
  for (const auto& view : sliced->trials) {
    EXPECT_LE(view.trial.measures.at("auc@worst"), view.trial.measures.at("auc") + 0.2);
  }
}

TEST(Tuning, RefusesWhatCannotBeAStudy) {
  TempDir dir;
  auto registry = open_registry(dir);
  auto message = [&](const StudyRequest& request) {
    auto study = run_study(*registry, request);
    EXPECT_FALSE(study.ok());
    return study.status().message();
  };
  auto objective = parse_study_objective("acu");
  ASSERT_FALSE(objective.ok());
  EXPECT_NE(objective.status().message().find("did you mean 'auc'"), std::string::npos);
  EXPECT_FALSE(parse_study_objective("auc:sideways").ok());
  EXPECT_FALSE(parse_study_objective("bundle_kb@worst").ok());
  EXPECT_FALSE(parse_study_constraint("p95_us<").ok());
  EXPECT_FALSE(parse_study_constraint("p95_us<=nan").ok());
  EXPECT_FALSE(parse_study_constraint("p95_us<=1e999").ok());
  EXPECT_FALSE(parse_study_constraint("<=5").ok());
  EXPECT_TRUE(parse_study_constraint("recall>=0.6").ok());

  StudyRequest request = small_study("bad", 2);
  request.budget_seconds = 0.0;
  EXPECT_NE(message(request).find("--budget"), std::string::npos);
  request = small_study("bad", 2);
  request.budget_seconds = 1e300;
  EXPECT_NE(message(request).find("--budget"), std::string::npos);
  request = small_study("bad", 2);
  request.parallel = 0;
  EXPECT_NE(message(request).find("--parallel"), std::string::npos);
  request = small_study("bad name!", 2);
  EXPECT_FALSE(run_study(*registry, request).ok());
  request = small_study("bad", 0);
  EXPECT_NE(message(request).find("--trials"), std::string::npos);
  request = small_study("bad", 2);
  request.definition.spec.params.push_back("max_depth=3");
  EXPECT_NE(message(request).find("both fixed"), std::string::npos);
  request = small_study("bad", 2);
  request.definition.objectives = {*parse_study_objective("cost")};
  EXPECT_NE(message(request).find("--costs"), std::string::npos);
  request = small_study("bad", 2);
  request.definition.objectives = {*parse_study_objective("train_mb")};
  request.parallel = 2;
  EXPECT_NE(message(request).find("--parallel 1"), std::string::npos);
  request = small_study("bad", 2);
  request.definition.sampler = "bayes";
  EXPECT_NE(message(request).find("unknown sampler"), std::string::npos);
  request = small_study("bad", 2);
  request.definition.objectives = {*parse_study_objective("auc@worst")};
  EXPECT_NE(message(request).find("--slice"), std::string::npos);
  request = small_study("bad", 2);
  request.definition.objectives = {*parse_study_objective("rmse")};
  EXPECT_NE(message(request).find("not measured for this task"), std::string::npos);
  request = small_study("bad-from", 2);
  request.definition.from_study = "nope";
  EXPECT_NE(message(request).find("no study named 'nope'"), std::string::npos);
  StudyRequest resume;
  resume.study = "never-made";
  resume.resume = true;
  EXPECT_EQ(run_study(*registry, resume).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(read_study(*registry, "never-made").status().code(), StatusCode::kNotFound);
}

TEST(Tuning, AWarmStartReadsTheEarlierStudy) {
  TempDir dir;
  auto registry = open_registry(dir);
  ASSERT_TRUE(run_study(*registry, small_study("first", 4)).ok());
  StudyRequest second = small_study("second", 2);
  second.definition.from_study = "first";
  auto study = run_study(*registry, second);
  ASSERT_TRUE(study.ok()) << study.status().message();
  EXPECT_EQ(study->trials.size(), 2u);
  EXPECT_EQ(study->definition.from_study, "first");
}

TEST(AutoMl, SpendsTheBudgetAcrossFamiliesAndRegistersTheWinner) {
  TempDir dir;
  auto registry = open_registry(dir);
  AutoMlRequest request;
  request.study = "auto";
  request.spec.data = data_path("lending_club.csv");
  request.spec.target = "Class";
  request.spec.threads = 2;
  request.budget_seconds = 8;
  request.register_as = "lending";
  const auto started = std::chrono::steady_clock::now();
  auto result = run_automl(*registry, request);
  ASSERT_TRUE(result.ok()) << result.status().message();
  // The budget holds: a trial cut short ends at the deadline (with a little time to record it).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 8 + 5);
  EXPECT_EQ(result->objective.measure, "auc");
  ASSERT_EQ(result->leaderboard.size(), 3u);
  std::set<std::string> families;
  for (const auto& entry : result->leaderboard) families.insert(entry.family);
  EXPECT_EQ(families, (std::set<std::string>{"logistic", "gbdt", "mlp"}));
  const AutoMlEntry& winner = result->leaderboard.front();
  ASSERT_TRUE(winner.best.has_value());
  EXPECT_GT(winner.best->trial.measures.at("p95_us"), 0);
  for (const auto& entry : result->leaderboard) {
    if (entry.best) {
      EXPECT_LE(entry.best->objective_values[0], winner.best->objective_values[0]);
    }
  }
  ASSERT_TRUE(result->registered.has_value());
  // The best averaging family's top trials were averaged, measured as a trial and recorded as a
  // run; registered only when better than every family's best.
  if (result->ensemble) {
    const AutoMlEnsemble& ensemble = *result->ensemble;
    EXPECT_GE(ensemble.members.size(), 2u);
    EXPECT_LE(ensemble.members.size(), 3u);
    EXPECT_TRUE(ensemble.family == "gbdt" || ensemble.family == "logistic") << ensemble.family;
    EXPECT_EQ(ensemble.value, ensemble.measures.at("auc"));
    EXPECT_GT(ensemble.measures.at("p95_us"), 0);
    EXPECT_EQ(ensemble.better, ensemble.value > winner.best->objective_values[0]);
    auto run = registry->runs().get(ensemble.run_id);
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_EQ(run->status, "FINISHED");
    EXPECT_EQ(run->bundle_sha256, ensemble.bundle_sha256);
    EXPECT_NE(run->tags.at("slipway.ensemble").find(ensemble.members.front().trial.run_id), std::string::npos);
    EXPECT_EQ(result->registered->run_id, ensemble.better ? ensemble.run_id : winner.best->trial.run_id);
  } else {
    EXPECT_FALSE(result->ensemble_note.empty());
    EXPECT_EQ(result->registered->run_id, winner.best->trial.run_id);
  }
  // Each family's trials are a study of their own.
  EXPECT_TRUE(read_study(*registry, "auto-" + winner.family).ok());

  request.budget_seconds = 0;
  EXPECT_EQ(run_automl(*registry, request).status().code(), StatusCode::kInvalidArgument);
  request.budget_seconds = 1;
  request.objectives = {*parse_study_objective("cost")};
  EXPECT_EQ(run_automl(*registry, request).status().code(), StatusCode::kInvalidArgument);
  request.objectives.clear();
  request.budget_seconds = 1;
  request.families = {"linear"};
  EXPECT_EQ(run_automl(*registry, request).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slipway::pipeline
