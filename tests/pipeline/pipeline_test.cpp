// pipeline::run_training in process: the outcome, the run and version it leaves, the contract on
// failure; resolve_reference, evaluate_file and score_file on what it trained.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "slipway/pipeline.h"
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

TrainSpec small_gbdt_spec() {
  TrainSpec spec;
  spec.data = data_path("lending_club.csv");
  spec.target = "Class";
  spec.model = "gbdt";
  spec.params = {"rounds=10"};
  spec.register_as = "lending";
  return spec;
}

TEST(Pipeline, TrainsRegistersAndReportsTheOutcome) {
  TempDir dir;
  auto registry = open_registry(dir);
  int rounds_seen = 0;
  bool fit_done = false;
  TrainCallbacks callbacks;
  callbacks.on_round = [&](const train::RoundMetrics&, int) { ++rounds_seen; };
  callbacks.on_fit_done = [&] { fit_done = true; };
  auto outcome = run_training(*registry, small_gbdt_spec(), callbacks);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();

  EXPECT_EQ(rounds_seen, 10);
  EXPECT_TRUE(fit_done);
  EXPECT_FALSE(outcome->run_id.empty());
  EXPECT_EQ(outcome->summary.iterations, 10);
  EXPECT_GT(outcome->summary.rows_used, 0u);
  EXPECT_GT(outcome->evaluation.rows, 0u);
  EXPECT_EQ(outcome->summary.rows_used + outcome->evaluation.rows, 9857u);
  double auc = 0;
  for (const auto& [name, value] : outcome->evaluation.overall.values) {
    if (name == "auc") auc = value;
  }
  EXPECT_GT(auc, 0.6);
  EXPECT_EQ(outcome->bundle_sha256.size(), 64u);
  ASSERT_TRUE(outcome->registered.has_value());
  EXPECT_EQ(outcome->registered->model, "lending");
  EXPECT_EQ(outcome->registered->version, 1);
  EXPECT_EQ(outcome->registered->bundle_sha256, outcome->bundle_sha256);

  auto run = registry->runs().get(outcome->run_id);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->status, "FINISHED");
  EXPECT_EQ(run->bundle_sha256, outcome->bundle_sha256);
  EXPECT_EQ(run->params.at("model"), "gbdt");

  // The stored spec replays: it reads back to the spec trained.
  TrainSpec replayed;
  ASSERT_TRUE(load_spec_text(run->spec, "stored spec", replayed).ok());
  EXPECT_EQ(replayed.target, "Class");
  EXPECT_EQ(replayed.model, "gbdt");
  EXPECT_EQ(replayed.register_as, "lending");
}

TEST(Pipeline, AFailingSpecStartsNoRunAndRegistersNothing) {
  TempDir dir;
  auto registry = open_registry(dir);
  TrainSpec spec = small_gbdt_spec();
  spec.target = "no_such_column";
  auto outcome = run_training(*registry, spec);
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.status().message().find("no_such_column"), std::string::npos) << outcome.status().message();
  auto runs = registry->runs().list(10);
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->empty());
  auto models = registry->models().list();
  ASSERT_TRUE(models.ok());
  EXPECT_TRUE(models->empty());

  TrainSpec no_target = small_gbdt_spec();
  no_target.target.clear();
  EXPECT_EQ(run_training(*registry, no_target).status().code(), StatusCode::kInvalidArgument);
}

TEST(Pipeline, AFailureAfterTheRunStartsMarksItFailedAndRegistersNothing) {
  TempDir dir;
  auto registry = open_registry(dir);
  TrainSpec spec = small_gbdt_spec();
  spec.bundle_out = dir.file("no_such_folder/model.slip");  // written after the bundle is stored
  auto outcome = run_training(*registry, spec);
  ASSERT_FALSE(outcome.ok());
  auto runs = registry->runs().list(10);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, "FAILED");
  auto models = registry->models().list();
  ASSERT_TRUE(models.ok());
  EXPECT_TRUE(models->empty());
}

TEST(Pipeline, ResolvesReferencesAndScoresAFile) {
  TempDir dir;
  auto registry = open_registry(dir);
  TrainSpec spec = small_gbdt_spec();
  spec.bundle_out = dir.file("model.slip");
  auto outcome = run_training(*registry, spec);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();

  auto by_name = resolve_reference(registry.get(), "lending@1");
  ASSERT_TRUE(by_name.ok()) << by_name.status().message();
  EXPECT_EQ(by_name->description, "lending@1");
  EXPECT_EQ(by_name->sha256, outcome->bundle_sha256);
  auto latest = resolve_reference(registry.get(), "lending");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->sha256, outcome->bundle_sha256);

  EXPECT_TRUE(names_bundle_file(spec.bundle_out));
  auto by_file = resolve_reference(nullptr, spec.bundle_out);
  ASSERT_TRUE(by_file.ok()) << by_file.status().message();
  EXPECT_EQ(by_file->sha256, outcome->bundle_sha256);

  EXPECT_EQ(resolve_reference(registry.get(), "lending@7").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(resolve_reference(nullptr, "lending@1").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(resolve_reference(nullptr, dir.file("missing.slip")).status().code(), StatusCode::kNotFound);

  auto evaluation = evaluate_file(*by_name, data_path("lending_club.csv"), "");
  ASSERT_TRUE(evaluation.ok()) << evaluation.status().message();
  EXPECT_EQ(evaluation->evaluation.rows, 9857u);

  auto scored = score_file(*by_name, data_path("lending_club.csv"), {.out = dir.file("scores.csv")});
  ASSERT_TRUE(scored.ok()) << scored.status().message();
  EXPECT_EQ(scored->predictions.rows, 9857u);
  EXPECT_EQ(scored->labels.size(), 9857u);
  EXPECT_TRUE(std::filesystem::exists(dir.file("scores.csv")));
  EXPECT_EQ(scored->to_csv().substr(0, 18), "probability,label\n");
}

// A threshold rule is applied to rows held out of the fit, recorded in the bundle and the run,
// replayed, and used by the test metrics; the --ignore'd column is recorded as an unused input.
TEST(Pipeline, AThresholdRuleIsChosenOnHeldOutRowsAndTheIgnoredColumnsStayAcceptable) {
  TempDir dir;
  auto registry = open_registry(dir);
  TrainSpec spec = small_gbdt_spec();
  spec.ignore = {"addr_state"};
  spec.threshold = "recall>=0.5";
  auto outcome = run_training(*registry, spec);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  const model::Manifest& manifest = outcome->summary.bundle->manifest();
  EXPECT_EQ(manifest.threshold_rule, "recall>=0.5");
  EXPECT_GT(manifest.decision_threshold, 0.0);
  EXPECT_LT(manifest.decision_threshold, 1.0);
  EXPECT_EQ(manifest.unused_inputs, std::vector<std::string>{"addr_state"});
  // Held out of the fit: a fifth of the training split (about 1,577 of 7,886 rows).
  std::size_t fitted_and_tested = outcome->summary.rows_used + outcome->evaluation.rows;
  EXPECT_LT(fitted_and_tested, 9857u - 1500u);
  EXPECT_GT(fitted_and_tested, 9857u - 1700u);
  EXPECT_GT(outcome->evaluation.overall.get("recall"), 0.3);
  EXPECT_FALSE(std::isnan(outcome->evaluation.overall.get("pr_auc")));
  auto stored = resolve_reference(registry.get(), "lending");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->bundle->manifest().decision_threshold, manifest.decision_threshold);
  EXPECT_TRUE(stored->bundle->manifest().metrics.contains("test_pr_auc"));
  auto run = registry->runs().get(outcome->run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->params.at("threshold"), "recall>=0.5");
  TrainSpec replayed;
  ASSERT_TRUE(load_spec_text(run->spec, "stored spec", replayed).ok());
  EXPECT_EQ(replayed.threshold, "recall>=0.5");

  spec.threshold = "precision>=1.5";
  EXPECT_EQ(run_training(*registry, spec).status().code(), StatusCode::kInvalidArgument);
  spec.threshold = "f1";
  spec.threshold_fraction = 1e-300;
  EXPECT_NE(run_training(*registry, spec).status().message().find("raise --threshold-fraction"), std::string::npos);
  spec.threshold_fraction = 0.2;
  spec.target = "int_rate";  // refused before any fitting
  EXPECT_EQ(run_training(*registry, spec).status().message(),
            "--threshold applies to binary classification; 'int_rate' holds more than 2 distinct values");
}

// A bare NAME is the production alias where there is one, else the newest version: in the CLI,
// the server, batch, monitor and retrain alike, since they all resolve through the registry.
TEST(Pipeline, ABareNameIsTheProductionAliasElseTheNewest) {
  TempDir dir;
  auto registry = open_registry(dir);
  TrainSpec spec = small_gbdt_spec();
  ASSERT_TRUE(run_training(*registry, spec).ok());
  spec.params = {"rounds=5"};
  ASSERT_TRUE(run_training(*registry, spec).ok());
  EXPECT_EQ(resolve_reference(registry.get(), "lending")->description, "lending@2");
  ASSERT_TRUE(registry->models().set_alias("lending", "production", 1).ok());
  EXPECT_EQ(resolve_reference(registry.get(), "lending")->description, "lending@1");
  EXPECT_EQ(resolve_reference(registry.get(), "lending@latest")->description, "lending@2");
}

// When a retrain policy is due, at chosen times: an alert of the kind it watches that started
// after the last retraining, a schedule counted from the last registered candidate, a cooldown.
TEST(Retraining, IsDueOnAlertsOnScheduleAndNeverInTheCooldown) {
  TempDir dir;
  auto registry = open_registry(dir);
  auto trained = run_training(*registry, small_gbdt_spec());
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  std::int64_t registered_ms = trained->registered->created_ms;
  RetrainPolicy policy = retrain_policy_schema().defaults();
  policy.model = "lending";
  policy.data = data_path("lending_club.csv");
  policy.on = "performance,schedule";
  policy.every = std::chrono::seconds(3600);
  ASSERT_TRUE(check_retrain_policy(policy).ok());
  auto due_at = [&](std::int64_t now_ms) {
    auto decision = retrain_due(*registry, policy, now_ms);
    EXPECT_TRUE(decision.ok()) << decision.status().message();
    return decision.ok() ? *decision : RetrainDecision{};
  };
  EXPECT_FALSE(due_at(registered_ms + 1000).due);
  EXPECT_NE(due_at(registered_ms + 1000).reason.find("the schedule is due in 59m 59s"), std::string::npos);
  EXPECT_TRUE(due_at(registered_ms + 3'600'000).due);
  // A drift alert is not a performance alert; a metric drop is.
  ASSERT_TRUE(registry->models().record_alerts({{"lending", "input:int_rate", true, 0.5, registered_ms - 10}}).ok());
  EXPECT_FALSE(due_at(registered_ms + 2000).due);
  ASSERT_TRUE(registry->models().record_alerts({{"lending", "metric_drop:auc", true, 0.08, registered_ms - 10}}).ok());
  auto decision = due_at(registered_ms + 2000);
  EXPECT_TRUE(decision.due);
  EXPECT_EQ(decision.reason.rfind("performance: metric_drop:auc firing for 2s", 0), 0u) << decision.reason;

  // A retraining started after the alert: the alert is spent, and the cooldown holds everything.
  registry::RetrainingRecord record{.model = "lending", .reason = "test", .baseline_version = 1};
  auto id = registry->retraining().start(record);
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto started = registry->retraining().list("lending", 1);
  ASSERT_TRUE(started.ok() && started->size() == 1u);
  std::int64_t started_ms = started->front().started_ms;
  EXPECT_NE(due_at(started_ms + 1000).reason.find("cooling down: retraining #1 started 1s ago (cooldown 6h 0m)"),
            std::string::npos);
  policy.cooldown = std::chrono::seconds(0);
  EXPECT_FALSE(due_at(started_ms + 1000).due);
  EXPECT_NE(due_at(started_ms + 1000).reason.find("no performance alert fired since the last retraining"),
            std::string::npos);
  // An unfinished retraining registered nothing: the schedule still counts from the version.
  EXPECT_TRUE(due_at(registered_ms + 3'600'000).due);
}

TEST(Retraining, PolicyKeysAreDocumented) {
  std::string docs = *read_file(slipway::testing::source_dir() + "/docs/cli.md");
  std::string table = retrain_policy_schema().markdown_table();
  EXPECT_NE(docs.find(table), std::string::npos) << "docs/cli.md lacks the retrain policy keys:\n" << table;
}

}  // namespace
}  // namespace slipway::pipeline
